"""Fixtures shared by the site's tests. None is autouse; a module that defines its own fixture of
the same name keeps its own."""

from __future__ import annotations

import pytest

from tests.conduit_site.sitekit import PASSWORD
from tests.routing.factories import UserFactory, api_token_with_secret, apply_config
from tests.routing.routedkit import History


@pytest.fixture
def history(clock) -> History:
    return History(clock)


@pytest.fixture
def acme():
    """The default test configuration (scopes acme and acme/web), applied through the service."""
    return apply_config()


@pytest.fixture
def reader_auth():
    _, secret = api_token_with_secret(user__username="reader")
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def operator():
    user = UserFactory(username="operator")
    user.set_password(PASSWORD)
    user.save()
    return user
