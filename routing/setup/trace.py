"""Trace: a dry run of routing for a hypothetical or an accepted Event (R37–R45).

A trace runs what :meth:`routing.engine.router.Router.route` runs, writing nothing: the same window
(the earlier unrouted input the Event waits behind), the same evaluation on the handler pool
(an Event backing off is not asked about), and the same settlement
(:mod:`routing.engine.settle`: deduplication, ordering, failure counting and giving up, the wake
bridges and the causal limits' verdict on them), in a transaction that is rolled back. So the
trace taken before routing is what routing records. ``trace_candidate`` does the same against
a candidate configuration not yet applied; its generation reads ``candidate``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from causal.clock import Clock
from causal.limits import is_reserved
from causal.models import Event, RouteState
from causal.services import Envelope
from infra.snapshots import read_snapshot
from routing.acceptance.envelopes import EnvelopeInvalid, parse_envelope
from routing.acceptance.services import check_event_size, duplicate_conflict
from routing.config.selectors import find_generation, live_generation
from routing.engine.decide import MANUAL_SOURCE, Effect, Reason
from routing.engine.evaluate import Evaluation, RouteVerdict, snapshots_isolated
from routing.engine.options import RouterOptions
from routing.engine.router import Router, build_router
from routing.engine.settle import DUPLICATE, Settlement, duplicate
from routing.engine.world import SnapshotReads
from routing.extension import EventSnapshot, Sample, freeze
from routing.models import Generation, GenerationKind, RouteRecord

TRACE_ID = "trace"


class TraceRefused(ValueError):
    """The trace was refused before any route was asked; ``field`` names what is wrong."""

    def __init__(self, field: str | None, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message

    def details(self) -> dict[str, Any]:
        return {"error": "invalid_trace", "field": self.field, "message": self.message}


class TraceEffect:
    """What a trace says happens, beside the decision effects (:class:`routing.engine.decide.Effect`)
    a settled Event records as its ``policy``: the Event stays unrouted, or is not stored."""

    FAILED = "failed"  # routing gives up: the record's policy is ``failed`` (dead letter)
    ERROR = "error"  # a route failure counted: the Event stays unrouted, retried after backoff
    WAITING = "waiting"  # behind earlier unrouted input for the same target
    CONFLICT = "conflict"  # conflicting identities: unrouted with the reason
    DUPLICATE = DUPLICATE  # its (source, id) is already accepted: acceptance stores nothing


@dataclass(frozen=True, slots=True)
class TraceResult:
    """What routing would do with the Event now, and why.

    ``state`` is the route state the Event is left in (``routed``, ``failed``, ``unrouted``,
    or ``duplicate``); an unrouted one has the ``unrouted_reason`` routing stores, the Event it
    waits behind and when it is retried."""

    generation: str
    scope: str
    effect: str
    reason: str
    verdicts: tuple[RouteVerdict, ...]
    work_id: int | None = None
    route: str = ""
    binding: str = ""
    keys: tuple[str, ...] = ()
    refusals: tuple[dict, ...] = ()
    error: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    state: str = ""
    unrouted_reason: str | None = None  # None: the Event's stored reason is left as it is
    waiting_on: int | None = None
    retry_at: datetime | None = None
    attempts: int = 0
    event: int | None = None  # the accepted Event traced (trace_event), or a duplicate's original

    def as_dict(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "scope": self.scope,
            "effect": self.effect,
            "reason": self.reason,
            "work": self.work_id,
            "route": self.route,
            "binding": self.binding,
            "keys": list(self.keys),
            "verdicts": [
                {"route": v.route, "scope": v.scope, "verdict": v.verdict, "reason": v.reason}
                for v in self.verdicts
            ],
            "refusals": list(self.refusals),
            "error": self.error,
            "notes": list(self.notes),
            "state": self.state,
            "unrouted_reason": self.unrouted_reason,
            "waiting_on": self.waiting_on,
            "retry_at": self.retry_at.isoformat() if self.retry_at else None,
            "attempts": self.attempts,
            "event": self.event,
        }


def trace(
    *,
    payload: Any,
    clock: Clock,
    generation: str | None = None,
    operator: bool = False,
    options: RouterOptions | None = None,
    default_scope: str | None = None,
) -> TraceResult:
    """Trace ``payload`` (a structured-mode CloudEvent with ``scope``) against the live
    generation, or the one ``generation`` names (``"3"``, ``"candidate:12"``).

    ``operator`` traces an Event an operator would send (source ``core.manual``, R30).
    ``default_scope`` is the sender's default scope (an API token's), as acceptance takes it;
    without it an Event without a scope takes the generation's ``default_scope``."""
    target = find_generation(generation) if generation else live_generation()
    if target is None:
        raise TraceRefused("scope", "no configuration has been applied yet")
    router = build_router(clock=clock, generation=target, options=options or RouterOptions(workers=1))
    try:
        return _trace(router, payload, operator=operator, default_scope=default_scope)
    finally:
        router.close()


def trace_candidate(
    *,
    candidate: Generation,
    payload: Any,
    clock: Clock,
    operator: bool = False,
    options: RouterOptions | None = None,
) -> TraceResult:
    """Trace against a candidate configuration (stored, not applied)."""
    if candidate.kind != GenerationKind.CANDIDATE:
        raise TraceRefused(None, f"{candidate} is not a candidate")
    router = build_router(clock=clock, generation=candidate, options=options or RouterOptions(workers=1))
    try:
        return _trace(router, payload, operator=operator)
    finally:
        router.close()


def trace_offered(
    *,
    payload: Any,
    clock: Clock,
    generation: str | None = None,
    operator: bool = False,
    options: RouterOptions | None = None,
) -> TraceResult:
    """Trace what an operator offers in the console: an Event whose ``(source, id)`` names an
    accepted Event is that Event ("Trace this Event"): :func:`trace_event` says what routing
    does (or did) with it, and a note that offering it again would store nothing; anything
    else is traced as a hypothetical Event (:func:`trace`)."""
    accepted = None
    if (
        isinstance(payload, dict)
        and isinstance(payload.get("source"), str)
        and isinstance(payload.get("id"), str)
    ):
        accepted = (
            Event.objects.filter(source=payload["source"], envelope_id=payload["id"])
            .values_list("seq", flat=True)
            .first()
        )
    if accepted is None:
        return trace(payload=payload, clock=clock, generation=generation, operator=operator, options=options)
    try:
        offered = parse_envelope(
            {"specversion": "1.0", **payload}, trusted=operator and payload["source"] == MANUAL_SOURCE
        )
    except EnvelopeInvalid as exc:
        raise TraceRefused(exc.field, exc.message) from exc
    _refuse_conflict(offered, accepted)
    result = trace_event(seq=accepted, clock=clock, generation=generation, options=options)
    note = f"its source and id are accepted Event #{accepted}: this traces that Event (sent again, it would store nothing)"
    return replace(result, notes=(note, *result.notes))


def trace_event(
    *, seq: int, clock: Clock, generation: str | None = None, options: RouterOptions | None = None
) -> TraceResult:
    """Trace an accepted Event: what routing it now would do (an unrouted Event), through the
    same window, backoff and settlement as :meth:`routing.engine.router.Router.route`; for a settled
    Event, what its RouteRecord says. Raises ``Event.DoesNotExist``."""
    event = Event.objects.filter(seq=seq).only("seq", "route_state", "scope").first()
    if event is None:
        raise Event.DoesNotExist(f"no Event #{seq}")
    target = find_generation(generation) if generation else live_generation()
    if target is None:
        raise TraceRefused("scope", "no configuration has been applied yet")
    if event.is_settled:
        return _recorded(event)
    router = build_router(clock=clock, generation=target, options=options or RouterOptions(workers=1))
    try:
        snap = snapshots_isolated(Event.objects.filter(seq=seq))[0]
        settlement, evaluation = router.simulate(snap)
        return _result(router.configuration.label, snap.scope, settlement, evaluation, event=seq)
    finally:
        router.close()


class TraceReads:
    """What every trace in one read snapshot reads alike, read once: the last accepted Event
    (a hypothetical Event comes after it), whether an envelope's (source, id) is accepted, and
    the window of earlier unrouted input an Event routes behind (it depends on the Event and
    the world, not on the configuration), and the world reads (:class:`SnapshotReads`).
    Valid only inside one :func:`read_snapshot`."""

    def __init__(self) -> None:
        self._last_seq: int | None = None
        self._accepted: dict[tuple[str, str], int | None] = {}
        self._windows: dict[tuple, list[EventSnapshot]] = {}  # the earlier input, by Event
        self.world = SnapshotReads()

    def last_seq(self) -> int:
        if self._last_seq is None:
            self._last_seq = Event.objects.order_by("-seq").values_list("seq", flat=True).first() or 0
        return self._last_seq

    def accepted(self, source: str, envelope_id: str) -> int | None:
        """The seq of the accepted Event with this (source, id), if any."""
        key = (source, envelope_id)
        if key not in self._accepted:
            self._accepted[key] = (
                Event.objects.filter(source=source, envelope_id=envelope_id)
                .values_list("seq", flat=True)
                .first()
            )
        return self._accepted[key]

    def window(self, router: Router, event: EventSnapshot) -> list[EventSnapshot]:
        """:meth:`Router.window_for` ``event``: the earlier input it routes behind depends
        only on its seq, scope and explicit targets."""
        key = (event.seq, event.scope, event.correlation, event.work_id)
        if key not in self._windows:
            self._windows[key] = router.window_for(event)[:-1]
        return [*self._windows[key], event]


class Tracer:
    """Traces many Events against one generation with one router (see :func:`tracers`)."""

    def __init__(self, router: Router, reads: TraceReads) -> None:
        self._router = router
        self._reads = reads

    def __call__(self, payload: Any, operator: bool = False) -> TraceResult:
        """Trace ``payload`` like :func:`trace`."""
        return _trace(self._router, payload, operator=operator, reads=self._reads)

    def inputs(self, payload: Any, operator: bool = False) -> tuple | None:
        """What a trace of ``payload`` takes from this configuration, without deciding: the
        first matching route (as resolved), its decision, and the bindings of the Event's
        scope. The decision reads only these of the configuration (and the world, the same for
        every configuration), so two configurations with equal inputs trace the Event alike.
        ``None`` when the Event would be refused or a route fails: only a trace tells then."""
        try:
            envelope = _admitted(self._router, payload, operator=operator)
        except TraceRefused:
            return None
        evaluation = self._router.evaluate_one(_hypothetical(envelope, self._reads.last_seq()))
        if evaluation.error is not None:
            return None
        scope = self._router.configuration.scope(envelope.scope)
        assert scope is not None  # _admitted refuses an unknown scope
        return (evaluation.route, evaluation.decision, dict(scope.bindings))


@contextmanager
def tracers(
    *generations: Generation, clock: Clock, options: RouterOptions | None = None
) -> Iterator[tuple[Tracer, ...]]:
    """One router per generation for many traces (an impact preview traces thousands), all in
    one read snapshot: every trace sees the database as of the first, the tracers share what
    they read alike (:class:`TraceReads`), and nothing blocks writers meanwhile."""
    routers: list[Router] = []
    try:
        for generation in generations:
            routers.append(
                build_router(clock=clock, generation=generation, options=options or RouterOptions(workers=1))
            )
        with read_snapshot():
            reads = TraceReads()
            yield tuple(Tracer(router, reads) for router in routers)
    finally:
        for router in routers:
            router.close()


def samples(*, scope: str, clock: Clock, generation: str | None = None) -> list[tuple[str, Sample]]:
    """Named sample Events the scope's handlers offer, in route order (R45): (route, sample)."""
    target = find_generation(generation) if generation else live_generation()
    if target is None:
        return []
    router = build_router(clock=clock, generation=target, options=RouterOptions(workers=1))
    try:
        effective = router.configuration.scope(scope)
        if effective is None:
            raise TraceRefused("scope", f"unknown scope {scope!r} in generation {router.configuration.label}")
        found: list[tuple[str, Sample]] = []
        for route in effective.routes:
            handler = router.handlers.get(route.handler)
            offer = getattr(handler, "samples", None)
            if callable(offer):
                found.extend((route.slot, sample) for sample in offer(scope, route.info(), router.clock))
        return found
    finally:
        router.close()


def _trace(
    router: Router,
    payload: Any,
    *,
    operator: bool,
    reads: TraceReads | None = None,
    default_scope: str | None = None,
) -> TraceResult:
    envelope = _admitted(router, payload, operator=operator, default_scope=default_scope)
    label = router.configuration.label
    with read_snapshot():
        # A run of traces (``reads`` given) shares what they read alike; a lone trace reads
        # everything afresh, as the route commit does.
        shared = reads is not None
        reads = reads if reads is not None else TraceReads()
        snap = _hypothetical(envelope, reads.last_seq())
        accepted = reads.accepted(envelope.source, envelope.id)
        if accepted is not None:
            _refuse_conflict(envelope, accepted)
            # Acceptance would store nothing: no route is asked (deduplication, R5).
            return _result(label, snap.scope, duplicate(snap.seq, accepted), None, event=accepted)
        settlement, evaluation = router.simulate(
            snap,
            window=reads.window(router, snap) if shared else None,
            memo=reads.world if shared else None,
            accepted=False,
        )
    return _result(label, snap.scope, settlement, evaluation)


def _refuse_conflict(envelope: Envelope, accepted: int) -> None:
    """Refuse, as acceptance would (409), an Event that repeats accepted Event ``accepted``'s
    (source, id) with another body: it would not be stored, so nothing routes it."""
    conflict = duplicate_conflict(envelope, Event.objects.get(seq=accepted))
    if conflict is not None:
        raise TraceRefused("id", f"acceptance would refuse this Event (409): {conflict.message}")


def _admitted(router: Router, payload: Any, *, operator: bool, default_scope: str | None = None) -> Envelope:
    """Refuse an Event acceptance would refuse (R38): a trace never explains an Event that
    could not happen. Missing ``specversion``/``id`` are filled in as acceptance requires, and
    a missing scope is the sender's default, else the generation's (as acceptance takes it)."""
    if not isinstance(payload, dict):
        raise TraceRefused(None, "an Event must be a JSON object")
    offered = {"specversion": "1.0", "id": TRACE_ID, **payload}
    manual = operator and offered.get("source") == MANUAL_SOURCE
    try:
        envelope = parse_envelope(
            offered, trusted=manual, default_scope=default_scope or router.configuration.default_scope or None
        )
        check_event_size(offered)
        if manual and is_reserved(envelope.type):
            raise EnvelopeInvalid("type", f"type {envelope.type!r} is reserved for core Events (core.*)")
    except EnvelopeInvalid as exc:
        raise TraceRefused(exc.field, exc.message) from exc
    if router.configuration.scope(envelope.scope) is None:
        raise TraceRefused(
            "scope", f"unknown scope {envelope.scope!r}: not in generation {router.configuration.label}"
        )
    return envelope


def _hypothetical(envelope: Envelope, last: int) -> EventSnapshot:
    """The snapshot the Event would have if it were accepted now (after Event ``last``)."""
    return EventSnapshot(
        seq=last + 1,
        id=envelope.id,
        source=envelope.source,
        type=envelope.type,
        subject=envelope.subject,
        scope=envelope.scope,
        time=envelope.time,
        data=freeze(envelope.data),
        correlation=tuple(envelope.correlation),
        work_id=envelope.work_id,
        execution_id=envelope.execution_id,
        causation_id=None,
        depth=0,
    )


def _result(
    label: str,
    scope: str,
    settlement: Settlement,
    evaluation: Evaluation | None,
    *,
    event: int | None = None,
) -> TraceResult:
    """The trace of one settlement: its effect as routing records it, and notes saying why."""
    decision = settlement.decision
    notes = _notes(settlement)
    if settlement.state == DUPLICATE:
        effect = TraceEffect.DUPLICATE
    elif settlement.state == RouteState.FAILED:
        effect = TraceEffect.FAILED
    elif settlement.waiting_on is not None:
        effect = TraceEffect.WAITING
    elif decision is not None and decision.effect == Effect.CONFLICT:
        effect = TraceEffect.CONFLICT  # counted as a failure too (conflicting_identity)
    elif settlement.error is not None:
        effect = TraceEffect.ERROR
    elif decision is not None:
        effect = Effect.START if decision.new_work else decision.effect
    else:
        effect = TraceEffect.WAITING
    verdict_source = (decision.evaluation if decision is not None else None) or evaluation
    error = settlement.error
    return TraceResult(
        generation=label,
        scope=scope,
        effect=effect,
        reason=settlement.reason if decision is None or not settlement.settled else decision.reason,
        verdicts=verdict_source.verdicts if verdict_source is not None else (),
        work_id=decision.work_id if decision and decision.work_id and decision.work_id > 0 else None,
        route=decision.route if decision else "",
        binding=decision.binding if decision else "",
        keys=decision.keys if decision else (),
        refusals=decision.refusals if decision else (),
        error=error.error_text if error else "",
        notes=tuple(notes),
        state=settlement.state,
        unrouted_reason=settlement.stored_reason,
        waiting_on=settlement.waiting_on,
        retry_at=settlement.retry_at,
        attempts=error.attempts if error else 0,
        event=event,
    )


def _notes(settlement: Settlement) -> list[str]:
    notes: list[str] = []
    decision = settlement.decision
    if settlement.state == DUPLICATE:
        notes.append(f"{settlement.reason}: acceptance would store nothing and route nothing")
        return notes
    if settlement.waiting_on is not None:
        notes.append(
            f"earlier input #{settlement.waiting_on} for the same target is unrouted: it routes first, "
            "this Event waits"
        )
    error = settlement.error
    if error is not None and settlement.state == RouteState.UNROUTED:
        if decision is None:
            notes.append(
                f"backing off after {error.attempts} failure(s): its handlers are not asked before then"
            )
        elif error.backoff_until is not None:
            notes.append(f"failure {error.attempts}: retried after {error.backoff_until.isoformat()}")
    if settlement.state == RouteState.FAILED and error is not None:
        notes.append(f"routing gives up after {error.attempts} failure(s): the Event is dead-lettered (R16)")
    if decision is None:
        return notes
    if decision.timed_out_wait is not None:
        wait = decision.timed_out_wait
        notes.append(f"the due timeout of wait {wait.name or wait.id} wins first: the Work is ready again")
    if decision.effect == Effect.CONFLICT:
        notes.append("conflicting identities: routing would leave the Event unrouted with this reason")
    for sub in decision.also_wakes:
        notes.append(
            f"also wakes Work {sub.work_id}'s wait {sub.wait.name or sub.wait.id} in scope {sub.work_scope} "
            "(its dependency subscription on this scope matches)"
        )
    for bridge in settlement.bridges:
        if bridge.refusal is not None:
            notes.append(
                f"the wake of Work {bridge.work_id}'s wait {bridge.wait.name or bridge.wait.id} is refused: "
                f"{bridge.blocked_reason}; the wait is blocked, the Work held"
            )
    if settlement.held:
        notes.append(f"{settlement.held}: the Work is held, the Event kept as context")
    if decision.reason == Reason.ADDRESSED:
        notes.append("the operator addressed this Work: it needs no route to find it (R30)")
    if decision.reason == Reason.CONTEXT:
        notes.append("kept as context for the waiting Work; its wait still decides (R41)")
    return notes


def _recorded(event: Event) -> TraceResult:
    """A settled Event's trace is its record: routing decides nothing twice (I1)."""
    record = RouteRecord.objects.filter(event_id=event.seq).first()
    return TraceResult(
        generation=record.generation if record else "",
        scope=event.scope,
        effect=record.policy if record else "",
        reason=record.reason if record else "",
        verdicts=(),
        work_id=record.work_id if record else None,
        route=record.route if record else "",
        binding=record.binding if record else "",
        keys=tuple(record.keys or ()) if record else (),
        refusals=tuple(record.refusals or ()) if record else (),
        error=record.error if record else "",
        notes=(f"already {event.route_state}: routing decides an Event once (I1)",),
        state=event.route_state,
        attempts=record.attempts if record else 0,
        event=event.seq,
    )
