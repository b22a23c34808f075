"""Roles for people and scopes for API tokens: least privilege, in one table.

A person gets a *role* (``manage.py operator create NAME --role viewer|operator|admin``): a
group of the same name holding the role's permissions, created on demand and brought up to
date idempotently by :func:`role_groups_ensure`.

========  ==============================================================================
viewer    read: console pages, ``GET`` endpoints of the API, live updates (``routing.view_event``)
operator  the viewer's, and accept Events (``routing.accept_event``) and every operator control
          (skip, reroute, replay, cancel, retry, send input, create, rebind, pause)
admin     the operator's, and apply configurations (``routing.apply_configuration``), manage
          logins, groups and API tokens in the admin and unlock locked sign-ins there
          (Axes); staff, so the admin site opens
========  ==============================================================================

An API token acts with its user's permissions; one created with ``--only SCOPE,…`` is
narrowed further to the permissions of those scopes (:data:`TOKEN_SCOPES`): a webhook
sender's token is ``--only accept`` and cannot read what it sent.
"""

from __future__ import annotations

from enum import StrEnum

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import Group, Permission
from django.db import transaction

VIEW_EVENT = "routing.view_event"
ACCEPT_EVENT = "routing.accept_event"
APPLY_CONFIGURATION = "routing.apply_configuration"


class Role(StrEnum):
    VIEWER = "viewer"  # reads everything the console and the API show
    OPERATOR = "operator"  # also accepts Events and uses every operator control
    ADMIN = "admin"  # also applies configurations and manages logins; staff for the admin


# What an API token may be narrowed to (``api_token create NAME --only accept,read``), and the
# one permission each scope allows. A narrowed token has a permission only if its user has it too.
TOKEN_SCOPES: dict[str, str] = {
    "accept": ACCEPT_EVENT,
    "read": VIEW_EVENT,
    "skip": "routing.skip_event",
    "reroute": "routing.reroute_event",
    "replay": "routing.replay_event",
    "cancel": "worklife.cancel_work",
    "retry": "worklife.retry_work",
    "send": "worklife.send_input",
    "create": "worklife.create_work",
    "rebind": "worklife.rebind_work",
    "pause": "worklife.pause_work",
}

# What the admin role needs on django-axes' admin pages to unlock a locked sign-in.
AXES_UNLOCK = (
    "axes.view_accessattempt",
    "axes.delete_accessattempt",
    "axes.view_accesslog",
    "axes.view_accessfailurelog",
)

_VIEWER = (VIEW_EVENT,)
_OPERATOR = (*_VIEWER, *(perm for scope, perm in TOKEN_SCOPES.items() if scope != "read"))
# The admin site: read every history model, manage logins, groups and API tokens.
_ADMIN_SITE = (
    *(
        f"{app}.view_{model}"
        for app, models in {
            "causal": ("event", "eventkey", "kv", "causaldiagnostic"),
            "worklife": (
                "work",
                "correlationkey",
                "attempt",
                "workinput",
                "intent",
                "wait",
                "timer",
                "dependencysubscription",
            ),
            "routing": (
                "generation",
                "scope",
                "binding",
                "route",
                "routerecord",
                "impactrun",
                "impactrunchange",
            ),
        }.items()
        for model in models
    ),
    *(f"auth.{verb}_{model}" for model in ("user", "group") for verb in ("add", "change", "delete", "view")),
    *(f"routing.{verb}_apitoken" for verb in ("add", "change", "delete", "view")),
    # Sign-in lockouts (django-axes): read them, and unlock one by deleting its attempt.
    *AXES_UNLOCK,
)
_ADMIN = (*_OPERATOR, APPLY_CONFIGURATION, *_ADMIN_SITE)

ROLE_PERMISSIONS: dict[Role, tuple[str, ...]] = {
    Role.VIEWER: _VIEWER,
    Role.OPERATOR: _OPERATOR,
    Role.ADMIN: _ADMIN,
}


class RoleError(ValueError):
    """A role or token scope that does not exist; ``field`` names the argument at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def _permissions(names: tuple[str, ...]) -> list[Permission]:
    wanted = {tuple(name.split(".", 1)) for name in names}
    found = [
        permission
        for permission in Permission.objects.select_related("content_type").filter(
            codename__in={codename for _, codename in wanted}
        )
        if (permission.content_type.app_label, permission.codename) in wanted
    ]
    missing = wanted - {(p.content_type.app_label, p.codename) for p in found}
    if missing:
        # Permissions are created by migrate; a missing one means the database is not migrated.
        raise RoleError("role", f"permissions missing (run migrate): {sorted('.'.join(m) for m in missing)}")
    return found


def role_groups_ensure() -> dict[Role, Group]:
    """Create the group of every role, or set its permissions to the role's (idempotent)."""
    groups = {}
    with transaction.atomic():
        for role, names in ROLE_PERMISSIONS.items():
            group, _ = Group.objects.get_or_create(name=role.value)
            group.permissions.set(_permissions(names))
            groups[role] = group
    return groups


def role_parse(value: str) -> Role:
    """The role named ``value``, or :class:`RoleError` naming the roles there are."""
    try:
        return Role(value)
    except ValueError:
        raise RoleError("--role", f"unknown role {value!r}: choose {', '.join(Role)}") from None


def role_assign_in_tx(*, user: AbstractBaseUser, role: Role) -> None:
    """Make ``role`` the user's only role: its group, staff for admins only, never superuser."""
    assert transaction.get_connection().in_atomic_block, "role_assign_in_tx runs in a transaction"
    groups = role_groups_ensure()
    user.groups.remove(*(group for other, group in groups.items() if other is not role))
    user.groups.add(groups[role])
    user.is_staff = role is Role.ADMIN
    user.is_superuser = False
    user.save(update_fields=["is_staff", "is_superuser"])


def user_role(user: AbstractBaseUser) -> Role | None:
    """The role whose group the user is in (the highest, should there be several), or ``None``."""
    names = set(user.groups.values_list("name", flat=True))
    return next((role for role in reversed(Role) if role.value in names), None)


def token_scopes_parse(value: str) -> list[str]:
    """``accept,read`` as the list of scopes it names (sorted, each once), or :class:`RoleError`."""
    scopes = sorted({part.strip() for part in value.split(",") if part.strip()})
    if not scopes:
        raise RoleError("--only", f"name at least one scope: {', '.join(TOKEN_SCOPES)}")
    unknown = [scope for scope in scopes if scope not in TOKEN_SCOPES]
    if unknown:
        raise RoleError("--only", f"unknown scope {unknown[0]!r}: choose from {', '.join(TOKEN_SCOPES)}")
    return scopes


def token_allows(scopes: list[str] | None, permission: str) -> bool:
    """Whether a token narrowed to ``scopes`` (``None``: not narrowed) may use ``permission``."""
    return scopes is None or any(TOKEN_SCOPES[scope] == permission for scope in scopes)
