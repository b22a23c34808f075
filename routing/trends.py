"""Trends: how many Events were accepted and settled, how many attempts ran, how long routing
took and how the backlog moved, bucketed over the last hour and the last day.

Every series is one set-based query grouped by a bucket number computed in SQL (``GROUP BY
bucket``), so a page reads a fixed number of rows however many Events there are: per-minute
counts of the last day (at most 1,440 rows a query), rolled up in Python into the day's
coarser buckets. Route latency (acceptance to the route decision) is a percentile per bucket,
computed in the database by ranking each bucket's latencies (a window function, on SQLite
and PostgreSQL alike) and reading back only the two ranks p50 and p99 fall on.

The backlog needs no history of its own: the number of unrouted Events at the end of a
bucket is today's count, less the Events accepted since, plus those settled since.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import NotSupportedError
from django.db.models import Count, F, FloatField, Func, IntegerField, Q, Window
from django.db.models.functions import RowNumber

from causal.models import Event
from routing.controls import DEAD_DISPOSITIONS
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


class SecondsBetween(Func):
    """``later - earlier`` in seconds (a float)."""

    output_field = FloatField()

    def as_sql(self, compiler, connection, **extra):  # pragma: no cover - only the two below
        raise NotSupportedError(f"trends are not written for {connection.vendor}")

    def as_sqlite(self, compiler, connection, **extra):
        later, later_params = compiler.compile(self.source_expressions[0])
        earlier, earlier_params = compiler.compile(self.source_expressions[1])
        return f"((julianday({later}) - julianday({earlier})) * 86400.0)", [*later_params, *earlier_params]

    def as_postgresql(self, compiler, connection, **extra):
        later, later_params = compiler.compile(self.source_expressions[0])
        earlier, earlier_params = compiler.compile(self.source_expressions[1])
        return f"EXTRACT(EPOCH FROM ({later} - {earlier}))::float8", [*later_params, *earlier_params]


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
    now (the backlog's last value). Six queries, each reading at most a few thousand rows."""
    hour = Span.ending_at("hour", now, size=HOUR_BUCKET, buckets=HOUR_BUCKETS)
    day = Span.ending_at("day", now, size=DAY_BUCKET, buckets=DAY_BUCKETS)
    # Per-minute counts over the whole day (the hour's buckets are the last of them).
    minutes = Span.ending_at("minutes", now, size=MINUTE, buckets=day.size * day.buckets // MINUTE)
    counts = _minute_counts(minutes)
    return Trends(
        at=now,
        hour=_trend(hour, minutes, counts, _latency_percentiles(hour), unrouted),
        day=_trend(day, minutes, counts, _latency_percentiles(day), unrouted),
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


def _minute_counts(span: Span) -> dict[str, dict[int, int]]:
    """Each counted series as {minute number: count} over ``span``. Four queries."""

    def bucketed(queryset, field: str):
        return (
            queryset.filter(**{f"{field}__gte": span.start, f"{field}__lt": span.end})
            .annotate(bucket=BucketNumber(field, start=span.start, size=span.size))
            .values("bucket")
            .order_by()
        )

    counts: dict[str, dict[int, int]] = {name: {} for name in COUNTED}
    for row in bucketed(Event.objects, "accepted_at").annotate(n=Count("pk")):
        counts["accepted"][row["bucket"]] = row["n"]
    routed = Q(disposition=Disposition.ROUTED) & ~Q(policy=UNMATCHED)
    for row in bucketed(RouteRecord.objects, "decided_at").annotate(
        routed=Count("pk", filter=routed),
        unmatched=Count("pk", filter=Q(policy=UNMATCHED)),
        dead_lettered=Count("pk", filter=Q(disposition=Disposition.FAILED)),
        skipped=Count("pk", filter=Q(disposition=Disposition.SKIPPED)),
    ):
        for name in ("routed", "unmatched", "dead_lettered", "skipped"):
            counts[name][row["bucket"]] = row[name]
    for row in bucketed(Attempt.objects, "started_at").annotate(n=Count("pk")):
        counts["attempts_started"][row["bucket"]] = row["n"]
    for row in bucketed(Attempt.objects, "ended_at").annotate(
        completed=Count("pk", filter=Q(state=AttemptState.SUCCEEDED)),
        failed=Count("pk", filter=Q(state__in=FAILED_ATTEMPT_STATES)),
    ):
        counts["attempts_completed"][row["bucket"]] = row["completed"]
        counts["attempts_failed"][row["bucket"]] = row["failed"]
    return counts


def _latency_percentiles(span: Span) -> dict[int, dict[int, float]]:
    """{bucket number: {percentile: seconds}} of the route latency (acceptance to the route
    decision) of the Events the router routed in each bucket of ``span``: nearest-rank
    percentiles, ranked in the database. One query returning at most two rows a bucket."""
    bucket = BucketNumber("decided_at", start=span.start, size=span.size)
    ranked = (
        RouteRecord.objects.filter(
            decided_at__gte=span.start, decided_at__lt=span.end, disposition=Disposition.ROUTED
        )
        .annotate(
            bucket=bucket,
            latency=SecondsBetween("decided_at", "event__accepted_at"),
            rank=Window(
                RowNumber(), partition_by=[bucket], order_by=[F("latency").asc(), F("event_id").asc()]
            ),
            total=Window(Count("pk"), partition_by=[bucket]),
        )
        .order_by()
    )
    # The nearest rank of percentile p among n values is ceil(p * n / 100), in integers.
    wanted = Q()
    for percentile in PERCENTILES:
        wanted |= Q(rank=(F("total") * percentile + 99) / 100)
    result: dict[int, dict[int, float]] = {}
    for row in ranked.filter(wanted).values("bucket", "latency", "rank", "total"):
        for percentile in PERCENTILES:
            if row["rank"] == (row["total"] * percentile + 99) // 100:
                result.setdefault(row["bucket"], {})[percentile] = max(float(row["latency"]), 0.0)
    return result


def _trend(
    span: Span,
    minutes: Span,
    counts: dict[str, dict[int, int]],
    latencies: dict[int, dict[int, float]],
    unrouted: int,
) -> Trend:
    """``span``'s series rolled up from the per-minute ``counts``."""
    per_bucket = span.size // MINUTE
    offset = int((span.start - minutes.start).total_seconds()) // MINUTE
    series: dict[str, list[int]] = {}
    for name in COUNTED:
        by_minute = counts[name]
        series[name] = [
            sum(by_minute.get(offset + n * per_bucket + m, 0) for m in range(per_bucket))
            for n in range(span.buckets)
        ]
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
