"""The route loop's metrics, recorded once per pass: Events settled by scope and policy, route
failures by code, and the route latency (acceptance to the route decision) of the Events it
routed. Label values come from the configuration (scopes), the decision's policies and the route
error codes: their number is bounded, and no Event id is ever a label (docs/operations.md)."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Sequence

from causal.models import Event, RouteState
from infra.metrics import Counter, Histogram, enabled
from infra.queries import Listed, SecondsBetween
from routing.engine.settle import RouteOutcome

EVENTS_ROUTED = Counter(
    "conduit_events_routed_total",
    "Events the route loop settled, by scope and policy: start, queue, inject, interrupt, held, drop, "
    "wake, unmatched (no route matched), failed (given up on: dead-lettered).",
    ("scope", "policy"),
)
ROUTE_FAILURES = Counter(
    "conduit_route_failures_total",
    "Route failures, by error code: each failed try of a retried route, and the one given up on.",
    ("code",),
)
ROUTE_LATENCY = Histogram(
    "conduit_route_latency_seconds",
    "Seconds from an Event's acceptance to its route decision, for the Events routed (not given up on).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900),
)
FAILED = "failed"


def pass_routed(outcomes: Sequence[RouteOutcome]) -> None:
    """Record a committed pass's outcomes: one read of the settled Events' scopes and latencies
    (a partial index's rows, by seq), a few counter writes and one histogram write a bucket."""
    if not outcomes or not enabled():
        return
    failures = Tally((outcome.error.code.value,) for outcome in outcomes if outcome.error is not None)
    ROUTE_FAILURES.inc_counts(failures)
    settled = {outcome.seq: outcome for outcome in outcomes if outcome.settled}
    if not settled:
        return
    rows = Event.objects.filter(seq__in=Listed(settled)).values_list(
        "seq", "scope", "route_state", SecondsBetween("routed_at", "accepted_at")
    )
    routed: Tally[tuple[str, str]] = Tally()
    latencies: list[float] = []
    for seq, scope, state, latency in rows:
        if state == RouteState.ROUTED:
            decision = settled[seq].decision
            routed[(scope, decision.policy if decision is not None else state)] += 1
            if latency is not None:
                latencies.append(max(latency, 0.0))
        else:
            routed[(scope, FAILED if state == RouteState.FAILED else state)] += 1
    EVENTS_ROUTED.inc_counts(routed)
    ROUTE_LATENCY.observe_many(latencies)
