"""The route loop's metrics, recorded once per pass: Events settled by scope and policy, route
failures by code, the Events dropped over a route's rate limit by route, and the route latency (acceptance to the route decision) of the Events it
routed. Label values come from the configuration (scopes), the decision's policies and the route
error codes: their number is bounded, and no Event id is ever a label (docs/operations.md).

A pass costs them a few counter writes and one read a commit: each routed Event's acceptance
time, from the index the home page's latency chart reads (``event_routed_latency_idx``: the
commit's ``routed_at``, each Event's ``accepted_at``; no table row is read), one float an Event,
sorted into the buckets at once (:meth:`infra.metrics.Histogram.observe_many`). Reading the
window's rows back through the ORM cost 5% of routing instead (docs/performance.md)."""

from __future__ import annotations

import functools
from collections import Counter as Tally
from collections.abc import Mapping, Sequence
from datetime import datetime

from django.db import connection

from causal.models import Event, RouteState
from infra.metrics import Counter, Histogram, enabled
from routing.engine.decide import Effect
from routing.engine.ratelimit import is_rate_limited
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
EVENTS_RATE_LIMITED = Counter(
    "conduit_events_rate_limited_total",
    "Events dropped because the route that would take them was over its rate limit, by the scope "
    "that declares the route and the route's slot.",
    ("scope", "route"),
)
FAILED = "failed"
# The states as plain strings (an enum member's lookup costs more, once an Event).
_ROUTED, _FAILED = RouteState.ROUTED.value, RouteState.FAILED.value
_DROP = Effect.DROP


def pass_routed(
    outcomes: Sequence[RouteOutcome], *, scopes: Mapping[int, str], commits: Sequence[datetime]
) -> None:
    """Record a pass's outcomes. ``scopes``: each Event's scope (the window's snapshots');
    ``commits``: the times the pass's commits wrote as ``routed_at``."""
    if not outcomes or not enabled():
        return
    failures: Tally[tuple[str]] = Tally()
    settled: Tally[tuple[str, str]] = Tally()
    rate_limited: Tally[tuple[str, str]] = Tally()
    scope_of = scopes.get
    routed = False
    for outcome in outcomes:
        state, error = outcome.state, outcome.error
        if error is not None:
            failures[(error.code.value,)] += 1
        if state == _ROUTED:
            routed = True
            decision = outcome.decision
            settled[(scope_of(outcome.seq, ""), decision.effect if decision is not None else "")] += 1
            if decision is not None and decision.effect == _DROP and is_rate_limited(decision.reason):
                rate_limited[(decision.route_scope, decision.route)] += 1
        elif state == _FAILED:
            settled[(scope_of(outcome.seq, ""), FAILED)] += 1
    ROUTE_FAILURES.inc_counts(failures)
    EVENTS_ROUTED.inc_counts(settled)
    if rate_limited:
        EVENTS_RATE_LIMITED.inc_counts(rate_limited)
    if routed and commits:
        ROUTE_LATENCY.observe_many(latencies_routed_at(commits))


def latencies_routed_at(commits: Sequence[datetime]) -> list[float]:
    """The route latencies (seconds) of the Events routed at each of ``commits``: one query a
    commit (one in a pass, but for a pass that waited on another loop) over the partial index
    of routed Events, which holds both times (no table row is read; the literal state lets
    SQLite use it). The database reads each acceptance time as seconds since the epoch; the
    commit's own time is known here."""
    sql = _accepted_sql(connection.vendor)
    latencies: list[float] = []
    with connection.cursor() as cursor:
        for at in commits:
            cursor.execute(sql, [connection.ops.adapt_datetimefield_value(at)])
            routed = at.timestamp()
            latencies.extend(max(routed - accepted, 0.0) for (accepted,) in cursor.fetchall())
    return latencies


@functools.cache
def _accepted_sql(vendor: str) -> str:
    meta = Event._meta
    quote = connection.ops.quote_name
    routed_at = quote(meta.get_field("routed_at").column)
    accepted_at = quote(meta.get_field("accepted_at").column)
    state = quote(meta.get_field("route_state").column)
    if vendor == "postgresql":
        epoch = f"EXTRACT(EPOCH FROM {accepted_at})::float8"
    else:
        epoch = f"((julianday({accepted_at}) - 2440587.5) * 86400.0)"
    return (
        f"SELECT {epoch} FROM {quote(meta.db_table)} "
        f"WHERE {state} = '{RouteState.ROUTED.value}' AND {routed_at} = %s"
    )
