"""Reads of API tokens."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models import QuerySet

from routing.access.tokens import token_digest, token_well_formed
from routing.models import ApiToken


def api_tokens_list(*, username: str | None = None, include_revoked: bool = False) -> QuerySet[ApiToken]:
    """API tokens with their users, oldest first: live ones only unless ``include_revoked``,
    of one user when ``username`` is given."""
    tokens = ApiToken.objects.select_related("user").order_by("created_at", "id")
    if username is not None:
        tokens = tokens.filter(**{f"user__{get_user_model().USERNAME_FIELD}": username})
    if not include_revoked:
        tokens = tokens.filter(revoked_at__isnull=True)
    return tokens


def api_token_live(*, secret: str) -> bool:
    """Whether ``secret`` is a live token (not revoked, of an active user): what the web server
    asks before it reads an API request's body. Records nothing (the API's own authentication,
    :func:`routing.access.services.api_token_authenticate`, records the use)."""
    if not token_well_formed(secret):
        return False
    return ApiToken.objects.filter(
        digest=token_digest(secret), revoked_at__isnull=True, user__is_active=True
    ).exists()
