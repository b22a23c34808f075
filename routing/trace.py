"""Trace: a dry run of routing for a hypothetical Event (R37–R45).

A trace reads what routing reads (the scope's effective routes and bindings, the owning
Work, its active wait, earlier unrouted input) and calls the same code routing calls: the
handlers on the handler pool (outside any transaction), then :func:`routing.decide.decide`
on the world read the same way. It writes nothing. ``trace_candidate`` does the same against
a candidate configuration not yet applied; its generation reads ``candidate``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from causal.clock import Clock
from causal.models import Event
from causal.services import Envelope
from routing.config import find_generation, live_generation
from routing.decide import MANUAL_SOURCE, Decision, Effect, Reason
from routing.evaluate import Evaluation, RouteVerdict
from routing.extension import EventSnapshot, Sample, freeze
from routing.ingress import EnvelopeInvalid, parse_envelope
from routing.models import Generation, GenerationKind
from routing.router import Router, RouterOptions, build_router
from routing.services import check_event_size

TRACE_ID = "trace"


class TraceRefused(ValueError):
    """The trace was refused before any route was asked; ``field`` names what is wrong."""

    def __init__(self, field: str | None, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message

    def details(self) -> dict[str, Any]:
        return {"error": "invalid_trace", "field": self.field, "message": self.message}


@dataclass(frozen=True, slots=True)
class TraceResult:
    """What routing would do with the Event now, and why."""

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
        }


def trace(
    *,
    payload: Any,
    clock: Clock,
    generation: str | None = None,
    operator: bool = False,
    options: RouterOptions | None = None,
) -> TraceResult:
    """Trace ``payload`` (a structured-mode CloudEvent with ``scope``) against the live
    generation, or the one ``generation`` names (``"3"``, ``"candidate:12"``).

    ``operator`` traces an Event an operator would send (source ``core.manual``, R30)."""
    target = find_generation(generation) if generation else live_generation()
    if target is None:
        raise TraceRefused("scope", "no configuration has been applied yet")
    router = build_router(clock=clock, generation=target, options=options or RouterOptions(workers=1))
    try:
        return _trace(router, payload, operator=operator)
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


class Tracer:
    """Traces many Events against one generation with one router (see :func:`tracer`)."""

    def __init__(self, router: Router) -> None:
        self._router = router

    def __call__(self, payload: Any, operator: bool = False) -> TraceResult:
        """Trace ``payload`` like :func:`trace`."""
        return _trace(self._router, payload, operator=operator)

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
        evaluation = self._router.evaluate_one(_hypothetical(envelope))
        if evaluation.error is not None:
            return None
        scope = self._router.configuration.scope(envelope.scope)
        assert scope is not None  # _admitted refuses an unknown scope
        return (evaluation.route, evaluation.decision, dict(scope.bindings))


@contextmanager
def tracer(*, generation: Generation, clock: Clock, options: RouterOptions | None = None) -> Iterator[Tracer]:
    """One router for many traces against ``generation`` (an impact preview traces hundreds)."""
    router = build_router(clock=clock, generation=generation, options=options or RouterOptions(workers=1))
    try:
        yield Tracer(router)
    finally:
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


def _trace(router: Router, payload: Any, *, operator: bool) -> TraceResult:
    envelope = _admitted(router, payload, operator=operator)
    label = router.configuration.label
    snap = _hypothetical(envelope)
    evaluation = router.evaluate_one(snap)
    # Read what routing reads, in a transaction that is rolled back: nothing is written.
    with transaction.atomic():
        decision, notes = router.decide_one(snap, evaluation)
        transaction.set_rollback(True)
    return _result(label, snap.scope, decision, evaluation, notes)


def _admitted(router: Router, payload: Any, *, operator: bool) -> Envelope:
    """Refuse an Event acceptance would refuse (R38): a trace never explains an Event that
    could not happen. Missing ``specversion``/``id`` are filled in as acceptance requires."""
    if not isinstance(payload, dict):
        raise TraceRefused(None, "an Event must be a JSON object")
    offered = {"specversion": "1.0", "id": TRACE_ID, **payload}
    manual = operator and offered.get("source") == MANUAL_SOURCE
    try:
        envelope = parse_envelope(offered, trusted=manual)
        check_event_size(offered)
        if manual and envelope.type.startswith("core."):
            raise EnvelopeInvalid("type", f"type {envelope.type!r} is reserved for core Events (core.*)")
    except EnvelopeInvalid as exc:
        raise TraceRefused(exc.field, exc.message) from exc
    if router.configuration.scope(envelope.scope) is None:
        raise TraceRefused(
            "scope", f"unknown scope {envelope.scope!r}: not in generation {router.configuration.label}"
        )
    return envelope


def _hypothetical(envelope: Envelope) -> EventSnapshot:
    """The snapshot the Event would have if it were accepted now (last in acceptance order)."""
    last = Event.objects.order_by("-seq").values_list("seq", flat=True).first() or 0
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
    label: str, scope: str, decision: Decision, evaluation: Evaluation, notes: list[str]
) -> TraceResult:
    effect = decision.effect
    reason = decision.reason
    if decision.reason == Reason.ADDRESSED:
        notes.append("the operator addressed this Work: it needs no route to find it (R30)")
    if decision.reason == Reason.CONTEXT:
        notes.append("kept as context for the waiting Work; its wait still decides (R41)")
    verdicts = (decision.evaluation or evaluation).verdicts
    return TraceResult(
        generation=label,
        scope=scope,
        effect=effect if not decision.new_work else Effect.START,
        reason=reason,
        verdicts=verdicts,
        work_id=decision.work_id if decision.work_id and decision.work_id > 0 else None,
        route=decision.route,
        binding=decision.binding,
        keys=decision.keys,
        refusals=decision.refusals,
        error=decision.error.error_text if decision.error else "",
        notes=tuple(notes),
    )
