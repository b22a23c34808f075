"""Claims take turns (R9, issue 12 item 3): a claim is read and written in one turn that no
other claim shares, so two claims never scan side by side, each skipping the rows the other
has just locked (the interleaving that stalled several loops). On PostgreSQL the turn is the
claims' advisory lock (``CLAIM_LOCK_ID``); on SQLite it is the write transaction."""

from __future__ import annotations

import sqlite3
import threading

import psycopg
import pytest
from django.db import connection, connections

from routing.engine.claims import CLAIM_LOCK_ID
from tests.routing.routerkit import SCRIPTED_ONLY, accept, apply, router


@pytest.fixture(autouse=True)
def handlers(test_handlers):
    """Routes here use the test handlers (tests/conftest.py)."""


@pytest.mark.django_db(transaction=True)
def test_r9_issue12_item3_a_claim_waits_for_the_claim_turn_another_process_holds(clock):
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
def test_r9_issue12_item3_a_claim_reads_the_backlog_in_acceptance_order_without_sorting_it(clock):
    """A claim reads the oldest unrouted Events from an index in acceptance order and stops at
    its window, whatever the statistics say. After a bulk acceptance of 20,000 Events into a
    table last analyzed empty, PostgreSQL's planner read every unrouted Event and sorted them
    all for each window (fails without the claim's ``enable_sort`` off)."""
    from causal.clock import system_clock
    from routing.services import events_accept

    apply(clock, SCRIPTED_ONLY)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE causal_event")  # the statistics of an empty table
    payloads = [
        {
            "specversion": "1.0",
            "id": f"b{n}",
            "source": "tests",
            "type": "x",
            "scope": "acme",
            "data": {"n": n},
        }
        for n in range(20000)
    ]
    events_accept(payloads=payloads, clock=system_clock, trusted=True)
    plans: list[str] = []

    def explain(execute, sql, params, many, context):
        if sql.lstrip().startswith("SELECT") and "LIMIT" in sql and not plans:
            plans.append("")  # the first LIMITed read of the claim: its window
            cursor = context["cursor"]
            if connection.vendor == "postgresql":
                cursor.execute("EXPLAIN " + sql, params)
            else:
                cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
            plans[0] = "\n".join(str(row[-1]) for row in cursor.fetchall())
        return execute(sql, params, many, context)

    loop = router(clock)
    try:
        with connection.execute_wrapper(explain):
            window = loop.claim_window(100)
    finally:
        loop.close()
    assert [e.seq for e in window] == sorted(e.seq for e in window) and len(window) == 100
    assert plans and plans[0], "the claim's read was not seen"
    # PostgreSQL names a sort "Sort"; SQLite "USE TEMP B-TREE FOR ORDER BY".
    assert "Sort" not in plans[0] and "TEMP B-TREE" not in plans[0], plans[0]
