"""Trends on the home page: per-bucket counts, route latency percentiles and
the backlog, from factory-made Events, route records and attempts at known times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from conduit_site.console.trends import trends
from tests.causal.factories import EventFactory
from tests.routing.factories import RouteRecordFactory
from tests.worklife.factories import AttemptFactory

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 1, 5, 12, 30, 20, tzinfo=UTC)


def routed(accepted_at, decided_at, **kwargs):
    state = kwargs.get("disposition", "routed")
    return RouteRecordFactory(
        event=EventFactory(accepted_at=accepted_at, route_state=state, routed_at=decided_at),
        decided_at=decided_at,
        **kwargs,
    )


def test_hour_counts_accepted_and_settled_events_per_minute_bucket():
    minute = datetime(2026, 1, 5, 12, 25, tzinfo=UTC)
    for second in (0, 10, 59):
        EventFactory(accepted_at=minute + timedelta(seconds=second))
    EventFactory(accepted_at=minute - timedelta(seconds=1))  # the minute before
    EventFactory(accepted_at=NOW - timedelta(hours=2))  # outside the hour, inside the day
    routed(minute, minute + timedelta(seconds=30))
    routed(minute, minute + timedelta(seconds=31), policy="unmatched")
    routed(minute, minute + timedelta(seconds=32), policy="failed", disposition="failed")

    result = trends(now=NOW, unrouted=0)

    hour = result.hour
    assert hour.span.start == datetime(2026, 1, 5, 11, 31, tzinfo=UTC)
    assert hour.span.bucket_start(59) == datetime(2026, 1, 5, 12, 30, tzinfo=UTC)
    index = hour.span.starts.index(minute)
    # 3 at 12:25 plus the 3 Events behind the route records.
    assert hour.accepted[index] == 6
    assert hour.accepted[index - 1] == 1
    assert sum(hour.accepted) == 7
    assert (hour.routed[index], hour.unmatched[index], hour.dead_lettered[index]) == (1, 1, 1)
    assert sum(hour.routed) == sum(hour.unmatched) == sum(hour.dead_lettered) == 1
    assert sum(result.day.accepted) == 8
    assert result.day.per_minute([40]) == [2.0]


def test_day_buckets_roll_up_twenty_minutes():
    EventFactory(accepted_at=datetime(2026, 1, 5, 9, 0, tzinfo=UTC))
    EventFactory(accepted_at=datetime(2026, 1, 5, 9, 19, 59, tzinfo=UTC))
    EventFactory(accepted_at=datetime(2026, 1, 5, 9, 20, tzinfo=UTC))
    EventFactory(accepted_at=NOW - timedelta(days=1, minutes=1))  # older than the day

    day = trends(now=NOW, unrouted=0).day

    assert day.span.end == datetime(2026, 1, 5, 12, 40, tzinfo=UTC)
    index = day.span.starts.index(datetime(2026, 1, 5, 9, 0, tzinfo=UTC))
    assert day.accepted[index] == 2
    assert day.accepted[index + 1] == 1
    assert sum(day.accepted) == 3


def test_route_latency_p50_and_p99_per_bucket_are_nearest_ranks():
    minute = datetime(2026, 1, 5, 12, 10, tzinfo=UTC)
    # 100 Events decided in one minute with latencies of 1..100 seconds.
    for latency in range(1, 101):
        decided = minute + timedelta(seconds=latency % 60)
        routed(decided - timedelta(seconds=latency), decided)
    other = datetime(2026, 1, 5, 12, 20, 5, tzinfo=UTC)
    routed(other - timedelta(milliseconds=250), other)
    # Skipped and dead-lettered Events have no route latency.
    routed(other - timedelta(hours=1), other, disposition="skipped", policy="skipped")

    hour = trends(now=NOW, unrouted=0).hour

    index = hour.span.starts.index(minute)
    assert hour.latency_p50[index] == pytest.approx(50, abs=0.01)
    assert hour.latency_p99[index] == pytest.approx(99, abs=0.01)
    later = hour.span.starts.index(datetime(2026, 1, 5, 12, 20, tzinfo=UTC))
    assert hour.latency_p50[later] == pytest.approx(0.25, abs=0.001)
    assert hour.latency_p99[later] == pytest.approx(0.25, abs=0.001)
    assert hour.latency_p50[index + 1] is None


def test_backlog_ends_at_the_unrouted_count_and_walks_back_through_the_flows():
    minute = datetime(2026, 1, 5, 12, 27, tzinfo=UTC)
    EventFactory.create_batch(4, accepted_at=minute)  # still unrouted
    routed(minute, minute + timedelta(minutes=2))  # accepted 12:27, routed 12:29

    hour = trends(now=NOW, unrouted=4).hour

    index = hour.span.starts.index(minute)
    assert hour.backlog[-1] == 4
    assert hour.backlog[index + 2] == 4  # 12:29: the routed one settled
    assert hour.backlog[index + 1] == 5  # 12:28: five accepted, none settled
    assert hour.backlog[index] == 5
    assert hour.backlog[index - 1] == 0


def test_attempts_started_completed_and_failed_per_bucket():
    minute = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
    AttemptFactory(started_at=minute, ended_at=minute + timedelta(minutes=1), state="succeeded")
    AttemptFactory(started_at=minute, ended_at=minute + timedelta(minutes=1), state="failed")
    AttemptFactory(started_at=minute, ended_at=minute + timedelta(minutes=2), state="lost")
    AttemptFactory(started_at=minute + timedelta(seconds=5), state="running")

    hour = trends(now=NOW, unrouted=0).hour

    index = hour.span.starts.index(minute)
    assert hour.attempts_started[index] == 4
    assert (hour.attempts_completed[index + 1], hour.attempts_failed[index + 1]) == (1, 1)
    assert hour.attempts_failed[index + 2] == 1
    assert sum(hour.attempts_completed) == 1


def test_trends_read_five_queries_with_or_without_settled_buckets_cached(django_assert_num_queries):
    EventFactory.create_batch(30, accepted_at=NOW - timedelta(minutes=5))
    # The three counting queries and one latency ranking a span; again with the settled
    # buckets cached (the open ones are counted and ranked on every page).
    with django_assert_num_queries(5):
        trends(now=NOW, unrouted=0)
    with django_assert_num_queries(5):
        trends(now=NOW, unrouted=0)


def test_settled_buckets_keep_their_figures_and_recent_ones_are_counted_again():
    old = datetime(2026, 1, 5, 12, 10, tzinfo=UTC)  # closed 19 minutes before NOW: settled
    recent = datetime(2026, 1, 5, 12, 28, tzinfo=UTC)  # closed 1 minute 20 before NOW: not yet
    routed(old - timedelta(seconds=4), old)
    routed(recent - timedelta(seconds=6), recent)
    first = trends(now=NOW, unrouted=0).hour
    index_old, index_recent = first.span.starts.index(old), first.span.starts.index(recent)
    assert first.latency_p50[index_old] == pytest.approx(4, abs=0.001)
    # A route decision landing later in a settled bucket (it cannot, once settled) would not
    # move the cached figure; one in a recent bucket does.
    routed(old - timedelta(seconds=40), old + timedelta(seconds=1))
    routed(recent - timedelta(seconds=60), recent + timedelta(seconds=1))
    second = trends(now=NOW, unrouted=0).hour
    assert second.latency_p50[index_old] == pytest.approx(4, abs=0.001)
    assert second.latency_p99[index_recent] == pytest.approx(61, abs=0.001)
    # Counts alike: the settled bucket keeps its count, the recent one counts again.
    assert (second.routed[index_old], second.routed[index_recent]) == (1, 2)


def test_latency_ranking_is_bounded_newest_first_and_completes_over_pages(monkeypatch):
    from conduit_site.console import trends as trends_module

    # Three settled minutes with 3, 2 and 2 routed Events, newest last.
    for minute, latencies in ((10, (1, 2, 3)), (11, (4, 5)), (12, (6, 7))):
        decided = datetime(2026, 1, 5, 12, minute, 30, tzinfo=UTC)
        for latency in latencies:
            routed(decided - timedelta(seconds=latency), decided)
    monkeypatch.setattr(trends_module, "RANK_BUDGET", 4)
    hour = trends(now=NOW, unrouted=0).hour
    index = hour.span.starts.index(datetime(2026, 1, 5, 12, 10, tzinfo=UTC))
    # The newest two fit the budget; 12:10 (and the older, empty minutes) wait for later.
    assert hour.latency_p50[index + 2] == pytest.approx(6, abs=0.001)
    assert hour.latency_p50[index + 1] == pytest.approx(4, abs=0.001)
    assert hour.latency_p50[index] is None
    assert hour.latency_pending == index + 1
    # The next page ranks what is left: the ranked buckets come from the cache.
    hour = trends(now=NOW, unrouted=0).hour
    assert hour.latency_p50[index] == pytest.approx(2, abs=0.001)
    assert hour.latency_p99[index] == pytest.approx(3, abs=0.001)
    assert hour.latency_pending == 0
