"""The read the web server makes before it reads an API body: whether a token is live."""

from __future__ import annotations

import pytest

from routing.access.selectors import api_token_live
from routing.models import ApiToken
from tests.routing.factories import T0, api_token_with_secret


@pytest.mark.django_db
def test_a_live_token_is_live_and_the_read_records_nothing():
    token, secret = api_token_with_secret()
    assert api_token_live(secret=secret)
    assert ApiToken.objects.get(pk=token.pk).last_used_at == token.last_used_at


@pytest.mark.django_db
def test_a_revoked_unknown_malformed_or_inactive_users_token_is_not_live():
    _, revoked = api_token_with_secret(revoked_at=T0)
    token, inactive = api_token_with_secret()
    token.user.is_active = False
    token.user.save(update_fields=["is_active"])
    _, live = api_token_with_secret()
    unknown = live[:-1] + ("A" if live[-1] != "A" else "B")
    for secret in (revoked, inactive, unknown, "not-a-token", ""):
        assert not api_token_live(secret=secret), secret
