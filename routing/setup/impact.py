"""Impact preview: what a candidate would change about the Events routing has seen.

The last N accepted Events are traced again, each against the live generation and against
the candidate (the same hypothetical Event, the same world read now, two configurations), and
only the Events whose outcome differs are kept, grouped by how it changes (``start → queue``,
``queue → unmatched``, another route or binding…). Traces write nothing (R37); neither does
this.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from causal.clock import Clock
from causal.models import Event
from routing.acceptance.raw import raw_envelope
from routing.config.selectors import live_generation, load_configuration
from routing.engine.decide import MANUAL_SOURCE
from routing.models import Generation, GenerationKind
from routing.setup.candidates import configuration_diff
from routing.setup.trace import Tracer, TraceRefused, TraceResult, tracers

DEFAULT_EVENTS = 1_000
MAX_EVENTS = 10_000
REFUSED = "refused"
OTHER_TARGET = "other route or binding"
OTHER_WORK = "other Work"


class ImpactInvalid(ValueError):
    """The preview cannot run as asked; ``field`` names what is wrong."""

    def __init__(self, field: str | None, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message

    def details(self) -> dict[str, Any]:
        return {"error": "invalid_impact", "field": self.field, "message": self.message}


@dataclass(frozen=True, slots=True)
class Outcome:
    """One side of a comparison: the trace, or why the trace was refused (a scope the
    configuration lacks)."""

    result: TraceResult | None = None
    refused: TraceRefused | None = None

    @property
    def effect(self) -> str:
        return self.result.effect if self.result is not None else REFUSED

    def key(self) -> tuple:
        """What must be equal for two outcomes to count as the same routing."""
        if self.result is None:
            assert self.refused is not None
            return (REFUSED, self.refused.field)
        r = self.result
        return (r.effect, r.route, r.binding, r.work_id, r.keys, r.flow_hold)

    def as_dict(self) -> dict[str, Any]:
        if self.result is not None:
            return self.result.as_dict()
        assert self.refused is not None
        return {"effect": REFUSED, **self.refused.details()}


@dataclass(frozen=True, slots=True)
class ImpactChange:
    """An Event that the candidate would route otherwise, with both traces."""

    seq: int
    type: str
    scope: str
    group: str
    live: Outcome
    candidate: Outcome

    def as_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "type": self.type,
            "scope": self.scope,
            "group": self.group,
            "live": self.live.as_dict(),
            "candidate": self.candidate.as_dict(),
        }


@dataclass(frozen=True, slots=True)
class ImpactReport:
    """The changes, grouped in the order groups were first met (newest Event first).

    Of the ``examined`` Events, ``traced`` were traced against both configurations: those
    whose routes could answer otherwise (see :func:`impact_preview`)."""

    live: str
    candidate: int
    examined: int
    traced: int
    first_seq: int | None
    last_seq: int | None
    groups: tuple[tuple[str, tuple[ImpactChange, ...]], ...]
    seconds: float

    @property
    def changed(self) -> int:
        return sum(len(changes) for _, changes in self.groups)

    def as_dict(self) -> dict[str, Any]:
        return {
            "live": self.live,
            "candidate": self.candidate,
            "examined": self.examined,
            "traced": self.traced,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "changed": self.changed,
            "seconds": round(self.seconds, 3),
            "groups": [
                {"group": group, "count": len(changes), "changes": [c.as_dict() for c in changes]}
                for group, changes in self.groups
            ],
        }


def change_group(live: Outcome, candidate: Outcome) -> str | None:
    """How the outcome changes (``start → queue``), or ``None`` when it does not."""
    if live.key() == candidate.key():
        return None
    if live.effect != candidate.effect:
        return f"{live.effect} → {candidate.effect}"
    if live.result is not None and candidate.result is not None:
        a, b = live.result, candidate.result
        if (a.route, a.binding) != (b.route, b.binding):
            return OTHER_TARGET
        if a.flow_hold != b.flow_hold:
            return f"flow control: {a.flow_hold or 'starts'} → {b.flow_hold or 'starts'}"
        return OTHER_WORK
    return OTHER_TARGET


def impact_checked(candidate: Generation, events: int | None) -> tuple[int, Generation]:
    """How many Events a preview of ``candidate`` looks at, and the live generation it compares
    with; :class:`ImpactInvalid` for a bad count, a generation that is not a candidate, or
    nothing live."""
    limit = check_limit(events)
    if candidate.kind != GenerationKind.CANDIDATE:
        raise ImpactInvalid("candidate", f"{candidate} is not a candidate")
    live = live_generation()
    if live is None:
        raise ImpactInvalid("candidate", "no configuration has been applied yet: there is nothing to compare")
    return limit, live


def check_limit(limit: Any) -> int:
    """``limit`` as a number of Events (1 to :data:`MAX_EVENTS`), or :class:`ImpactInvalid`."""
    if limit is None:
        return DEFAULT_EVENTS
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_EVENTS:
        raise ImpactInvalid("events", f"events must be a whole number from 1 to {MAX_EVENTS}, not {limit!r}")
    return limit


def recent_events(limit: int) -> list[Event]:
    """The last ``limit`` accepted Events, newest first."""
    return list(Event.objects.order_by("-seq")[:limit])


def impact_preview(
    *,
    candidate: Generation,
    clock: Clock,
    events: int | None = None,
    exhaustive: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> ImpactReport:
    """Trace the last ``events`` accepted Events (default :data:`DEFAULT_EVENTS`, at most
    :data:`MAX_EVENTS`) against the live generation and ``candidate``; keep what differs.

    Each Event is offered as its raw envelope without its id (so it is a new Event, not a
    repeat of itself) and traced as routing would route it now; an operator's Event is traced
    as one. Writes nothing. Raises :class:`ImpactInvalid` (bad count, no live configuration,
    not a candidate).

    A trace depends on the configuration only through the Event's own scope: the first route
    that matches it (with its decision) and the scope's bindings; the world it reads is the
    same for both. So an Event of a scope both configurations resolve alike is not looked at,
    and one whose routes answer alike in both (:meth:`~routing.setup.trace.Tracer.inputs`) is not
    traced: neither can change. ``exhaustive=True`` traces every Event against both (a test
    holds the reports equal). ``progress(done, total)`` is told, before each Event and at the
    end, how many of the ``total`` Events to look at it has looked at.

    Rate limits are replayed: the Events are walked oldest first, and a route's rate limit
    counts the Events each configuration's own traces took through it within its period before
    the Event's acceptance time (:class:`~routing.engine.ratelimit.RateLedger`), so a limit
    only the candidate declares shows the Events it would have dropped. Events of a scope with a
    rate-limited route in either configuration are always traced (their takes count)."""
    limit, live = impact_checked(candidate, events)
    started = time.perf_counter()
    rows = recent_events(limit)
    changes: list[ImpactChange] = []
    traced = 0
    with tracers(live, candidate, clock=clock) as (before, after):
        limited = {e.scope for e in rows if before.rate_limited(e.scope) or after.rate_limited(e.scope)}
        if not exhaustive:
            diff = configuration_diff(load_configuration(live), load_configuration(candidate))
            changed = {scope.path for scope in diff.changed} | limited
            rows_looked_at = [event for event in rows if event.scope in changed]
        else:
            rows_looked_at = rows
        total = len(rows_looked_at)
        # Oldest first: the rate limits' replay counts the takes of the Events before.
        for done, event in enumerate(reversed(rows_looked_at)):
            if progress is not None:
                progress(done, total)
            payload, operator = offered(event)
            if not exhaustive and event.scope not in limited:
                inputs = before.inputs(payload, operator)
                if inputs is not None and inputs == after.inputs(payload, operator):
                    continue
            traced += 1
            live_outcome = _outcome(before, payload, operator, event.accepted_at)
            candidate_outcome = _outcome(after, payload, operator, event.accepted_at)
            group = change_group(live_outcome, candidate_outcome)
            if group is not None:
                changes.append(
                    ImpactChange(
                        seq=event.seq,
                        type=event.type,
                        scope=event.scope,
                        group=group,
                        live=live_outcome,
                        candidate=candidate_outcome,
                    )
                )
    if progress is not None:
        progress(total, total)
    groups: dict[str, list[ImpactChange]] = {}
    for change in reversed(changes):  # newest first
        groups.setdefault(change.group, []).append(change)
    return ImpactReport(
        live=live.label,
        candidate=candidate.pk,
        examined=len(rows),
        traced=traced,
        first_seq=rows[-1].seq if rows else None,
        last_seq=rows[0].seq if rows else None,
        groups=tuple((group, tuple(changes)) for group, changes in groups.items()),
        seconds=time.perf_counter() - started,
    )


def offered(event: Event) -> tuple[dict[str, Any], bool]:
    """The Event as it is offered again (its raw envelope without its id), and whether an operator sent it."""
    payload = raw_envelope(event)
    del payload["id"]
    return payload, event.source == MANUAL_SOURCE


def _outcome(trace_one: Tracer, payload: dict[str, Any], operator: bool, accepted_at: datetime) -> Outcome:
    try:
        return Outcome(result=trace_one(payload, operator=operator, accepted_at=accepted_at))
    except TraceRefused as exc:
        return Outcome(refused=exc)
