"""Sign-in throttling: django-axes' database handler, plus one structured log line per failure.

Axes counts failed sign-ins per (login, client address) and locks the pair out after
``AXES_FAILURE_LIMIT`` failures in a row, for ``AXES_COOLOFF_TIME``, even when the right password
comes next. Every failure, counted or refused by a lockout, is logged as ``auth.login_failed``
with the login name, the address, the path and the count; the password never reaches the log
(Django's ``user_login_failed`` signal carries the credentials with it masked already, and this
handler reads only the login name).
"""

from __future__ import annotations

import logging
from typing import Any

from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username
from django.http import HttpRequest

logger = logging.getLogger("conduit.auth")


class LoggingAxesHandler(AxesDatabaseHandler):
    """Axes' database handler that also logs each failed sign-in."""

    def user_login_failed(
        self, sender: Any, credentials: dict, request: HttpRequest | None = None, **kwargs: Any
    ) -> None:
        super().user_login_failed(sender, credentials, request, **kwargs)
        if request is None:
            logger.warning(
                "auth.login_failed", extra={"username": credentials.get("username"), "address": None}
            )
            return
        logger.warning(
            "auth.login_failed",
            extra={
                "username": get_client_username(request, credentials),
                "address": getattr(request, "axes_ip_address", None),
                "path": getattr(request, "axes_path_info", request.path),
                "failures": getattr(request, "axes_failures_since_start", None),
                "locked_out": bool(getattr(request, "axes_locked_out", False)),
            },
        )
