"""Retention deletes exactly the old terminal Work and the routed Events nothing
keeps, in batches, on both databases; a routing history checked after a prune stays clean."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command

from causal.clock import system_clock
from causal.limits import PINS_NAMESPACE
from causal.models import KV, Event, EventKey
from conduit_site.retention import site_prune
from routing.acceptance.services import events_accept
from routing.models import RateLimitTake, RouteRecord
from tests.causal.factories import EventFactory, KVFactory
from tests.routing.factories import RateLimitTakeFactory, RouteRecordFactory
from tests.routing.history import history_payloads, history_violations
from tests.routing.routerkit import MATCH_ONLY, apply, drain_loop
from tests.worklife.factories import (
    T0,
    AttemptFactory,
    CorrelationKeyFactory,
    DependencySubscriptionFactory,
    IntentFactory,
    TimerFactory,
    WaitFactory,
    WorkFactory,
    WorkInputFactory,
)
from worklife.models import Attempt, CorrelationKey, Intent, Timer, Wait, Work, WorkInput

pytestmark = pytest.mark.django_db

OLD = T0
NOW = T0 + timedelta(days=40)
YOUNG = NOW - timedelta(days=5)


def routed(at=OLD, **kwargs) -> Event:
    return EventFactory(route_state="routed", accepted_at=at, **kwargs)


@pytest.fixture
def rows():
    """Old and young, live and terminal Work, dead letters, and chains of Events."""
    r = {}
    # Old completed Work with everything it can own: all of it goes.
    r["done"] = done = WorkFactory(status="completed", ended_at=OLD, trigger=routed())
    attempt = AttemptFactory(work=done, state="succeeded", trigger=done.trigger)
    r["done_input"] = WorkInputFactory(work=done, event=routed(), attempt=attempt, state="consumed")
    IntentFactory(attempt=attempt, event=routed())
    wait = WaitFactory(work=done, attempt=attempt, state="woken", woken_by=routed())
    DependencySubscriptionFactory(wait=wait, active=False)
    TimerFactory(work=done, state="fired", parent=done.trigger, fired_event=routed())
    CorrelationKeyFactory(work=done, attached_by=done.trigger)
    RouteRecordFactory(event=done.trigger, work=done, policy="start")
    RouteRecordFactory(event=r["done_input"].event, work=done)
    # An old cancelled parent and its old completed child: both go (the child first).
    r["parent"] = parent = WorkFactory(status="cancelled", ended_at=OLD)
    r["child"] = WorkFactory(status="completed", ended_at=OLD, parent=parent)
    # Young terminal Work keeps its old input; live Work keeps its old trigger and input.
    r["young"] = young = WorkFactory(status="completed", ended_at=YOUNG)
    r["young_input"] = WorkInputFactory(work=young, event=routed(), state="consumed")
    r["live"] = live = WorkFactory(status="ready", trigger=routed())
    r["live_input"] = WorkInputFactory(work=live, event=routed())
    # A live Work's dropped Event: its route record names the Work, which keeps it.
    r["live_dropped"] = RouteRecordFactory(event=routed(), work=live, policy="drop").event
    # Dead letters and an unrouted Event, all old: kept.
    r["failed"] = RouteRecordFactory(
        event=EventFactory(route_state="failed", accepted_at=OLD), disposition="failed", policy="failed"
    ).event
    r["skipped"] = EventFactory(route_state="skipped", accepted_at=OLD)
    r["unrouted"] = EventFactory(accepted_at=OLD)
    # An old root whose young child is kept: the root and its pin are kept.
    r["kept_root"] = kept_root = RouteRecordFactory(event=routed()).event
    r["young_child"] = routed(at=YOUNG, parent=kept_root, root=kept_root, depth=1)
    KVFactory(namespace=PINS_NAMESPACE, key=str(kept_root.seq), updated_at=OLD)
    # An old chain nothing keeps: root, child and grandchild go, with the root's pin and keys.
    r["old_root"] = old_root = RouteRecordFactory(event=routed()).event
    r["old_child"] = old_child = routed(parent=old_root, root=old_root, depth=1, correlation=["k:chain"])
    routed(parent=old_child, root=old_root, depth=2)
    KVFactory(namespace=PINS_NAMESPACE, key=str(old_root.seq), updated_at=OLD)
    # Routed Events with no Work: the old one goes, the young one stays.
    r["unmatched"] = RouteRecordFactory(event=routed(), policy="unmatched").event
    r["young_unmatched"] = RouteRecordFactory(event=routed(at=YOUNG), policy="unmatched").event
    # What a rate limit counted goes with its Event.
    RateLimitTakeFactory(event=r["unmatched"])
    RateLimitTakeFactory(event=r["young_unmatched"])
    return r


def kept_events(r) -> set[int]:
    return {
        r["young_input"].event_id,
        r["live"].trigger_id,
        r["live_input"].event_id,
        r["live_dropped"].seq,
        r["failed"].seq,
        r["skipped"].seq,
        r["unrouted"].seq,
        r["kept_root"].seq,
        r["young_child"].seq,
        r["young_unmatched"].seq,
    }


def test_prune_deletes_exactly_old_terminal_work_and_the_events_nothing_keeps(rows):
    counts = site_prune(clock=lambda: NOW, days=30, batch=1)

    assert set(Work.objects.values_list("pk", flat=True)) == {rows["young"].pk, rows["live"].pk}
    assert set(Event.objects.values_list("seq", flat=True)) == kept_events(rows)
    for model in (Attempt, Intent, Wait, Timer, CorrelationKey):
        assert not model.objects.exists(), model
    assert set(WorkInput.objects.values_list("pk", flat=True)) == {
        rows["young_input"].pk,
        rows["live_input"].pk,
    }
    assert set(RouteRecord.objects.values_list("event_id", flat=True)) == {
        rows["live_dropped"].seq,
        rows["failed"].seq,
        rows["kept_root"].seq,
        rows["young_unmatched"].seq,
    }
    assert list(KV.objects.filter(namespace=PINS_NAMESPACE).values_list("key", flat=True)) == [
        str(rows["kept_root"].seq)
    ]
    assert not EventKey.objects.filter(key="k:chain").exists()
    assert list(RateLimitTake.objects.values_list("event_seq", flat=True)) == [rows["young_unmatched"].seq]
    assert counts.rows["work"] == 3
    assert counts.rows["events"] == 9
    assert counts.rows["route_records"] == 4
    assert counts.conflicts == 0


def test_prune_deletes_impact_previews_last_written_before_the_cutoff():
    from routing.models import ImpactRun, ImpactRunChange
    from tests.routing.factories import ImpactRunChangeFactory, ImpactRunFactory

    old = ImpactRunFactory(updated_at=OLD, finished_at=OLD)
    ImpactRunChangeFactory.create_batch(3, run=old)
    ImpactRunFactory(status="running", updated_at=OLD, finished_at=None)  # lost with its process
    young = ImpactRunFactory(started_at=OLD, updated_at=YOUNG, finished_at=YOUNG)
    ImpactRunChangeFactory(run=young)

    counts = site_prune(clock=lambda: NOW, days=30, batch=1)

    assert list(ImpactRun.objects.values_list("pk", flat=True)) == [young.pk]
    assert list(ImpactRunChange.objects.values_list("run_id", flat=True)) == [young.pk]
    assert (counts.rows["impact_runs"], counts.rows["impact_changes"]) == (2, 3)
    assert "2 impact previews" in counts.line()


def test_dry_run_counts_the_same_and_deletes_nothing(rows):
    works, events = Work.objects.count(), Event.objects.count()
    dry = site_prune(clock=lambda: NOW, days=30, dry_run=True)
    assert (Work.objects.count(), Event.objects.count()) == (works, events)
    real = site_prune(clock=lambda: NOW, days=30)
    assert dry.rows == real.rows
    assert dry.line().startswith("would delete") and real.line().startswith("deleted")


def test_zero_days_keeps_everything(rows, settings):
    settings.CONDUIT_RETENTION_DAYS = 0
    works, events = Work.objects.count(), Event.objects.count()
    assert site_prune(clock=lambda: NOW).cutoff is None
    assert (Work.objects.count(), Event.objects.count()) == (works, events)


def test_prune_command_prints_counts_and_dry_run_deletes_nothing(rows, settings):
    settings.CONDUIT_RETENTION_DAYS = 1
    out = StringIO()
    call_command("prune", "--dry-run", stdout=out)
    assert "would delete" in out.getvalue() and "4 work" in out.getvalue()
    assert Work.objects.filter(pk=rows["done"].pk).exists()
    out = StringIO()
    call_command("prune", stdout=out)
    assert out.getvalue().startswith("deleted") and "4 work" in out.getvalue()
    assert not Work.objects.filter(pk=rows["done"].pk).exists()


def test_prune_with_days_0_says_the_option_keeps_everything_not_the_environment(rows, settings):
    settings.CONDUIT_RETENTION_DAYS = 1
    works = Work.objects.count()
    out = StringIO()
    call_command("prune", "--days", "0", stdout=out)
    assert out.getvalue() == "--days 0 keeps everything: nothing pruned\n"
    assert "CONDUIT_RETENTION_DAYS" not in out.getvalue() and Work.objects.count() == works
    settings.CONDUIT_RETENTION_DAYS = 0
    out = StringIO()
    call_command("prune", stdout=out)
    assert "CONDUIT_RETENTION_DAYS=0" in out.getvalue()


def test_the_work_loop_prunes_on_its_first_pass(rows, settings):
    settings.CONDUIT_RETENTION_DAYS = 1
    call_command("work_loop", "--once", stdout=StringIO())
    assert not Work.objects.filter(pk=rows["done"].pk).exists()
    assert Work.objects.filter(pk=rows["live"].pk).exists()


@pytest.mark.django_db(transaction=True)
def test_a_routing_history_stays_clean_after_prune():
    """Route a history (its Work stays live: nothing runs it), prune as if 31 days had passed:
    every keyed Event is a live Work's trigger or input and stays, every targetless one goes, and
    the history checker finds nothing lost, duplicated or out of order in what is left."""
    apply(system_clock, MATCH_ONLY)
    payloads = history_payloads(300, cold_keys=40, seed=3)
    events_accept(payloads=payloads, clock=system_clock, may_address_work=True)
    drain_loop()
    keyed = [p for p in payloads if p["type"] == "c.msg"]
    assert history_violations(payloads) == []

    counts = site_prune(clock=lambda: system_clock() + timedelta(days=31), days=30, batch=50)

    assert counts.rows["events"] == len(payloads) - len(keyed)
    assert counts.rows["work"] == 0
    assert history_violations(keyed) == []
