"""Route rate limits: a route declaring ``rate_limit: {limit: N, period: P, key: T}`` takes at
most N Events within any period P (per key rendered from the Event by T); an Event it would take
beyond that is dropped, its route record saying why (docs/flow-control.md).

What counts is the Events the route *took* (it started, queued or attached them as input of a
Work: effects start, queue, inject, interrupt, held), by their acceptance times: an Event is
dropped when the route took ``limit`` Events (for its key) accepted before it, less than
``period`` before its own acceptance. Dropped Events do not count. Decisions therefore depend on
acceptance times and earlier decisions only, never on when a route loop runs: a backlog routed
after a stop gets the decisions it would have had live.

A window reads its counts in one statement (:func:`counts_before`), for the Events whose routes
chose a rate-limited route, then counts the window's own takes in memory as it settles
(:class:`RateLimits`); the commit writes the takes with one insert (``RateLimitTake``). A
configuration without a rate limit reads and writes nothing for them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import connection

from causal.models import Event
from routing.engine import reasons
from routing.engine.decide import Decision, Effect, replace
from routing.engine.evaluate import snapshots_isolated
from routing.extension import EventSnapshot
from routing.models import RateLimitTake, RouteRecord
from worklife.flow import gate_name, rate_limit_text

if TYPE_CHECKING:
    from routing.config.effective import Configuration, EffectiveRoute
    from routing.engine.evaluate import Evaluation

# The effects by which a route takes an Event (a wake is no route's: every route is bypassed).
TAKES = frozenset({Effect.START, Effect.QUEUE, Effect.INJECT, Effect.INTERRUPT, Effect.HELD})


def event_fields(event: EventSnapshot) -> dict[str, Any]:
    """The Event as a rate limit's key template reads it (``{data.user}``, ``{subject}``)."""
    return {
        "id": event.id,
        "type": event.type,
        "source": event.source,
        "subject": event.subject,
        "scope": event.scope,
        "data": event.data,
    }


def counter_of(route: EffectiveRoute, event: EventSnapshot) -> tuple[str, str]:
    """The name of the counter an Event taken through ``route`` counts in
    (``rate_limit:<declaring scope>:<slot>[:<key>]``: the scopes inheriting the route share it)
    and its rendered key (``""`` without a key template)."""
    limit = route.rate_limit
    assert limit is not None
    key = limit.key.render(event_fields(event)) if limit.key is not None else ""
    return gate_name("rate_limit", route.scope, route.slot, key), key


def counts_before(candidates: Sequence[tuple[int, str, datetime, datetime]]) -> dict[int, int]:
    """For each candidate ``(seq, counter, after, until)``: how many Events taken in that counter
    were accepted before Event ``seq`` (a smaller seq) at a time in ``(after, until]``. One
    statement for them all (a chunk per the database's parameter limit), counted by the
    database on the counter's index."""
    counts: dict[int, int] = {}
    if not candidates:
        return counts
    table = connection.ops.quote_name(RateLimitTake._meta.db_table)
    join = (
        f"LEFT JOIN {table} r ON r.name = c.name AND r.accepted_at > c.lo AND r.accepted_at <= c.hi "
        "AND r.event_seq < c.seq GROUP BY c.seq"
    )
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            seqs, names, los, his = (list(column) for column in zip(*candidates, strict=True))
            cursor.execute(
                "SELECT c.seq, COUNT(r.event_seq) FROM UNNEST(%s::bigint[], %s::text[], "
                f"%s::timestamptz[], %s::timestamptz[]) AS c(seq, name, lo, hi) {join}",
                [seqs, names, los, his],
            )
            counts.update(cursor.fetchall())
            return counts

        # The text SQLite stores a time as (Django's adapt_datetimefield_value, UTC), without
        # its checks: two a candidate.
        def adapt(moment: datetime) -> str:
            return str(moment.astimezone(UTC).replace(tzinfo=None))

        chunk = max(1, connection.features.max_query_params // 4)
        for start in range(0, len(candidates), chunk):
            part = candidates[start : start + chunk]
            rows = ", ".join(["(%s, %s, %s, %s)"] * len(part))
            params: list[Any] = []
            for seq, name, lo, hi in part:
                params += [seq, name, adapt(lo), adapt(hi)]
            cursor.execute(
                f"WITH c(seq, name, lo, hi) AS (VALUES {rows}) SELECT c.seq, COUNT(r.event_seq) FROM c {join}",
                params,
            )
            counts.update(cursor.fetchall())
    return counts


class RateLimits:
    """A window's rate limits as it settles: the counts read before it (:func:`read_rate_limits`)
    and the window's own takes, in memory, in acceptance order."""

    def __init__(
        self,
        *,
        counted: Mapping[int, int],
        counters: Mapping[int, tuple[str, str]],
        accepted: Mapping[int, datetime],
    ) -> None:
        self.counted = counted
        self.counters = counters
        self.accepted = accepted
        # The window's takes so far, by counter: (seq, accepted at).
        self.taken: dict[str, list[tuple[int, datetime]]] = {}
        # What the commit writes: (counter, seq, accepted at) of each Event the window takes.
        self.takes: list[list[Any]] = []

    def tokens(self, seq: int) -> set[tuple]:
        """The Event's rate limit counter as a target (``("rate", counter)``), if it counts in one."""
        counter = self.counters.get(seq)
        return {("rate", counter[0])} if counter is not None else set()

    def settle(self, event: EventSnapshot, decision: Decision, evaluation: Evaluation | None) -> Decision:
        """``decision`` when its route takes the Event within its rate limit (the take counted),
        else the Event dropped with the reason; any other decision as it is."""
        route = evaluation.route if evaluation is not None else None
        if (
            route is None
            or route.rate_limit is None
            or decision.effect not in TAKES
            or decision.route != route.slot
            or event.seq not in self.counters
        ):
            return decision
        limit = route.rate_limit
        counter, key = self.counters[event.seq]
        at = self.accepted[event.seq]
        after = at - timedelta(seconds=limit.period)
        mine = self.taken.setdefault(counter, [])
        taken = self.counted.get(event.seq, 0) + sum(
            1 for seq, t in mine if seq < event.seq and after < t <= at
        )
        if taken >= limit.limit:
            for_key = f" (key {key})" if limit.key is not None else ""
            why = (
                f"{reasons.RATE_LIMITED}route '{route.slot}' in {route.scope} is over its rate limit "
                f"{rate_limit_text(replace(limit, key=None))}{for_key}"
            )
            return replace(
                decision,
                effect=Effect.DROP,
                reason=why,
                work_id=None if decision.new_work else decision.work_id,
                new_work=False,
                binding="",
                input_kind="",
                attach_keys=(),
                intent_kind="",
                intent_attempt=None,
            )
        mine.append((event.seq, at))
        self.takes.append([counter, event.seq, at])
        return decision


class RateLedger:
    """The takes of a replay: an impact preview walks the Events it examines in acceptance
    order, each traced as if accepted at its own acceptance time, and a rate limit counts the
    takes of the configuration traced among the Events walked before it (not the recorded
    takes, which are the live configuration's). One ledger per configuration; Events accepted
    before the first one walked count in none (docs/flow-control.md)."""

    def __init__(self) -> None:
        self._takes: dict[str, list[datetime]] = {}

    def count(self, counter: str, after: datetime, until: datetime) -> int:
        """The takes counted in ``counter`` at a time in ``(after, until]``."""
        return sum(1 for at in self._takes.get(counter, ()) if after < at <= until)

    def record(self, takes: Iterable[Sequence[Any]]) -> None:
        """Count ``(counter, seq, accepted at)`` takes (:attr:`RateLimits.takes`)."""
        for counter, _seq, at in takes:
            self._takes.setdefault(counter, []).append(at)


RECORDED_CAP = 10_000
"""The most recent Events a trace reads per rate-limited route (:func:`recorded_takes`), or the
route's limit when that is more: a limit without a key counts exactly (once it has ``limit``
takes, more cannot change what it decides); one with a key counts among these Events."""


def recorded_takes(configuration: Configuration, scope: str, *, now: datetime) -> RateLedger:
    """A ledger of what routing took through each rate-limited route of ``scope`` in
    ``configuration`` within its period before ``now``: the Events whose route records name the
    route's slot in a scope inheriting it, with a taking policy, counted in the configuration's
    counters (keys rendered by its templates). A trace against a configuration that is not live
    counts these: the recorded takes (``RateLimitTake``) are the live configuration's, and a
    limit it does not declare has none."""
    ledger = RateLedger()
    effective = configuration.scopes.get(scope)
    limited = [route for route in effective.routes if route.rate_limit is not None] if effective else []
    for route in limited:
        assert route.rate_limit is not None
        inheriting = [
            s.path
            for s in configuration.scopes.values()
            if any(r.slot == route.slot and r.scope == route.scope for r in s.routes)
        ]
        after = now - timedelta(seconds=route.rate_limit.period)
        accepted = dict(
            RouteRecord.objects.filter(
                route=route.slot,
                scope__in=inheriting,
                policy__in=TAKES,
                event__accepted_at__gt=after,
                event__accepted_at__lte=now,
            )
            .order_by("-event")
            .values_list("event", "event__accepted_at")[: max(RECORDED_CAP, route.rate_limit.limit)]
        )
        if route.rate_limit.key is None:  # one counter: no Event needs reading to name it
            counter = gate_name("rate_limit", route.scope, route.slot, "")
            ledger.record((counter, seq, at) for seq, at in accepted.items())
            continue
        for event in snapshots_isolated(Event.objects.filter(seq__in=list(accepted))):
            ledger.record([(counter_of(route, event)[0], event.seq, accepted[event.seq])])
    return ledger


def read_rate_limits(
    events: Iterable[EventSnapshot],
    evaluations: Mapping[int, Evaluation],
    accepted: Mapping[int, datetime],
    ledger: RateLedger | None = None,
) -> RateLimits:
    """The rate limits of a window's Events (``accepted``: their acceptance times), read in one
    statement for the Events whose routes chose a route with a rate limit; counted in
    ``ledger`` instead when a replay gives one."""
    counters: dict[int, tuple[str, str]] = {}
    candidates: list[tuple[int, str, datetime, datetime]] = []
    for event in events:
        evaluation = evaluations.get(event.seq)
        route = evaluation.route if evaluation is not None else None
        if route is None or route.rate_limit is None or event.seq not in accepted:
            continue
        counter = counters[event.seq] = counter_of(route, event)
        at = accepted[event.seq]
        candidates.append((event.seq, counter[0], at - timedelta(seconds=route.rate_limit.period), at))
    if ledger is not None:
        counted = {seq: ledger.count(counter, after, until) for seq, counter, after, until in candidates}
    else:
        counted = counts_before(candidates)
    return RateLimits(counted=counted, counters=counters, accepted=accepted)


def is_rate_limited(reason: str) -> bool:
    """Whether a drop's reason is a rate limit's (the metrics count those)."""
    return reason.startswith(reasons.RATE_LIMITED)
