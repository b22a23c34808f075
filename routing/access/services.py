"""API tokens: created (the secret shown once, only its digest stored), revoked, and
authenticated, each one transaction."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction

from causal.clock import Clock
from routing.access.roles import TOKEN_SCOPES
from routing.access.tokens import token_digest, token_generate, token_well_formed
from routing.config.validate import is_scope_path
from routing.models import ApiToken

# last_used_at is a hint for operators, not an audit log: write it at most once a minute per
# token so that a busy client does not turn every API call into a write.
TOKEN_USE_RESOLUTION = timedelta(minutes=1)
TOKEN_NAME_MAX = 100


class ApiTokenInvalid(ValueError):
    """A token operation is refused; ``field`` names the argument at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """A token just created, with its secret: the only time the secret exists in clear."""

    token: ApiToken
    secret: str


def api_token_create(
    *,
    user: AbstractBaseUser,
    name: str,
    clock: Clock,
    scopes: list[str] | None = None,
    default_scope: str = "",
) -> IssuedToken:
    """Create an API token for ``user``; the returned secret is shown once and never stored.

    ``scopes`` (names of ``routing.access.roles.TOKEN_SCOPES``) narrows the token to those actions;
    ``None`` lets it act with all of its user's permissions. ``default_scope`` is the scope path
    an Event the token offers without a scope takes ("": the configuration's default). Raises
    :class:`ApiTokenInvalid` for an inactive user, a bad name, an unknown scope or a malformed
    default scope path (nothing stored).
    """
    default_scope = default_scope.strip()
    if default_scope and not is_scope_path(default_scope):
        raise ApiTokenInvalid(
            "default_scope",
            f"{default_scope[:100]!r} is not a scope path (segments of letters, digits, '.', '_' or '-' "
            "joined by '/', at most 255 characters)",
        )
    if scopes is not None:
        unknown = sorted(set(scopes) - set(TOKEN_SCOPES))
        if unknown or not scopes:
            named = f"unknown scope {unknown[0]!r}" if unknown else "no scope"
            raise ApiTokenInvalid("scopes", f"{named}: choose from {', '.join(TOKEN_SCOPES)}")
        scopes = sorted(set(scopes))
    name = name.strip()
    if not name:
        raise ApiTokenInvalid("name", "a token needs a non-empty name")
    if len(name) > TOKEN_NAME_MAX:
        raise ApiTokenInvalid(
            "name", f"the name is {len(name)} characters long; the limit is {TOKEN_NAME_MAX}"
        )
    if not user.is_active:
        raise ApiTokenInvalid("user", f"user {user.get_username()!r} is inactive")
    with transaction.atomic():
        # Prefixes only name tokens for operators (the digest is the unique credential), so a
        # rare collision is simply avoided by drawing again.
        for _ in range(5):
            prefix, secret = token_generate()
            if not ApiToken.objects.filter(prefix=prefix).exists():
                break
        token = ApiToken.objects.create(
            user=user,
            name=name,
            prefix=prefix,
            digest=token_digest(secret),
            created_at=clock(),
            scopes=scopes,
            default_scope=default_scope,
        )
    return IssuedToken(token=token, secret=secret)


def api_token_create_for_username(
    *, username: str, name: str, clock: Clock, scopes: list[str] | None = None, default_scope: str = ""
) -> IssuedToken:
    """Create an API token for the user named ``username`` (see :func:`api_token_create`)."""
    user_model = get_user_model()
    try:
        user = user_model._default_manager.get_by_natural_key(username)
    except user_model.DoesNotExist:
        raise ApiTokenInvalid("USERNAME", f"no user named {username!r}") from None
    return api_token_create(user=user, name=name, clock=clock, scopes=scopes, default_scope=default_scope)


def api_token_revoke(*, prefix: str, clock: Clock) -> ApiToken:
    """Revoke the live token whose prefix is ``prefix``: it authenticates nothing from now on.

    Raises :class:`ApiTokenInvalid` when no token, or more than one, has that prefix, or when
    it was already revoked.
    """
    with transaction.atomic():
        tokens = list(ApiToken.objects.select_for_update().select_related("user").filter(prefix=prefix)[:2])
        if not tokens:
            raise ApiTokenInvalid("PREFIX", f"no API token has the prefix {prefix!r}")
        if len(tokens) > 1:
            raise ApiTokenInvalid(
                "PREFIX", f"several API tokens have the prefix {prefix!r}; revoke them in the admin"
            )
        token = tokens[0]
        if token.revoked_at is not None:
            raise ApiTokenInvalid(
                "PREFIX", f"API token {prefix} was already revoked at {token.revoked_at:%Y-%m-%d %H:%M:%S}Z"
            )
        token.revoked_at = clock()
        token.save(update_fields=["revoked_at"])
    return token


def api_token_authenticate(*, secret: str, clock: Clock) -> ApiToken | None:
    """The live token whose secret is ``secret`` (with its user), or ``None``.

    A revoked token, a token of an inactive user and a malformed secret authenticate
    nothing. Records when the token was last used (at most once a minute).
    """
    if not token_well_formed(secret):
        return None
    # Every API request runs this: two raw statements (a token, its user) cost a fifth of
    # the ORM's compiled select_related query, with the same model instances and converters.
    token = next(iter(ApiToken.objects.raw(_live_token_sql(), [token_digest(secret), True])), None)
    if token is None:
        return None
    user = next(iter(get_user_model().objects.raw(_user_sql(), [token.user_id])), None)
    if user is None:  # deleted since the read above
        return None
    token.user = user
    now = clock()
    if token.last_used_at is None or now - token.last_used_at >= TOKEN_USE_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


@functools.cache
def _live_token_sql() -> str:
    """A live token by digest: not revoked, of an active user (params: digest, True)."""
    quote = connection.ops.quote_name
    user = get_user_model()._meta
    token = ApiToken._meta
    return (
        f"SELECT t.* FROM {quote(token.db_table)} t JOIN {quote(user.db_table)} u "
        f"ON u.{quote(user.pk.column)} = t.{quote(token.get_field('user').column)} "
        f"WHERE t.{quote(token.get_field('digest').column)} = %s "
        f"AND t.{quote(token.get_field('revoked_at').column)} IS NULL "
        f"AND u.{quote(user.get_field('is_active').column)} = %s"
    )


@functools.cache
def _user_sql() -> str:
    """A user by primary key (param: the key)."""
    quote = connection.ops.quote_name
    user = get_user_model()._meta
    return f"SELECT * FROM {quote(user.db_table)} WHERE {quote(user.pk.column)} = %s"


# --- configuration --------------------------------------------------------------------------

# Applied generations are numbered max + 1 inside the transaction; on PostgreSQL one
# transaction-scoped advisory lock serialises numbering (the unique number is the backstop).
# SQLite serialises writers with BEGIN IMMEDIATE.
