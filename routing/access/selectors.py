"""Reads of API tokens."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models import QuerySet

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
