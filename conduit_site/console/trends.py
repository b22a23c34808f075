"""Trends: how many Events were accepted and settled, how many attempts ran, how long routing
took and how the backlog moved, bucketed over the last hour (a minute a bucket) and the last
day (20 minutes a bucket).

Counts are per-bucket range counts in one statement a table: a list of buckets (a ``VALUES``
table of bounds) and, for each, ``COUNT(*)`` of the rows whose timestamp falls in it, which
walks only that range of an index on the timestamp (covering the columns counted apart), with
no function evaluated per row and no sort. SQLite and PostgreSQL run the same SQL.

A bucket that closed :data:`SETTLED_AFTER` ago cannot change any more (its Events were
accepted, routed and run in it): its counts and route latency are kept in the cache, so that a
page counts and ranks only the buckets still open and those not seen yet.

Route latency (acceptance to the route decision) is a nearest-rank percentile per bucket,
ranked in the database (a window function over the bucket's routed Events, which a partial
index covers) and read back as two rows a bucket; a page ranks at most :data:`RANK_BUDGET`
Events of settled buckets not ranked yet.

The backlog needs no history of its own: the number of unrouted Events at the end of a bucket
is now's count, less the Events accepted since, plus those settled since.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.core.cache import cache
from django.db import NotSupportedError, connection
from django.db.models import Count, F, Func, IntegerField, Q, Window
from django.db.models.functions import RowNumber

from causal.models import Event, RouteState
from infra.queries import SecondsBetween
from routing.engine.selectors import DEAD_DISPOSITIONS
from routing.models import Disposition, RouteRecord
from worklife.models import Attempt, AttemptState

MINUTE = 60
# The hour: 60 buckets of a minute. The day: 72 buckets of 20 minutes.
HOUR_BUCKET = MINUTE
DAY_BUCKET = 20 * MINUTE
HOUR_BUCKETS = 60
DAY_BUCKETS = 72
# The route decision's policy for an Event no route matched: counted apart from "routed".
UNMATCHED = "unmatched"
FAILED_ATTEMPT_STATES = (AttemptState.FAILED.value, AttemptState.LOST.value)
# The percentiles of route latency, in per cent.
PERCENTILES = (50, 99)


class BucketNumber(Func):
    """The number of the ``size``-second bucket a datetime falls in, counted from ``start``
    (an integer; both backends divide integers as integers)."""

    output_field = IntegerField()

    def __init__(self, expression, *, start: datetime, size: int) -> None:
        super().__init__(expression)
        self.start = int(start.timestamp())
        self.size = size

    def as_sql(self, compiler, connection, **extra):  # pragma: no cover - only the two below
        raise NotSupportedError(f"trends are not written for {connection.vendor}")

    def as_sqlite(self, compiler, connection, **extra):
        sql, params = compiler.compile(self.source_expressions[0])
        return f"((CAST(strftime('%%s', {sql}) AS INTEGER) - %s) / %s)", [*params, self.start, self.size]

    def as_postgresql(self, compiler, connection, **extra):
        sql, params = compiler.compile(self.source_expressions[0])
        return (
            f"((FLOOR(EXTRACT(EPOCH FROM {sql}))::bigint - %s) / %s)",
            [*params, self.start, self.size],
        )


@dataclass(frozen=True, slots=True)
class Span:
    """A chart's time axis: ``buckets`` buckets of ``size`` seconds from ``start``; the last
    one holds ``now``."""

    name: str
    start: datetime
    size: int
    buckets: int

    @classmethod
    def ending_at(cls, name: str, now: datetime, *, size: int, buckets: int) -> Span:
        epoch = int(now.timestamp())
        end = (epoch // size + 1) * size
        return cls(name, datetime.fromtimestamp(end - size * buckets, tz=UTC), size, buckets)

    @property
    def end(self) -> datetime:
        return self.start + timedelta(seconds=self.size * self.buckets)

    def bucket_start(self, number: int) -> datetime:
        return self.start + timedelta(seconds=self.size * number)

    @property
    def starts(self) -> list[datetime]:
        return [self.bucket_start(n) for n in range(self.buckets)]


@dataclass(frozen=True, slots=True)
class Trend:
    """The series of one span; each list has one value a bucket, oldest first. Counts are
    per bucket; :meth:`per_minute` turns one into a rate. Latencies are seconds, ``None``
    where the bucket routed nothing."""

    span: Span
    accepted: list[int]
    routed: list[int]
    unmatched: list[int]
    dead_lettered: list[int]
    skipped: list[int]
    attempts_started: list[int]
    attempts_completed: list[int]
    attempts_failed: list[int]
    latency_p50: list[float | None]
    latency_p99: list[float | None]
    # Settled buckets whose route latency is not ranked yet (see :data:`RANK_BUDGET`).
    latency_pending: int
    backlog: list[int]

    def per_minute(self, counts: Sequence[int]) -> list[float]:
        """Counts per bucket as Events (or attempts) per minute."""
        minutes = self.span.size / MINUTE
        return [count / minutes for count in counts]


@dataclass(frozen=True, slots=True)
class Trends:
    """The last hour (per minute) and the last day (per 20 minutes) at ``at``, with the
    unrouted count the backlog ends at."""

    at: datetime
    hour: Trend
    day: Trend
    unrouted: int


def trends(*, now: datetime, unrouted: int) -> Trends:
    """The hour's and the day's trends at ``now``; ``unrouted`` is the number of Events unrouted
    now (the backlog's last value). Five queries, none reading more than the buckets' index
    ranges, the last two ranking only the latencies of buckets not cached yet."""
    hour = Span.ending_at("hour", now, size=HOUR_BUCKET, buckets=HOUR_BUCKETS)
    day = Span.ending_at("day", now, size=DAY_BUCKET, buckets=DAY_BUCKETS)
    counts = _counts(hour, day, now=now)
    return Trends(
        at=now,
        hour=_trend(hour, counts[: hour.buckets], now=now, unrouted=unrouted),
        day=_trend(day, counts[hour.buckets :], now=now, unrouted=unrouted),
        unrouted=unrouted,
    )


COUNTED = (
    "accepted",
    "routed",
    "unmatched",
    "dead_lettered",
    "skipped",
    "attempts_started",
    "attempts_completed",
    "attempts_failed",
)


def _column(model, field: str) -> str:
    return f"{connection.ops.quote_name(model._meta.db_table)}.{connection.ops.quote_name(model._meta.get_field(field).column)}"


# A bucket closed this long ago holds every Event it ever will (an Event is accepted and
# routed at its commit's clock, and a pass commits within its call timeout).
SETTLED_AFTER = timedelta(minutes=5)
CACHE_SECONDS = 2 * 86_400
CACHE_PREFIX = "conduit.trends"


def _cache_key(kind: str, span: Span, number: int) -> str:
    return f"{CACHE_PREFIX}.{kind}.{span.size}.{int(span.bucket_start(number).timestamp())}"


def _counts(*spans: Span, now: datetime) -> list[dict[str, int]]:
    """For each bucket of ``spans`` in turn, each counted series: settled buckets from the
    cache when it has them, the others counted (:func:`_bucket_counts`) and the settled ones
    among them kept."""
    buckets = [(span, n) for span in spans for n in range(span.buckets)]
    keys = [_cache_key("counts", span, n) for span, n in buckets]
    settled = {
        key
        for key, (span, n) in zip(keys, buckets, strict=True)
        if span.bucket_start(n + 1) <= now - SETTLED_AFTER
    }
    cached = cache.get_many(list(settled))
    missing = [i for i, key in enumerate(keys) if key not in cached]
    counted = _bucket_counts(
        [
            (buckets[i][0].bucket_start(buckets[i][1]), buckets[i][0].bucket_start(buckets[i][1] + 1))
            for i in missing
        ]
    )
    fresh = dict(zip((keys[i] for i in missing), counted, strict=True))
    cache.set_many({key: value for key, value in fresh.items() if key in settled}, CACHE_SECONDS)
    return [cached.get(key) or fresh[key] for key in keys]


def _bucket_counts(bounds: Sequence[tuple[datetime, datetime]]) -> list[dict[str, int]]:
    """For each ``[start, end)`` of ``bounds``, each counted series. Three queries (none for
    no bounds): Events accepted; route decisions by disposition and policy; attempts started
    and ended."""
    if not bounds:
        return []
    counts: list[dict[str, int]] = [dict.fromkeys(COUNTED, 0) for _ in bounds]
    series = [
        (Event, [("accepted", "accepted_at", "", [])]),
        (
            RouteRecord,
            [
                (
                    "routed",
                    "decided_at",
                    "disposition = %s AND policy <> %s",
                    [Disposition.ROUTED, UNMATCHED],
                ),
                ("unmatched", "decided_at", "policy = %s", [UNMATCHED]),
                ("dead_lettered", "decided_at", "disposition = %s", [Disposition.FAILED]),
                ("skipped", "decided_at", "disposition = %s", [Disposition.SKIPPED]),
            ],
        ),
        (
            Attempt,
            [
                ("attempts_started", "started_at", "", []),
                ("attempts_completed", "ended_at", "state = %s", [AttemptState.SUCCEEDED]),
                ("attempts_failed", "ended_at", "state IN (%s, %s)", list(FAILED_ATTEMPT_STATES)),
            ],
        ),
    ]
    adapt = connection.ops.adapt_datetimefield_value
    cast = "CAST(%s AS timestamp with time zone)" if connection.vendor == "postgresql" else "%s"
    values = ", ".join(f"({n}, {cast}, {cast})" for n in range(len(bounds)))
    value_params = [adapt(moment) for pair in bounds for moment in pair]
    for model, counted in series:
        table = connection.ops.quote_name(model._meta.db_table)
        columns, params = [], []
        for name, field, condition, condition_params in counted:
            column = _column(model, field)
            where = f"{column} >= bucket.lo AND {column} < bucket.hi"
            if condition:
                where += f" AND {condition}"
            columns.append(f"(SELECT COUNT(*) FROM {table} WHERE {where}) AS {name}")
            params.extend(str(p) for p in condition_params)
        sql = f"WITH bucket (n, lo, hi) AS (VALUES {values}) SELECT n, {', '.join(columns)} FROM bucket ORDER BY n"
        with connection.cursor() as cursor:
            cursor.execute(sql, [*value_params, *params])
            for row in cursor.fetchall():
                for (name, *_), value in zip(counted, row[1:], strict=True):
                    counts[row[0]][name] = value
    return counts


# The most routed Events one page ranks for one span's latency. Settled buckets are ranked
# once and cached, newest first: after a restart, a day of 100,000 Events takes ten pages to
# rank in full, each within the budget.
RANK_BUDGET = 10_000


def _latency_percentiles(
    span: Span, *, now: datetime, routed: Sequence[int], budget: int | None = None
) -> tuple[dict[int, dict[int, float]], int]:
    """{bucket number: {percentile: seconds}} of the route latency (acceptance to the route
    decision) of the Events the router routed in each bucket of ``span`` (``routed`` counts
    them a bucket), nearest-rank percentiles; and how many settled buckets were left for later.

    Settled buckets come from the cache when it has them. The others are ranked in one query
    (at most two rows back a bucket), newest first, stopping before a bucket would take the
    ranked Events past ``budget`` (:data:`RANK_BUDGET` by default)."""
    budget = RANK_BUDGET if budget is None else budget
    settled = {n for n in range(span.buckets) if span.bucket_start(n + 1) <= now - SETTLED_AFTER}
    cached = cache.get_many([_cache_key("latency", span, n) for n in settled])
    result: dict[int, dict[int, float]] = {}
    for n in settled:
        value = cached.get(_cache_key("latency", span, n))
        if value is not None:
            result[n] = {int(p): v for p, v in value.items()}
    missing = [n for n in range(span.buckets) if n not in result]
    if not missing:
        return {n: v for n, v in result.items() if v}, 0
    # The buckets still open are ranked on every page; of the settled ones not cached, the
    # newest, as many as the budget allows and at least one, so that every page makes progress.
    chosen = [n for n in missing if n not in settled]
    ranked_rows = sum(routed[n] for n in chosen)
    waiting = [n for n in missing if n in settled]
    for count, n in enumerate(reversed(waiting)):
        if count and ranked_rows + routed[n] > budget:
            break
        ranked_rows += routed[n]
        chosen.append(n)
    first = min(chosen)
    pending = len(missing) - len(chosen)
    bucket = BucketNumber("routed_at", start=span.start, size=span.size)
    ranked = (
        Event.objects.filter(
            route_state=RouteState.ROUTED, routed_at__gte=span.bucket_start(first), routed_at__lt=span.end
        )
        .annotate(
            bucket=bucket,
            latency=SecondsBetween("routed_at", "accepted_at"),
            rank=Window(RowNumber(), partition_by=[bucket], order_by=[F("latency").asc(), F("seq").asc()]),
            total=Window(Count("pk"), partition_by=[bucket]),
        )
        .order_by()
    )
    # The nearest rank of percentile p among n values is ceil(p * n / 100), in integers.
    wanted = Q()
    for percentile in PERCENTILES:
        wanted |= Q(rank=(F("total") * percentile + 99) / 100)
    fresh: dict[int, dict[int, float]] = {n: {} for n in chosen}
    for row in ranked.filter(wanted).values("bucket", "latency", "rank", "total"):
        for percentile in PERCENTILES:
            if row["rank"] == (row["total"] * percentile + 99) // 100 and row["bucket"] in fresh:
                fresh[row["bucket"]][percentile] = max(float(row["latency"]), 0.0)
    cache.set_many({_cache_key("latency", span, n): fresh[n] for n in chosen if n in settled}, CACHE_SECONDS)
    result.update(fresh)
    return {n: v for n, v in result.items() if v}, pending


def _trend(span: Span, counts: Sequence[dict[str, int]], *, now: datetime, unrouted: int) -> Trend:
    """``span``'s series from its buckets' ``counts``."""
    series = {name: [bucket[name] for bucket in counts] for name in COUNTED}
    # The Events routed in a bucket (the route state of the unmatched is "routed" too).
    routed = [a + b for a, b in zip(series["routed"], series["unmatched"], strict=True)]
    latencies, pending = _latency_percentiles(span, now=now, routed=routed)
    # Unrouted at the end of bucket n: now's count, less what was accepted after it, plus
    # what was settled (routed, unmatched, dead-lettered or skipped) after it.
    backlog = [0] * span.buckets
    level = unrouted
    for n in reversed(range(span.buckets)):
        backlog[n] = max(level, 0)
        settled = (
            series["routed"][n] + series["unmatched"][n] + series["dead_lettered"][n] + series["skipped"][n]
        )
        level = level - series["accepted"][n] + settled
    return Trend(
        span=span,
        latency_p50=[latencies.get(n, {}).get(50) for n in range(span.buckets)],
        latency_p99=[latencies.get(n, {}).get(99) for n in range(span.buckets)],
        latency_pending=pending,
        backlog=backlog,
        **series,
    )


# Counting every dead letter costs a scan of them all: past this many, "10,000+".
COUNT_CAP = 10_000


def dead_letters_count(*, cap: int | None = None) -> tuple[int, bool]:
    """How many dead letters (failed and skipped Events) there are, counting at most ``cap``
    (on the disposition index; :data:`COUNT_CAP` by default): ``(count, more)``, ``more`` when
    there are more. One query."""
    cap = COUNT_CAP if cap is None else cap
    count = RouteRecord.objects.filter(disposition__in=DEAD_DISPOSITIONS).order_by()[: cap + 1].count()
    return min(count, cap), count > cap
