"""Schedules fire: each due fire time of a scope's schedule is accepted once as an Event, whatever
the number of route loops and hosts.

The route loop calls :func:`schedules_fire` a few times a second (:class:`ScheduleTicker`). Each
schedule is handled in its own transaction that locks its :class:`~routing.models.ScheduleState`
row (``SELECT … FOR UPDATE`` on PostgreSQL, the write lock on SQLite): the fire times due since
the last one handled are fired, skipped or missed as its policies say, and the row remembers
them. The Event's id is reserved, ``schedule/<name>/<fire time>``, from the source
``core.schedule/<scope>``: a fire time accepted twice is stored once (acceptance deduplicates
on ``(source, id)``), a second guard beside the lock.

- **overlap** ``skip``: no fire while the last fire's Event is unrouted, queued, or taken by an
  attempt that runs or waits; ``allow`` fires anyway.
- **catch_up** after downtime (fire times late by more than half the time to the next one,
  at least a second, at most a minute: ``ScheduleSpec.is_late``): ``none`` fires none of
  them, ``last`` the latest, ``all`` up to ``catch_up_limit``, newest first, in order.
- a paused schedule (``worklife.pauses``) skips its fire times; they are not caught up.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, connection, transaction
from django.db.models import Q

from causal.clock import Clock
from causal.models import Event, RouteState
from causal.services import Envelope, event_accept_in_tx
from infra.metrics import Counter
from routing.config.effective import Configuration
from routing.config.schedules import ScheduleSpec, fire_time_text, schedule_spec
from routing.models import ScheduleState
from worklife.models import InputState, PauseKind, WorkInput, WorkStatus
from worklife.pauses import active_pauses, pause_line

logger = logging.getLogger("conduit.routing.schedules")

SCHEDULE_FIRES = Counter(
    "conduit_schedule_fires_total",
    "Schedule fire times handled, by outcome: fired, missed (catch-up), skipped (paused or overlap), "
    "duplicate (another loop fired it).",
    ("outcome",),
)

SCHEDULE_SOURCE = "core.schedule"
TICK_SECONDS = 0.1


class ScheduleError(Exception):
    """A schedule control is refused (an unknown schedule); the message says why."""


def schedule_source(scope: str) -> str:
    return f"{SCHEDULE_SOURCE}/{scope}"


def schedule_event_id(name: str, fire_time: datetime) -> str:
    """The reserved id of a schedule's Event for ``fire_time``: ``schedule/<name>/<time>``."""
    return f"schedule/{name}/{fire_time_text(fire_time)}"


def schedules_of(configuration: Configuration) -> list[ScheduleSpec]:
    """Every schedule the configuration declares, scope by scope."""
    return [
        schedule_spec(path, str(raw["name"]), raw)
        for path, scope in sorted(configuration.scopes.items())
        for raw in scope.schedules
    ]


@dataclass(frozen=True, slots=True)
class Fired:
    """One fire time handled: ``outcome`` is ``fired``, ``duplicate`` (accepted before),
    ``skipped: …`` or ``missed``."""

    scope: str
    name: str
    fire_time: datetime
    outcome: str
    event_seq: int | None = None


def _envelope(spec: ScheduleSpec, event_id: str, fire_time: datetime) -> Envelope:
    return Envelope(
        id=event_id,
        source=schedule_source(spec.scope),
        type=spec.type,
        scope=spec.scope,
        subject=spec.subject,
        time=fire_time,
        data=spec.data,
    )


def _state_in_tx(spec: ScheduleSpec, now: datetime) -> ScheduleState:
    """The schedule's state row, locked; created (due from ``now``) the first time."""
    query = ScheduleState.objects.filter(scope=spec.scope, name=spec.name)
    if connection.features.has_select_for_update:
        query = query.select_for_update()
    state = query.first()
    if state is not None:
        return state
    try:
        with transaction.atomic():
            ScheduleState.objects.create(scope=spec.scope, name=spec.name, handled_until=now, updated_at=now)
    except IntegrityError:
        pass  # another loop created it first
    return query.get()


def _overlapping(state: ScheduleState) -> str:
    """Why the last fire's Work still runs (``""``: it does not), for overlap ``skip``."""
    if state.last_event_id is None:
        return ""
    event = Event.objects.filter(pk=state.last_event_id).values("route_state").first()
    if event is not None and event["route_state"] == RouteState.UNROUTED:
        return f"the last fire's Event #{state.last_event_id} is not routed yet"
    busy = (
        WorkInput.objects.filter(event_id=state.last_event_id)
        .filter(Q(state=InputState.PENDING) | Q(work__status__in=(WorkStatus.RUNNING, WorkStatus.WAITING)))
        .values_list("work_id", flat=True)
        .first()
    )
    return f"the last fire's Work {busy} is still running" if busy is not None else ""


def schedule_fire_in_tx(
    spec: ScheduleSpec, *, now: datetime, paused: str = "", by: str = SCHEDULE_SOURCE
) -> list[Fired]:
    """Handle ``spec``'s fire times due at ``now`` in the caller's transaction (see the module
    docstring); ``paused`` is the pause line when it is paused, ``by`` the loop firing it (the
    Events' ``accepted_by``)."""
    state = _state_in_tx(spec, now)
    due = spec.due(state.handled_until, now, cap=max(spec.catch_up_limit, 1) + 1)
    if not due:
        return []
    late = [t for t in due if spec.is_late(t, now)]
    on_time = [t for t in due if t not in late]
    if spec.catch_up == "none":
        chosen = on_time
    elif spec.catch_up == "last":
        chosen = due[-1:]
    else:
        chosen = due[-spec.catch_up_limit :]
    results = [Fired(spec.scope, spec.name, t, "missed") for t in late if t not in chosen]
    for fire_time in chosen:
        if paused:
            results.append(Fired(spec.scope, spec.name, fire_time, f"skipped: {paused}"))
            continue
        if spec.overlap == "skip" and (busy := _overlapping(state)):
            results.append(Fired(spec.scope, spec.name, fire_time, f"skipped: {busy}"))
            continue
        accepted = event_accept_in_tx(
            envelope=_envelope(spec, schedule_event_id(spec.name, fire_time), fire_time),
            clock=lambda: now,
            accepted_by=by,
        )
        state.last_event_id = accepted.event.pk
        results.append(
            Fired(
                spec.scope,
                spec.name,
                fire_time,
                "fired" if accepted.created else "duplicate",
                accepted.event.pk,
            )
        )
    fired = sum(1 for r in results if r.outcome == "fired")
    state.handled_until = due[-1]
    state.last_fire_time = due[-1]
    state.last_outcome = results[-1].outcome[:255] if results else ""
    state.fired += fired
    state.skipped += len(results) - fired
    state.updated_at = now
    state.save()
    return results


def schedules_fire(
    *,
    configuration: Configuration,
    clock: Clock,
    owner: str = "",
    specs: list[ScheduleSpec] | None = None,
) -> list[Fired]:
    """Fire every due schedule of ``configuration`` now (or of ``specs``, some of its schedules),
    each in its own transaction; ``owner`` names the loop firing them."""
    by = f"{SCHEDULE_SOURCE} {owner}"[:150] if owner else SCHEDULE_SOURCE
    specs = schedules_of(configuration) if specs is None else specs
    if not specs:
        return []
    now = clock()
    paused = {(p.scope, p.name): pause_line(p) for p in active_pauses(now) if p.kind == PauseKind.SCHEDULE}
    results: list[Fired] = []
    for spec in specs:
        with transaction.atomic():
            results.extend(
                schedule_fire_in_tx(spec, now=now, paused=paused.get((spec.scope, spec.name), ""), by=by)
            )
    for result in results:
        SCHEDULE_FIRES.inc(1, result.outcome.partition(":")[0])
        if result.outcome == "fired":
            logger.info(
                "schedule.fired",
                extra={"scope": result.scope, "schedule": result.name, "event": result.event_seq},
            )
        elif result.outcome != "duplicate":
            logger.info(
                "schedule.not_fired",
                extra={"scope": result.scope, "schedule": result.name, "outcome": result.outcome},
            )
    return results


def schedule_fire_now(*, configuration: Configuration, scope: str, name: str, by: str, clock: Clock) -> Event:
    """Fire a schedule now, whatever its fire times, pause and overlap (an operator's Fire now):
    its Event's id is ``schedule/<name>/now/<uuid>``, its data the schedule's."""
    spec = schedule_find(configuration, scope=scope, name=name)
    now = clock()
    with transaction.atomic():
        state = _state_in_tx(spec, now)
        accepted = event_accept_in_tx(
            envelope=_envelope(spec, f"schedule/{name}/now/{uuid.uuid4().hex}", now),
            clock=lambda: now,
            accepted_by=f"{SCHEDULE_SOURCE} ({by})"[:150],
        )
        state.last_event_id = accepted.event.pk
        state.last_outcome = f"fired now by {by}"[:255]
        state.fired += 1
        state.updated_at = now
        state.save(update_fields=["last_event", "last_outcome", "fired", "updated_at"])
    return accepted.event


def schedule_find(configuration: Configuration, *, scope: str, name: str) -> ScheduleSpec:
    """The schedule ``name`` declared in ``scope``; :class:`ScheduleError` when there is none."""
    for spec in schedules_of(configuration):
        if spec.scope == scope and spec.name == name:
            return spec
    raise ScheduleError(f"no schedule {name!r} in scope {scope} in the live configuration")


# --- what pages show ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    spec: ScheduleSpec
    next_fire: datetime
    last_fire: datetime | None
    last_outcome: str
    last_event: int | None
    fired: int
    skipped: int
    paused: str


def schedule_rows(configuration: Configuration, *, now: datetime) -> list[ScheduleRow]:
    """Every schedule with its next and last fire times and its pause (two queries)."""
    specs = schedules_of(configuration)
    if not specs:
        return []
    states = {
        (s.scope, s.name): s for s in ScheduleState.objects.filter(name__in={spec.name for spec in specs})
    }
    paused = {(p.scope, p.name): pause_line(p) for p in active_pauses(now) if p.kind == PauseKind.SCHEDULE}
    rows = []
    for spec in specs:
        state = states.get((spec.scope, spec.name))
        rows.append(
            ScheduleRow(
                spec=spec,
                next_fire=spec.next_after(max(now, state.handled_until) if state else now),
                last_fire=state.last_fire_time if state else None,
                last_outcome=state.last_outcome if state else "",
                last_event=state.last_event_id if state else None,
                fired=state.fired if state else 0,
                skipped=state.skipped if state else 0,
                paused=paused.get((spec.scope, spec.name), ""),
            )
        )
    return rows


class ScheduleTicker:
    """Fires schedules from a loop's pass at most every ``every`` seconds (one comparison per
    pass in between), and only those whose next fire time has come since this loop last handled
    them (no query, no transaction before then); errors are the caller's loop boundary's."""

    def __init__(self, *, clock: Clock, owner: str = "", every: float = TICK_SECONDS) -> None:
        self.clock = clock
        self.owner = owner
        self.every = every
        self._next = 0.0
        # By schedule and its timing: the next fire time after the last one this loop handled.
        self._due: dict[tuple, datetime] = {}

    def tick(self, configuration: Configuration | None) -> list[Fired]:
        mono = time.monotonic()
        if configuration is None or mono < self._next:
            return []
        self._next = mono + self.every
        now = self.clock()
        specs = [spec for spec in schedules_of(configuration) if self._due.get(_timing(spec), now) <= now]
        if not specs:
            return []
        results = schedules_fire(
            configuration=configuration, clock=lambda: now, owner=self.owner, specs=specs
        )
        for spec in specs:
            # Every fire time up to now is handled (here or by another loop): none is due before the next.
            self._due[_timing(spec)] = spec.next_after(now)
        return results


def _timing(spec: ScheduleSpec) -> tuple:
    return (spec.scope, spec.name, spec.cron, spec.timezone, spec.every)
