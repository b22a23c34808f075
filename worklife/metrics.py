"""The Work engine's metrics: attempts started, completed, failed and parked, and how long they
ran, by scope and binding (names from the configuration: their number is bounded)."""

from __future__ import annotations

from infra.metrics import Counter, Histogram

LABELS = ("scope", "binding")
ATTEMPTS_STARTED = Counter(
    "conduit_attempts_started_total", "Attempts started, by scope and binding.", LABELS
)
ATTEMPTS_COMPLETED = Counter(
    "conduit_attempts_completed_total", "Attempts that completed their Work, by scope and binding.", LABELS
)
ATTEMPTS_FAILED = Counter(
    "conduit_attempts_failed_total",
    "Attempts that failed (an exception, a non-zero exit, a timeout, a start that failed), by scope "
    "and binding.",
    LABELS,
)
ATTEMPTS_PARKED = Counter(
    "conduit_attempts_parked_total",
    "Failed attempts that parked their Work (too many failures in a row), by scope and binding.",
    LABELS,
)
ATTEMPT_DURATION = Histogram(
    "conduit_attempt_duration_seconds",
    "How long attempts that completed or failed ran, in seconds, by scope and binding.",
    LABELS,
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
)


def attempt_started(scope: str, binding: str) -> None:
    ATTEMPTS_STARTED.inc(1, scope, binding)


def attempt_completed(scope: str, binding: str, seconds: float) -> None:
    ATTEMPTS_COMPLETED.inc(1, scope, binding)
    ATTEMPT_DURATION.observe(seconds, scope, binding)


def attempt_failed(scope: str, binding: str, seconds: float | None, *, parked: bool) -> None:
    """``seconds``: ``None`` for an attempt that never started running."""
    ATTEMPTS_FAILED.inc(1, scope, binding)
    if parked:
        ATTEMPTS_PARKED.inc(1, scope, binding)
    if seconds is not None:
        ATTEMPT_DURATION.observe(seconds, scope, binding)


FLOW_HOLDS = Counter(
    "conduit_flow_holds_total",
    "Claims flow control held back (a Work at a concurrency limit, throttled, debounced or "
    "batching), by kind.",
    ("kind",),
)


def flow_held(kind: str) -> None:
    FLOW_HOLDS.inc(1, kind)
