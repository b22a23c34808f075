"""Route failures (R10): a :class:`RouteError` carries one of seven codes, or
``conflicting_identity`` for an Event whose targets disagree (R8), retried and given up on as
the retried codes are (R14, R15)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from infra.frozen import frozen


class RouteErrorCode(StrEnum):
    HANDLER_MISSING = "handler_missing"  # the route's handler is not registered
    BINDING_INVALID = "binding_invalid"  # the route's binding is gone or cannot take its policy
    POLICY_INVALID = "policy_invalid"  # the active policy is unknown, or unsupported with no fallback
    HANDLER_INVALID = "handler_invalid"  # the handler said the input is malformed (extension.Invalid)
    HANDLER_FAILED = "handler_failed"  # extension.Unavailable or an OSError (a subclass too): transient
    HANDLER_TIMEOUT = "handler_timeout"  # no decision before the deadline
    HANDLER_PANIC = "handler_panic"  # any other exception; carries the exception and its stack
    CONFLICTING_IDENTITY = "conflicting_identity"  # the Event's targets disagree (R8, R26): not a handler's


RETRIED_CODES = frozenset(
    {RouteErrorCode.HANDLER_FAILED, RouteErrorCode.HANDLER_TIMEOUT, RouteErrorCode.CONFLICTING_IDENTITY}
)


@frozen
class RouteError:
    """A route failure on one Event: the route that failed, the code, the error text (for a
    panic, the exception and its stack), and when a retry may happen (``backoff_until``)."""

    code: RouteErrorCode
    message: str
    route: str = ""
    stack: str = ""
    attempts: int = 0
    backoff_until: datetime | None = None

    @property
    def retried(self) -> bool:
        return self.code in RETRIED_CODES

    @property
    def error_text(self) -> str:
        """What the RouteRecord and ``route.decided`` keep as ``error``."""
        return f"{self.message}\n{self.stack}".strip() if self.stack else self.message
