"""Claims take turns (R9): a claim is read and written in one turn that no
other claim shares, so two claims never scan side by side, each skipping the rows the other
has just locked (the interleaving that stalled several loops). On PostgreSQL the turn is the
claims' advisory lock (``CLAIM_LOCK_ID``); on SQLite it is the write transaction."""

from __future__ import annotations

import sqlite3
import threading
from datetime import timedelta

import psycopg
import pytest
from django.db import connection, connections

from causal.models import KV
from routing.engine.claims import CLAIM_LOCK_ID, TARGETS_NAMESPACE, publish_targets, published_targets
from routing.engine.loop import RouteLoop
from tests.routing.routerkit import SCRIPTED_ONLY, accept, apply, router
from tests.support import query_plan


@pytest.fixture(autouse=True)
def handlers(test_handlers):
    """Routes here use the test handlers (tests/conftest.py)."""


@pytest.mark.django_db(transaction=True)
def test_r9_a_claim_waits_for_the_claim_turn_another_process_holds(clock):
    apply(clock, SCRIPTED_ONLY)
    events = [accept(clock, "x", {"keys": [f"k{n}"]}) for n in range(3)]
    loop = router(clock)
    claimed: list[list[int]] = []

    def claim() -> None:
        try:
            claimed.append([e.seq for e in loop.claim_window(10)])
        finally:
            connections.close_all()

    holder = _hold_the_claim_turn()
    try:
        worker = threading.Thread(target=claim, daemon=True)
        worker.start()
        worker.join(0.5)
        # Nothing can be claimed while another process holds the turn.
        assert worker.is_alive() and claimed == []
    finally:
        holder()
    worker.join(30)
    loop.close()
    assert claimed == [[e.seq for e in events]]


def _hold_the_claim_turn():
    """Take the claims' turn from another connection, as another route loop's claim does;
    returns the function that gives it back."""
    settings = connection.settings_dict
    if connection.vendor == "postgresql":
        other = psycopg.connect(
            dbname=settings["NAME"],
            user=settings["USER"],
            password=settings["PASSWORD"] or None,
            host=settings["HOST"] or None,
            port=settings["PORT"] or None,
            autocommit=True,
        )
        other.execute("SELECT pg_advisory_lock(%s)", [CLAIM_LOCK_ID])
    else:
        other = sqlite3.connect(settings["NAME"], isolation_level=None)
        other.execute("BEGIN IMMEDIATE")

    def give_back() -> None:
        if connection.vendor == "postgresql":
            other.execute("SELECT pg_advisory_unlock(%s)", [CLAIM_LOCK_ID])
        else:
            other.execute("COMMIT")
        other.close()

    return give_back


@pytest.mark.django_db
def test_r9_a_claim_reads_the_backlog_in_acceptance_order_without_sorting_it(clock):
    """A claim reads the oldest unrouted Events from an index in acceptance order and stops at
    its window. On PostgreSQL the claim's transaction turns sorting off: with statistics that
    do not know the backlog (a table analyzed empty, then 20,000 Events accepted), the planner
    read every unrouted Event and sorted them all for each window (16 ms against 0.5 ms). The
    test does not analyze the table itself: statistics written by ``ANALYZE`` outlive the test's
    transaction and would shape the plans of every later test."""
    from causal.clock import system_clock
    from routing.acceptance.services import events_accept

    apply(clock, SCRIPTED_ONLY)
    payloads = [
        {
            "specversion": "1.0",
            "id": f"b{n}",
            "source": "tests",
            "type": "x",
            "scope": "acme",
            "data": {"n": n},
        }
        for n in range(600)
    ]
    events_accept(payloads=payloads, clock=system_clock, trusted=True)
    seen: dict[str, str] = {}

    def explain(execute, sql, params, many, context):
        if sql.lstrip().startswith("SELECT") and "LIMIT" in sql and not seen:
            # The first read of the claim with a LIMIT: its window.
            cursor = context["cursor"]
            if connection.vendor == "postgresql":
                cursor.execute("SELECT current_setting('enable_sort')")
                seen["enable_sort"] = cursor.fetchone()[0]
            seen["plan"] = query_plan(cursor, sql, params)
        return execute(sql, params, many, context)

    loop = router(clock)
    try:
        with connection.execute_wrapper(explain):
            window = loop.claim_window(100)
    finally:
        loop.close()
    assert [e.seq for e in window] == sorted(e.seq for e in window) and len(window) == 100
    assert seen.get("plan"), "the claim's read was not seen"
    # PostgreSQL names a sort "Sort"; SQLite "USE TEMP B-TREE FOR ORDER BY".
    assert "Sort" not in seen["plan"] and "TEMP B-TREE" not in seen["plan"], seen["plan"]
    if connection.vendor == "postgresql":
        assert seen["enable_sort"] == "off"
        with connection.cursor() as cursor:  # put back for the rest of the test's transaction
            cursor.execute("SELECT current_setting('enable_sort')")
            assert cursor.fetchone()[0] == "on"


@pytest.mark.django_db
def test_r9_a_claim_writes_its_events_on_their_own_pages_without_index_entries(clock):
    """A claim writes claimed_by and claimed_until on every Event of its window; no index reads
    them, so on PostgreSQL, with room left on each page (causal 0007: fillfactor), each new row
    version is heap-only: no entry in any of the table's indexes (a claim of 500 took 14 ms
    writing them, 3.5 ms without, and holds the claim lock while it writes)."""
    from causal.models import Event

    apply(clock, SCRIPTED_ONLY)
    events = [accept(clock, "x", {"keys": [f"k{n}"]}) for n in range(100)]

    def heap_only_updates() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_get_xact_tuples_hot_updated('causal_event'::regclass)")
            return cursor.fetchone()[0]

    postgresql = connection.vendor == "postgresql"
    before = heap_only_updates() if postgresql else 0
    loop = router(clock)
    try:
        window = loop.claim_window(100)
    finally:
        loop.close()
    assert [e.seq for e in window] == [e.seq for e in events]
    assert Event.objects.filter(claimed_by=loop.owner).count() == 100
    if postgresql:
        with connection.cursor() as cursor:
            cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'causal_event'")
            assert cursor.fetchone()[0] == ["fillfactor=50"]
        # Most of them: the test's one transaction keeps every version its acceptances wrote,
        # where committed acceptances leave theirs to be pruned (without the room: none).
        assert heap_only_updates() - before >= 80


@pytest.mark.django_db
def test_r9_a_window_of_consecutive_seqs_is_unbroken_without_a_read(clock):
    """A claimed window of consecutive seqs has no Event inside its span that
    it lacks, so it is one unbroken run without the read that looks for one; a window with a
    gap is still cut at the first undecided Event inside it (another loop may hold it)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from causal.models import Event
    from routing.engine.claims import unbroken
    from routing.engine.evaluate import snapshots_isolated

    apply(clock, SCRIPTED_ONLY)
    events = [accept(clock, "x", {"keys": [f"k{n}"]}) for n in range(6)]
    snapshots = snapshots_isolated(Event.objects.filter(seq__in=[e.seq for e in events]).order_by("seq"))
    with CaptureQueriesContext(connection) as queries:
        assert unbroken(snapshots, owner="loop-a", now=clock()) == snapshots
    assert len(queries) == 0
    gapped = [s for s in snapshots if s.seq != events[2].seq]
    assert [s.seq for s in unbroken(gapped, owner="loop-a", now=clock())] == [e.seq for e in events[:2]]


@pytest.mark.django_db
def test_r9_published_targets_are_known_for_their_claim_only_and_stale_ones_go(clock):
    """What a loop publishes is read for the Events it holds under the claims it names (not
    for a later claim of the same loop), and a publication not replaced for an hour (a loop
    that ended without withdrawing it) is forgotten when a route loop starts."""
    now = clock()
    until = now + timedelta(seconds=60)
    decided = {7: (["k1"], None), 8: ([], 42), 11: ([], None, "rate_limit:acme:chat:ann")}
    publish_targets(owner="loop-a", untils=[until], decided=decided, clock=clock)
    held = [
        (7, "loop-a", until),
        (8, "loop-a", until),
        (9, "loop-a", until),
        (10, "loop-a", until + timedelta(1)),
        (11, "loop-a", until),
    ]
    assert published_targets(held) == {
        7: (["k1"], None, ""),
        8: ([], 42, ""),
        9: ([], None, ""),
        11: ([], None, "rate_limit:acme:chat:ann"),
    }
    assert published_targets([(7, "loop-b", until)]) == {}
    clock.advance(3601)
    publish_targets(owner="loop-b", untils=[until], decided={}, clock=clock)
    RouteLoop(clock=clock).close()
    assert set(KV.objects.filter(namespace=TARGETS_NAMESPACE).values_list("key", flat=True)) == {"loop-b"}


@pytest.mark.django_db
def test_a_claim_after_a_seq_takes_only_later_events(clock):
    """The window a pass claims ahead of its commit starts after the window it commits."""
    apply(clock, SCRIPTED_ONLY)
    events = [accept(clock, "x", {"keys": [f"k{n}"]}) for n in range(5)]
    loop = router(clock)
    try:
        window = loop.claim_window(2, after=events[1].seq)
    finally:
        loop.close()
    assert [e.seq for e in window] == [e.seq for e in events[2:4]]
