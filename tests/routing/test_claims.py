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
