"""Fixtures shared by the operator control tests. None is autouse; each module defines its own
``operator``, whom ``console`` signs in."""

from __future__ import annotations

import pytest

from tests.routing.routerkit import apply


@pytest.fixture
def live(clock):
    """The live configuration: scope acme with bindings triage, plain and inbox (routerkit)."""
    return apply(clock)


@pytest.fixture
def console(client, operator):
    client.force_login(operator)
    return client
