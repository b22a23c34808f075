"""Retry policies per binding: how long a failed attempt's Work backs off, how many failures in a
row park it, and which failures are not worth another attempt.

A binding's ``retry`` mapping (validated by :func:`retry_policy_problems`, read by
:func:`retry_policy_from`) overrides the defaults, which stay the engine's own: 2 s doubling to
5 minutes, no jitter, ``CONDUIT_MAX_ATTEMPTS`` failures in a row. A Python target raises
:class:`worklife.child.NonRetryable` or :class:`worklife.child.RetryAfter`; a command exits
with a code the policy names. :func:`retry_decision` is the one rule: pure, given the failure
count, how the attempt ended and a random draw for the jitter.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings

BACKOFF_START = 2.0
BACKOFF_FACTOR = 2.0
BACKOFF_CAP = 300.0

RETRY_KEYS = (
    "max_attempts",
    "initial",
    "factor",
    "max_interval",
    "jitter",
    "non_retryable",
    "retry_after_exit",
)


def default_max_attempts() -> int:
    """Attempts that may fail in a row before the Work is parked (``CONDUIT_MAX_ATTEMPTS``)."""
    return int(getattr(settings, "CONDUIT_MAX_ATTEMPTS", 5))


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """A binding's retry policy. ``max_attempts=None`` follows ``CONDUIT_MAX_ATTEMPTS``;
    ``non_retryable`` names Python exception types (any class in the raised one's hierarchy),
    ``non_retryable_exits`` a command's exit codes; ``retry_after_exit`` maps an exit code to
    the seconds to wait before the next attempt."""

    max_attempts: int | None = None
    initial: float = BACKOFF_START
    factor: float = BACKOFF_FACTOR
    max_interval: float = BACKOFF_CAP
    jitter: float = 0.0
    non_retryable: frozenset[str] = frozenset()
    non_retryable_exits: frozenset[int] = frozenset()
    retry_after_exit: Mapping[int, float] | None = None

    @property
    def attempts(self) -> int:
        return self.max_attempts if self.max_attempts is not None else default_max_attempts()

    def backoff(self, failures: int, draw: float = 0.5) -> timedelta:
        """The wait after ``failures`` failures in a row; ``draw`` in [0, 1) spreads it by
        ``jitter`` (a fraction: 0.1 is ±10 %; 0.5 draws no spread)."""
        base = min(self.initial * self.factor ** max(failures - 1, 0), self.max_interval)
        spread = base * self.jitter * (2 * draw - 1)
        return timedelta(seconds=max(base + spread, 0.0))

    def describe(self) -> str:
        """One line for pages: ``5 attempts, 2 s ×2 up to 300 s``."""
        text = f"{self.attempts} attempts, {self.initial:g} s ×{self.factor:g} up to {self.max_interval:g} s"
        if self.jitter:
            text += f", jitter ±{self.jitter:.0%}"
        if self.non_retryable or self.non_retryable_exits:
            names = sorted(self.non_retryable) + [f"exit {c}" for c in sorted(self.non_retryable_exits)]
            text += f"; never retried: {', '.join(names)}"
        return text


DEFAULT_POLICY = RetryPolicy()


@dataclass(frozen=True, slots=True)
class FailureHint:
    """What an attempt's end says about retrying it: the Python exception's type names (its
    hierarchy), a non-retryable flag, the seconds a target asked to wait, the exit status."""

    types: tuple[str, ...] = ()
    non_retryable: bool = False
    retry_after: float | None = None
    exit_status: int | None = None


@dataclass(frozen=True, slots=True)
class RetryDecision:
    """After a failure: park the Work now, or back off ``delay``; ``why`` says which rule."""

    park: bool
    delay: timedelta
    why: str = ""


def retry_decision(
    policy: RetryPolicy | None, *, failures: int, hint: FailureHint, draw: float = 0.5
) -> RetryDecision:
    """Whether Work whose attempt just failed (``failures`` in a row, this one counted) parks, or
    how long it backs off."""
    policy = policy or DEFAULT_POLICY
    if hint.non_retryable:
        return RetryDecision(True, timedelta(0), "the target raised a non-retryable error")
    matched = policy.non_retryable.intersection(hint.types)
    if matched:
        return RetryDecision(True, timedelta(0), f"{sorted(matched)[0]} is non-retryable for this binding")
    if hint.exit_status is not None and hint.exit_status in policy.non_retryable_exits:
        return RetryDecision(True, timedelta(0), f"exit status {hint.exit_status} is non-retryable")
    if failures >= policy.attempts:
        # The budget's own wording is the Work's ("parked after N failures"): no extra reason.
        return RetryDecision(True, timedelta(0))
    if hint.retry_after is not None:
        return RetryDecision(False, timedelta(seconds=max(hint.retry_after, 0.0)), "the target asked")
    after = (policy.retry_after_exit or {}).get(hint.exit_status) if hint.exit_status is not None else None
    if after is not None:
        return RetryDecision(False, timedelta(seconds=after), f"exit status {hint.exit_status}")
    return RetryDecision(False, policy.backoff(failures, draw))


def jitter_draw() -> float:
    """A uniform draw for :meth:`RetryPolicy.backoff` (not for security)."""
    return random.random()  # noqa: S311 - spreading retries, not a secret


# --- the configuration's ``retry`` mapping --------------------------------------------------------


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _exit_code(value: Any) -> bool:
    # YAML reads ``75:`` as a number, JSON (and a stored policy) as text.
    return type(value) is int or (isinstance(value, str) and value.isdigit())


def retry_policy_problems(raw: Any) -> list[tuple[str, str]]:
    """Problems of a binding's ``retry`` mapping, each (sub-place, message); none: valid."""
    if not isinstance(raw, dict):
        return [("", f"expected a mapping ({', '.join(RETRY_KEYS)})")]
    problems: list[tuple[str, str]] = []
    for key in raw:
        if key not in RETRY_KEYS:
            problems.append((str(key), f"unknown key {key!r} (expected one of: {', '.join(RETRY_KEYS)})"))
    attempts = raw.get("max_attempts")
    if attempts is not None and (type(attempts) is not int or not 1 <= attempts <= 1000):
        problems.append(("max_attempts", "expected a whole number from 1 to 1000"))
    for key, low, high in (("initial", 0.0, 86400.0), ("max_interval", 0.0, 86400.0), ("factor", 1.0, 10.0)):
        value = raw.get(key)
        if value is not None and (not _number(value) or not low <= value <= high):
            problems.append((key, f"expected a number from {low:g} to {high:g}"))
    jitter = raw.get("jitter")
    if jitter is not None and (not _number(jitter) or not 0 <= jitter <= 1):
        problems.append(("jitter", "expected a fraction from 0 to 1 (0.1 spreads each wait by ±10 %)"))
    names = raw.get("non_retryable")
    if names is not None and (
        not isinstance(names, list)
        or not all((isinstance(n, str) and n.isidentifier()) or type(n) is int for n in names)
    ):
        problems.append(
            ("non_retryable", "expected a list of Python exception names (ValueError) or exit codes (3)")
        )
    exits = raw.get("retry_after_exit")
    if exits is not None and (
        not isinstance(exits, dict)
        or not all(_exit_code(c) and _number(s) and 0 <= s <= 86400 for c, s in exits.items())
    ):
        problems.append(("retry_after_exit", "expected exit codes and seconds to wait ({75: 60})"))
    return problems


def retry_policy_from(raw: Mapping[str, Any] | None) -> RetryPolicy | None:
    """The policy a valid ``retry`` mapping declares, or ``None`` (the defaults)."""
    if not raw:
        return None
    names: Iterable[Any] = raw.get("non_retryable") or ()
    exits = raw.get("retry_after_exit") or {}
    return RetryPolicy(
        max_attempts=raw.get("max_attempts"),
        initial=float(raw.get("initial", BACKOFF_START)),
        factor=float(raw.get("factor", BACKOFF_FACTOR)),
        max_interval=float(raw.get("max_interval", BACKOFF_CAP)),
        jitter=float(raw.get("jitter", 0.0)),
        non_retryable=frozenset(n for n in names if isinstance(n, str)),
        non_retryable_exits=frozenset(n for n in names if type(n) is int),
        retry_after_exit={int(c): float(s) for c, s in exits.items()} or None,
    )


Draw = Callable[[], float]
