"""A route loop's claims and heartbeats are leases, committed without
waiting for the disk (``infra.leases``), while every other commit stays durable."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from causal.clock import system_clock
from causal.models import KV
from causal.services import kv_put_in_tx, kv_replace
from infra.leases import lease_transaction


def synchronous_level() -> str:
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("PRAGMA synchronous")
            return {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[cursor.fetchone()[0]]
        cursor.execute("SHOW synchronous_commit")
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_a_lease_commits_without_waiting_for_the_disk_and_later_commits_are_durable_again():
    durable = synchronous_level()
    assert durable in {"FULL", "on"}
    with lease_transaction():
        inside = synchronous_level()
        kv_put_in_tx(namespace="test", key="lease", value={"n": 1}, clock=system_clock)
    assert inside == ("NORMAL" if connection.vendor == "sqlite" else "off")
    assert KV.objects.filter(namespace="test", key="lease").first().value == {"n": 1}
    assert synchronous_level() == durable
    with transaction.atomic():
        assert synchronous_level() == durable


@pytest.mark.django_db(transaction=True)
def test_a_lease_that_fails_rolls_back_and_leaves_commits_durable():
    durable = synchronous_level()
    with pytest.raises(RuntimeError), lease_transaction():
        kv_put_in_tx(namespace="test", key="lease", value={"n": 2}, clock=system_clock)
        raise RuntimeError("the claim's query failed")
    assert KV.objects.filter(namespace="test", key="lease").first() is None
    assert synchronous_level() == durable


@pytest.mark.django_db(transaction=True)
def test_a_lease_inside_a_transaction_is_part_of_it_and_as_durable():
    durable = synchronous_level()
    with transaction.atomic():
        with lease_transaction():
            assert synchronous_level() == durable
            kv_put_in_tx(namespace="test", key="lease", value={"n": 3}, clock=system_clock)
        transaction.set_rollback(True)
    assert KV.objects.filter(namespace="test", key="lease").first() is None


@pytest.mark.django_db(transaction=True)
def test_a_route_loops_claim_is_a_lease():
    from django.test.utils import CaptureQueriesContext

    from routing.engine.claims import claim_window
    from tests.causal.factories import EventFactory

    event = EventFactory()
    with CaptureQueriesContext(connection) as captured:
        window = claim_window(owner="loop-a", now=system_clock(), limit=10, claim_seconds=30)
    assert [e.seq for e in window] == [event.seq]
    statements = [query["sql"] for query in captured.captured_queries]
    lease = (
        "PRAGMA synchronous=NORMAL" if connection.vendor == "sqlite" else "SET LOCAL synchronous_commit = off"
    )
    claim = next(i for i, sql in enumerate(statements) if sql.startswith('UPDATE "causal_event"'))
    assert lease in statements[:claim], statements
    event.refresh_from_db()
    assert event.claimed_by == "loop-a"
    assert synchronous_level() in {"FULL", "on"}


@pytest.mark.django_db(transaction=True)
def test_kv_replace_creates_then_replaces_a_value_in_one_statement(clock):
    """A heartbeat's or a published window's KV entry is written by one upsert: created at
    version 1, then replaced with its version bumped and its time moved; other keys untouched."""
    with transaction.atomic():
        kv_put_in_tx(namespace="test", key="other", value={"n": 0}, clock=clock)
    with CaptureQueriesContext(connection) as first:
        kv_replace(namespace="test", key="beat", value={"n": 1, "text": 'it\'s "quoted"'}, clock=clock)
    created = KV.objects.filter(namespace="test", key="beat").first()
    assert (created.value, created.version, created.updated_at) == (
        {"n": 1, "text": 'it\'s "quoted"'},
        1,
        clock(),
    )
    clock.advance(5)
    with CaptureQueriesContext(connection) as second:
        kv_replace(namespace="test", key="beat", value=[1, None, "x"], clock=clock)
    replaced = KV.objects.filter(namespace="test", key="beat").first()
    assert (replaced.value, replaced.version, replaced.updated_at) == ([1, None, "x"], 2, clock())
    assert len(first.captured_queries) == len(second.captured_queries) == 1
    assert (
        KV.objects.filter(namespace="test", key="other").first().value,
        KV.objects.filter(namespace="test", key="other").first().version,
    ) == ({"n": 0}, 1)
