"""Trace: a dry run of routing for a hypothetical or an accepted Event (R37–R45).

A trace runs what :meth:`routing.engine.router.Router.route` runs, writing nothing: the same window
(the earlier unrouted input the Event waits behind), the same evaluation on the handler pool
(an Event backing off is not asked about), and the same settlement
(:mod:`routing.engine.settle`: deduplication, ordering, failure counting and giving up, the wake
bridges and the causal limits' verdict on them), in a transaction that is rolled back. So the
trace taken before routing is what routing records. ``trace_candidate`` does the same against
a candidate configuration not yet applied; its generation reads ``candidate``. A ``filter``
(route slots of the Event's scope) limits the routes the traced Event is asked about (R37).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
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
from routing.config.effective import EffectiveScope
from routing.config.selectors import find_generation, live_generation, live_generation_id
from routing.engine.decide import MANUAL_SOURCE, Effect, Reason
from routing.engine.evaluate import Evaluation, RouteVerdict, Verdict, snapshots_isolated
from routing.engine.options import RouterOptions
from routing.engine.ratelimit import RateLedger, recorded_takes
from routing.engine.router import Router, build_router
from routing.engine.settle import DUPLICATE, HELD_BY_PAUSE, Settlement, duplicate
from routing.engine.world import SnapshotReads
from routing.extension import EventSnapshot, Sample, freeze
from routing.models import Generation, GenerationKind, RouteRecord
from worklife.flow import flow_preview

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
    HELD = "held"  # its route is paused: unrouted, held in order until the route resumes


@dataclass(frozen=True, slots=True)
class Recorded:
    """What routing recorded for an accepted Event it already decided (routing decides an
    Event once): shown before a trace of it as new."""

    seq: int
    state: str
    at: datetime | None
    policy: str = ""
    work_id: int | None = None
    route: str = ""
    binding: str = ""
    generation: str = ""

    @property
    def outcome(self) -> str:
        """What was recorded, as an operator reads it: ``start on Work 3 via pr/triage``."""
        parts = [self.policy or self.state]
        if self.work_id:
            parts.append(f"on Work {self.work_id}")
        if self.route:
            parts.append(f"via {self.route}" + (f"/{self.binding}" if self.binding else ""))
        return " ".join(parts)


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
    event: int | None = None  # the accepted Event traced (as itself or as new), or a duplicate's original
    filter: tuple[str, ...] | None = None  # the routes asked (R37); None: every route of the scope
    recorded: Recorded | None = None  # an Event traced as new: what routing recorded for it
    # What flow control would do with the Work's attempt ("": its binding has none; worklife.flow)
    # and the kind of hold it would record ("": none, it may start).
    flow: str = ""
    flow_hold: str = ""

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
            "filter": list(self.filter) if self.filter is not None else None,
            "flow": self.flow,
            "flow_hold": self.flow_hold,
        }


def trace(
    *,
    payload: Any,
    clock: Clock,
    generation: str | None = None,
    operator: bool = False,
    options: RouterOptions | None = None,
    default_scope: str | None = None,
    filter: Sequence[str] | None = None,
    as_new: bool = False,
) -> TraceResult:
    """Trace ``payload`` (a structured-mode CloudEvent with ``scope``) against the live
    generation, or the one ``generation`` names (``"3"``, ``"candidate:12"``).

    ``operator`` traces an Event an operator would send (source ``core.manual``, R30).
    ``default_scope`` is the sender's default scope (an API token's), as acceptance takes it;
    without it an Event without a scope takes the generation's ``default_scope``. ``filter``
    names the routes (slots of the Event's scope) to ask, in route order; an unknown one is
    refused (R37). ``as_new``: an Event whose (source, id) is accepted is traced as if it were
    accepted now, not as the duplicate acceptance would store nothing for."""
    target = find_generation(generation) if generation else live_generation()
    if target is None:
        raise TraceRefused("scope", "no configuration has been applied yet")
    router = build_router(clock=clock, generation=target, options=options or RouterOptions(workers=1))
    try:
        return _trace(
            router,
            payload,
            operator=operator,
            default_scope=default_scope,
            filter=filter,
            as_new=as_new,
            recorded=generation is not None and target.pk != live_generation_id(),
        )
    finally:
        router.close()


def trace_candidate(
    *,
    candidate: Generation,
    payload: Any,
    clock: Clock,
    operator: bool = False,
    options: RouterOptions | None = None,
    filter: Sequence[str] | None = None,
) -> TraceResult:
    """Trace against a candidate configuration (stored, not applied)."""
    if candidate.kind != GenerationKind.CANDIDATE:
        raise TraceRefused(None, f"{candidate} is not a candidate")
    router = build_router(clock=clock, generation=candidate, options=options or RouterOptions(workers=1))
    try:
        return _trace(router, payload, operator=operator, filter=filter, recorded=True)
    finally:
        router.close()


def trace_offered(
    *,
    payload: Any,
    clock: Clock,
    generation: str | None = None,
    operator: bool = False,
    options: RouterOptions | None = None,
    filter: Sequence[str] | None = None,
) -> TraceResult:
    """Trace what an operator offers in the console. An Event whose ``(source, id)`` names an
    accepted Event is that Event ("Trace this Event"): one still unrouted is traced as routing
    will route it (:func:`trace_event`); one routing already decided (it decides an Event once)
    is traced as new, as if accepted now, with what routing recorded for it (``recorded``).
    Anything else is traced as a hypothetical Event (:func:`trace`)."""
    accepted = None
    if (
        isinstance(payload, dict)
        and isinstance(payload.get("source"), str)
        and isinstance(payload.get("id"), str)
    ):
        accepted = (
            Event.objects.filter(source=payload["source"], envelope_id=payload["id"])
            .only("seq", "route_state", "routed_at", "scope")
            .first()
        )
    if accepted is None:
        return trace(
            payload=payload,
            clock=clock,
            generation=generation,
            operator=operator,
            options=options,
            filter=filter,
        )
    try:
        offered = parse_envelope(
            {"specversion": "1.0", **payload}, trusted=operator and payload["source"] == MANUAL_SOURCE
        )
    except EnvelopeInvalid as exc:
        raise TraceRefused(exc.field, exc.message) from exc
    _refuse_conflict(offered, accepted.seq)
    if accepted.is_settled:
        result = trace(
            payload=payload,
            clock=clock,
            generation=generation,
            operator=operator,
            options=options,
            filter=filter,
            as_new=True,
        )
        return replace(result, event=accepted.seq, recorded=_recorded_of(accepted))
    result = trace_event(seq=accepted.seq, clock=clock, generation=generation, options=options, filter=filter)
    note = f"its source and id are accepted Event #{accepted.seq}: this traces that Event (sent again, it would store nothing)"
    return replace(result, notes=(note, *result.notes))


def trace_event(
    *,
    seq: int,
    clock: Clock,
    generation: str | None = None,
    options: RouterOptions | None = None,
    filter: Sequence[str] | None = None,
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
        scope = router.configuration.scope_or_empty(event.scope)
        only = _limits(scope, filter)
        snap = snapshots_isolated(Event.objects.filter(seq=seq))[0]
        replay = None
        if router.configuration.rate_limited and target.pk != live_generation_id():
            # Not the live configuration: its rate limits count what routing recorded.
            at = Event.objects.values_list("accepted_at", flat=True).get(seq=seq)
            replay = (recorded_takes(router.configuration, event.scope, now=at), at)
        settlement, evaluation = router.simulate(snap, only=only, replay=replay)
        return _result(router.configuration.label, scope, settlement, evaluation, event=seq, only=only)
    finally:
        router.close()


def route_filter(text: str) -> tuple[str, ...] | None:
    """The route slots a filter written as text names (``"pr, chat"`` or ``"pr chat"``), in the
    order given; ``None`` when it names none (every route is asked)."""
    names = tuple(dict.fromkeys(name for name in text.replace(",", " ").split() if name))
    return names or None


def _limits(scope: EffectiveScope, filter: Sequence[str] | None) -> frozenset[str] | None:
    """The slots a trace's filter asks (R37), or ``None`` for every route. A filter naming no
    route, or a route the scope does not have, is refused naming the scope's routes."""
    if filter is None:
        return None
    if not isinstance(filter, list | tuple) or not all(isinstance(name, str) for name in filter):
        raise TraceRefused("filter", "filter must be a list of route names")
    known = [route.slot for route in scope.routes]
    listed = ", ".join(known) if known else "none"
    if not filter:
        raise TraceRefused("filter", f"filter names no route; the routes of scope {scope.path} are: {listed}")
    unknown = [name for name in dict.fromkeys(filter) if name not in known]
    if unknown:
        names = ", ".join(repr(name) for name in unknown)
        raise TraceRefused(
            "filter",
            f"unknown route{'s' if len(unknown) > 1 else ''} {names} in scope {scope.path}; its routes are: {listed}",
        )
    return frozenset(filter)


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
        self.ledger = RateLedger()

    def __call__(
        self, payload: Any, operator: bool = False, *, accepted_at: datetime | None = None
    ) -> TraceResult:
        """Trace ``payload`` like :func:`trace`. With ``accepted_at`` (a replay of Events in
        acceptance order), its rate limits count as if it was accepted then, among the takes of
        this tracer's earlier replayed traces (:class:`RateLedger`)."""
        replay = (self.ledger, accepted_at) if accepted_at is not None else None
        return _trace(self._router, payload, operator=operator, reads=self._reads, replay=replay)

    def rate_limited(self, scope: str) -> bool:
        """Whether a route of ``scope`` has a rate limit in this tracer's configuration."""
        effective = self._router.configuration.scopes.get(scope)
        return effective is not None and any(route.rate_limit is not None for route in effective.routes)

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
    filter: Sequence[str] | None = None,
    as_new: bool = False,
    replay: tuple[RateLedger, datetime] | None = None,
    recorded: bool = False,
) -> TraceResult:
    """Trace ``payload`` with ``router``. ``recorded``: the router's configuration is not the
    live one, so its rate limits count what routing recorded through their routes
    (:func:`~routing.engine.ratelimit.recorded_takes`), not the live configuration's takes."""
    envelope = _admitted(router, payload, operator=operator, default_scope=default_scope)
    label = router.configuration.label
    scope = router.configuration.scope_or_empty(envelope.scope)
    only = _limits(scope, filter)
    with read_snapshot():
        # A run of traces (``reads`` given) shares what they read alike; a lone trace reads
        # everything afresh, as the route commit does.
        shared = reads is not None
        reads = reads if reads is not None else TraceReads()
        snap = _hypothetical(envelope, reads.last_seq())
        accepted = None if as_new else reads.accepted(envelope.source, envelope.id)
        if accepted is not None:
            _refuse_conflict(envelope, accepted)
            # Acceptance would store nothing: no route is asked (deduplication, R5).
            return _result(label, scope, duplicate(snap.seq, accepted), None, event=accepted, only=only)
        if recorded and replay is None and router.configuration.rate_limited:
            now = router.clock()
            replay = (recorded_takes(router.configuration, envelope.scope, now=now), now)
        settlement, evaluation = router.simulate(
            snap,
            window=reads.window(router, snap) if shared else None,
            memo=reads.world if shared else None,
            accepted=False,
            only=only,
            replay=replay,
        )
        result = _result(label, scope, settlement, evaluation, only=only)
        flow, hold = _flow(scope, result, snap, router.clock())
    return replace(result, flow=flow, flow_hold=hold, notes=(*result.notes, flow)) if flow else result


def _flow(scope: EffectiveScope, result: TraceResult, snap: EventSnapshot, now: datetime) -> tuple[str, str]:
    """What flow control would do with the attempt of the Work the Event goes to, and the kind
    of hold (the claim's own rules, :func:`worklife.flow.flow_preview`), or ``("", "")``."""
    binding = scope.bindings.get(result.binding) if result.binding else None
    if binding is None or result.effect not in (Effect.START, Effect.QUEUE):
        return "", ""
    event = {
        "type": snap.type,
        "source": snap.source,
        "subject": snap.subject,
        "scope": snap.scope,
        "data": snap.data,
    }
    return flow_preview(
        binding=binding.name,
        binding_scope=binding.scope,
        policy=binding.flow,
        work_id=result.work_id,
        event=event,
        now=now,
    )


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
    scope: EffectiveScope,
    settlement: Settlement,
    evaluation: Evaluation | None,
    *,
    event: int | None = None,
    only: frozenset[str] | None = None,
) -> TraceResult:
    """The trace of one settlement: its effect as routing records it, and notes saying why.
    Every route asked has a verdict: when none was consulted (a duplicate, an Event backing
    off, a failure before any route answered) each is ``bypassed``, saying why (R40)."""
    decision = settlement.decision
    notes = _notes(settlement)
    if settlement.state == DUPLICATE:
        effect = TraceEffect.DUPLICATE
    elif settlement.state == RouteState.FAILED:
        effect = TraceEffect.FAILED
    elif settlement.waiting_on is not None:
        effect = TraceEffect.WAITING
    elif settlement.reason == HELD_BY_PAUSE:
        effect = TraceEffect.HELD
    elif decision is not None and decision.effect == Effect.CONFLICT:
        effect = TraceEffect.CONFLICT  # counted as a failure too (conflicting_identity)
    elif settlement.error is not None:
        effect = TraceEffect.ERROR
    elif decision is not None:
        effect = Effect.START if decision.new_work else decision.effect
    else:
        effect = TraceEffect.WAITING
    verdict_source = (decision.evaluation if decision is not None else None) or evaluation
    verdicts = verdict_source.verdicts if verdict_source is not None else ()
    error = settlement.error
    if not verdicts:
        why = f"not asked: {notes[0] if notes else settlement.reason or effect}"
        verdicts = tuple(
            RouteVerdict(route.slot, route.scope, Verdict.BYPASSED, why)
            for route in scope.routes
            if only is None or route.slot in only
        )
    return TraceResult(
        generation=label,
        scope=scope.path,
        effect=effect,
        reason=settlement.reason if decision is None or not settlement.settled else decision.reason,
        verdicts=verdicts,
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
        filter=tuple(route.slot for route in scope.routes if route.slot in only)
        if only is not None
        else None,
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
    if settlement.reason == HELD_BY_PAUSE and settlement.stored_reason:
        notes.append(f"{settlement.stored_reason}: routing would hold it unrouted until the route resumes")
    error = settlement.error
    if error is not None and settlement.state == RouteState.UNROUTED:
        if decision is None:
            notes.append(
                f"backing off after {error.attempts} failure(s): its handlers are not asked before then"
            )
        elif error.backoff_until is not None:
            notes.append(f"failure {error.attempts}: retried after {error.backoff_until.isoformat()}")
    if settlement.state == RouteState.FAILED and error is not None:
        notes.append(f"routing gives up after {error.attempts} failure(s): the Event is dead-lettered")
    if decision is None:
        return notes
    if decision.timed_out_wait is not None:
        wait = decision.timed_out_wait
        notes.append(f"the due timeout of wait {wait.name or wait.id} wins first: the Work is ready again")
    if settlement.won_first is not None:
        winner, wait = settlement.won_first
        notes.append(
            f"earlier Event #{winner} wins Work {decision.work_id}'s wait {wait.name or wait.id} first: "
            "the Work runs again and this Event routes to it as usual"
        )
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
        notes.append("the operator addressed this Work: it needs no route to find it")
    if decision.reason == Reason.CONTEXT:
        notes.append("kept as context for the waiting Work; its wait still decides")
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
        notes=(f"already {event.route_state}: routing decides an Event once",),
        state=event.route_state,
        attempts=record.attempts if record else 0,
        event=event.seq,
    )


def _recorded_of(event: Event) -> Recorded:
    """What routing recorded for the settled ``event``: when, and to what."""
    record = RouteRecord.objects.filter(event_id=event.seq).first()
    if record is None:
        return Recorded(seq=event.seq, state=event.route_state, at=event.routed_at)
    return Recorded(
        seq=event.seq,
        state=event.route_state,
        at=record.decided_at,
        policy=record.policy,
        work_id=record.work_id,
        route=record.route,
        binding=record.binding,
        generation=record.generation,
    )
