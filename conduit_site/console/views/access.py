"""Who may open a console page: a signed-in user with the page's permission.

Anonymous users are sent to the login page (Django's ``login_required``); a signed-in user
without the permission gets 403. Roles group the permissions (``routing.access.roles``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

View = Callable[..., HttpResponse]


def permission_needed(permission: str) -> Callable[[View], View]:
    """Make a console view need a signed-in user (else the login page) with ``permission``
    (else 403)."""

    def decorator(view: View) -> View:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.has_perm(permission):
                raise PermissionDenied(f"You need the permission {permission} to see this page.")
            return view(request, *args, **kwargs)

        wrapper.console_permission = permission  # type: ignore[attr-defined]
        return login_required(wrapper)

    return decorator
