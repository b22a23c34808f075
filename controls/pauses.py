"""Operator controls for flow: pause and resume a scope, a binding, a route or a schedule, and
fire a schedule now — the one place the console, the API and the CLI call.

A pause names who and why, and may end by itself (``until``). Routing goes on: a paused scope's
or binding's Work takes its input and starts no attempt; a paused route's Events stay unrouted,
held in acceptance order, and route on resume; a paused schedule skips its fire times
(``worklife.pauses``, ``routing.holds``, ``routing.schedules``). The target must be in the live
configuration when it is paused; it can always be resumed.

Refusals raise :class:`PauseRefused` (HTTP 409, exit 1) and malformed input
:class:`PauseInvalid` (400, naming the field); nothing is stored then. Who may act is the
callers' decision (permission ``worklife.pause_work``; the CLI is trusted host access).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from causal.clock import Clock
from causal.models import Event
from controls.common import actor_name
from routing.config.effective import Configuration
from routing.config.selectors import live_generation, load_configuration
from routing.holds import route_held_release
from routing.schedules import ScheduleError, schedule_find, schedule_fire_now
from worklife.models import Pause, PauseKind
from worklife.pauses import PauseError, PauseTarget, active_pauses, pause_create, pause_end

PERMISSION = "worklife.pause_work"
KINDS = tuple(PauseKind.values)


class PauseRefused(Exception):
    """A pause, resume or fire-now the state or the configuration refuses (409)."""


class PauseInvalid(ValueError):
    """Malformed input (400); ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    def details(self) -> dict[str, Any]:
        return {"error": "invalid", "field": self.field, "message": self.message}


@dataclass(frozen=True, slots=True)
class PauseResult:
    pause: Pause
    released: int = 0  # a route's held Events made routable by its resume


_DURATION = re.compile(r"(\d{1,6})\s*([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
# An ISO 8601 time as ``until`` takes it; the API's document says ``until`` with UNTIL_PATTERN.
UNTIL_TIME_PATTERN = r"\d{4}-\d{2}-\d{2}([Tt ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?)?([Zz]|[+-]\d{2}:\d{2})?"
_TIME = re.compile(UNTIL_TIME_PATTERN)
UNTIL_PATTERN = rf"^(|\d{{1,6}}[smhdw]|{UNTIL_TIME_PATTERN})$"


def until_parse(text: str | None, *, now: datetime) -> datetime | None:
    """When a pause ends, as people type it: a duration from now (``30m``, ``2h``, ``1d``) or an
    ISO 8601 time (``2026-12-07T11:00:00Z``; UTC without an offset); ``None`` for none."""
    if text is None or not text.strip():
        return None
    text = text.strip()
    match = _DURATION.fullmatch(text.lower())
    if match is None and not _TIME.fullmatch(text):
        raise PauseInvalid(
            "until", f"expected a duration like 30m or 2h, or an ISO 8601 time, got {text[:60]!r}"
        )
    try:
        if match is not None:
            return now + timedelta(**{_UNITS[match[2]]: int(match[1])})
        value = datetime.fromisoformat(text)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except (ValueError, OverflowError):
        # Written as a time, but not one the calendar has (February 31st) or can hold.
        raise PauseRefused(f"until {text[:60]!r} is not a time there is") from None


def target_parse(kind: Any, scope: Any, name: Any = "") -> PauseTarget:
    """A pause target from request or command input; :class:`PauseInvalid` names a bad field."""
    if kind not in KINDS:
        raise PauseInvalid("kind", f"expected one of: {', '.join(KINDS)}")
    if not isinstance(scope, str) or not scope:
        raise PauseInvalid("scope", "name the scope")
    name = name or ""
    if not isinstance(name, str):
        raise PauseInvalid("name", "expected text")
    # Refusals, not malformed input: what each kind needs is beyond what a JSON Schema says.
    if kind == PauseKind.SCOPE and name:
        raise PauseRefused("a scope's pause names no binding, route or schedule")
    if kind != PauseKind.SCOPE and not name:
        raise PauseRefused(f"name the {kind}")
    return PauseTarget(kind, scope, name)


def _live() -> Configuration:
    generation = live_generation()
    if generation is None:
        raise PauseRefused("no configuration has been applied")
    return load_configuration(generation)


def _check_live(target: PauseTarget) -> None:
    configuration = _live()
    scope = configuration.scope(target.scope)
    if scope is None:
        raise PauseRefused(f"scope {target.scope} is not in the live configuration")
    if target.kind == PauseKind.BINDING and target.name not in scope.bindings:
        raise PauseRefused(f"no binding {target.name!r} in scope {target.scope}")
    if target.kind == PauseKind.ROUTE and not any(
        r.slot == target.name and r.scope == target.scope for r in scope.routes
    ):
        raise PauseRefused(f"scope {target.scope} declares no route {target.name!r}")
    if target.kind == PauseKind.SCHEDULE:
        try:
            schedule_find(configuration, scope=target.scope, name=target.name)
        except ScheduleError as exc:
            raise PauseRefused(str(exc)) from None


def pause(
    *,
    target: PauseTarget,
    user: AbstractBaseUser | str,
    reason: str = "",
    until: datetime | None = None,
    clock: Clock,
) -> PauseResult:
    """Pause ``target`` (in the live configuration) for ``user``, saying why, until ``until``."""
    by = actor_name(user)
    _check_live(target)
    try:
        return PauseResult(
            pause_create(target=target, paused_by=by, reason=reason.strip(), until=until, clock=clock)
        )
    except PauseError as exc:
        raise PauseRefused(str(exc)) from None


def resume(*, target: PauseTarget, user: AbstractBaseUser | str, clock: Clock) -> PauseResult:
    """End ``target``'s pause; a route's held Events become routable at once, in order."""
    by = actor_name(user)
    try:
        ended = pause_end(target=target, ended_by=by, clock=clock)
    except PauseError as exc:
        raise PauseRefused(str(exc)) from None
    released = 0
    if target.kind == PauseKind.ROUTE:
        released = route_held_release(scope=target.scope, slot=target.name)
    return PauseResult(ended, released)


def schedule_fire(*, scope: str, name: str, user: AbstractBaseUser | str, clock: Clock) -> Event:
    """Fire the schedule ``name`` of ``scope`` now (its Event, whatever its fire times)."""
    by = actor_name(user)
    try:
        return schedule_fire_now(configuration=_live(), scope=scope, name=name, by=by, clock=clock)
    except ScheduleError as exc:
        raise PauseRefused(str(exc)) from None


def pauses_in_force(clock: Clock) -> list[Pause]:
    """The pauses in force now, oldest first."""
    return active_pauses(clock())
