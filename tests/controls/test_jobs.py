"""Bulk jobs: retry or cancel many Work and replay many Events in batches with stored
progress, each target with its own control Event and outcome, set-based (a batch costs the same
statements for 10 targets as for 100), cancellable, and the count check on every path."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from causal.models import Event, RouteState
from controls.bulk import BulkCountChanged
from controls.jobs import (
    bulk_job_cancel,
    bulk_job_items,
    bulk_job_run,
    bulk_job_step,
    events_replay_job,
    work_bulk_job,
)
from controls.models import BulkJob, ItemOutcome, JobState
from controls.replay import ReplayInvalid
from controls.work import WorkControl, WorkControlInvalid
from routing.models import RouteRecord
from tests.causal.factories import EventFactory
from tests.controls.controlkit import control_events, parked_work, stored
from tests.routing.factories import RouteRecordFactory
from tests.routing.routerkit import apply
from tests.worklife.factories import AttemptFactory, WaitFactory, WorkFactory, WorkInputFactory
from worklife.models import Attempt, AttemptState, Wait, Work, WorkInput, WorkStatus
from worklife.selectors import WorkFilter

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def handlers(test_handlers):
    """Routing with the test handlers registered."""


def settled_events(n: int) -> list[Event]:
    """``n`` routed Events, each with its route record (unmatched)."""
    return [RouteRecordFactory(policy="unmatched", route="").event for _ in range(n)]


def batch_statements(job: BulkJob, clock, batch_size: int) -> int:
    with CaptureQueriesContext(connection) as captured:
        bulk_job_step(clock=clock, job_id=job.pk, batch_size=batch_size)
    return len(captured.captured_queries)


def test_a_retry_job_retries_each_parked_work_with_its_own_control_event_and_records_each_refusal(clock):
    apply(clock)
    parked = [parked_work(clock) for _ in range(5)]
    running = WorkFactory(scope="acme", binding="triage", status="running")
    ids = [w.pk for w in parked] + [running.pk, 999_999]
    job = work_bulk_job(action=WorkControl.RETRY, ids=ids, count=7, user="ops", clock=clock)
    assert (job.state, job.total, job.position) == (JobState.PENDING, 7, 0)
    assert not control_events("retry_work")  # storing the job acts on nothing

    job = bulk_job_step(clock=clock, job_id=job.pk, batch_size=3)
    assert (job.state, job.position, job.succeeded) == (JobState.RUNNING, 3, 3)
    job = bulk_job_run(job_id=job.pk, clock=clock, batch_size=3)

    assert (job.state, job.position, job.succeeded, job.refused) == (JobState.DONE, 7, 5, 2)
    for work in Work.objects.filter(pk__in=[w.pk for w in parked]):
        assert (work.parked_at, work.failures, work.pending_run) == (None, 0, True)
    controls = control_events("retry_work")
    assert sorted(e.data["work"] for e in controls) == [w.pk for w in parked]
    assert {e.data["job"] for e in controls} == {job.pk}
    assert {r.work_id for r in RouteRecord.objects.filter(event__in=controls)} == {w.pk for w in parked}
    assert all(e.route_state == RouteState.ROUTED for e in controls)
    outcomes = {i.target: i for i in bulk_job_items(job)}
    assert outcomes[running.pk].outcome == ItemOutcome.REFUSED
    assert "neither parked nor backing off" in outcomes[running.pk].message
    assert outcomes[999_999].outcome == ItemOutcome.NOT_FOUND
    assert outcomes[parked[0].pk].control_seq in {e.seq for e in controls}
    assert bulk_job_step(clock=clock, job_id=job.pk) is None  # finished: nothing more to run


def test_a_cancel_job_ends_each_live_work_with_its_attempts_waits_and_queue(clock):
    apply(clock)
    live = [WorkFactory(scope="acme", binding="triage", status="running") for _ in range(3)]
    attempt = AttemptFactory(work=live[0], number=1, state=AttemptState.RUNNING)
    WaitFactory(work=live[1], attempt=AttemptFactory(work=live[1], number=1, state=AttemptState.WAITING))
    WorkInputFactory(work=live[2])
    done = WorkFactory(scope="acme", status=WorkStatus.COMPLETED)
    job = work_bulk_job(
        action=WorkControl.CANCEL,
        filters=WorkFilter(scope="acme"),
        count=4,
        user="ops",
        clock=clock,
        reason="wrong deploy",
    )
    job = bulk_job_run(job_id=job.pk, clock=clock)
    assert (job.succeeded, job.refused) == (3, 1)
    assert set(Work.objects.filter(pk__in=[w.pk for w in live]).values_list("status", flat=True)) == {
        "cancelled"
    }
    assert Attempt.objects.get(pk=attempt.pk).state == AttemptState.CANCELLED
    assert not Wait.objects.filter(work=live[1], state="active").exists()
    assert not WorkInput.objects.filter(work=live[2], state="pending").exists()
    assert {e.data["reason"] for e in control_events("cancel_work")} == {"wrong deploy"}
    assert bulk_job_items(job, refused_only=True)[0].target == done.pk


def test_a_work_batch_costs_the_same_statements_for_ten_work_as_for_a_hundred(
    clock, django_assert_max_num_queries
):
    apply(clock)
    few = [parked_work(clock).pk for _ in range(10)]
    many = [parked_work(clock).pk for _ in range(100)]
    small = work_bulk_job(action=WorkControl.RETRY, ids=few, count=10, user="ops", clock=clock)
    large = work_bulk_job(action=WorkControl.RETRY, ids=many, count=100, user="ops", clock=clock)
    ten = batch_statements(small, clock, 10)
    with django_assert_max_num_queries(ten):
        bulk_job_step(clock=clock, job_id=large.pk, batch_size=100)
    assert BulkJob.objects.get(pk=large.pk).succeeded == 100
    assert ten <= 20, ten  # about 0.2 statements per Work at a batch of a hundred


def test_a_cancel_batch_costs_the_same_statements_for_ten_work_as_for_a_hundred(
    clock, django_assert_max_num_queries
):
    apply(clock)
    few = [WorkFactory(scope="acme").pk for _ in range(10)]
    many = [WorkFactory(scope="acme").pk for _ in range(100)]
    small = work_bulk_job(action=WorkControl.CANCEL, ids=few, count=10, user="ops", clock=clock)
    large = work_bulk_job(action=WorkControl.CANCEL, ids=many, count=100, user="ops", clock=clock)
    ten = batch_statements(small, clock, 10)
    with django_assert_max_num_queries(ten):
        bulk_job_step(clock=clock, job_id=large.pk, batch_size=100)
    assert BulkJob.objects.get(pk=large.pk).succeeded == 100


def test_a_replay_job_copies_each_settled_event_under_its_next_number(clock):
    apply(clock)
    events = settled_events(3)
    unrouted = EventFactory(route_state=RouteState.UNROUTED)
    first = events_replay_job(seqs=[e.seq for e in events], count=3, user="ops", clock=clock)
    bulk_job_run(job_id=first.pk, clock=clock)
    job = events_replay_job(seqs=[e.seq for e in events] + [unrouted.seq], count=4, user="ops", clock=clock)
    job = bulk_job_run(job_id=job.pk, clock=clock)

    assert (job.succeeded, job.refused) == (3, 1)
    items = {i.target: i for i in bulk_job_items(job)}
    for event in events:
        copy = Event.objects.get(seq=items[event.seq].copy_seq)
        assert copy.envelope_id == f"replay/{event.envelope_id}/2"
        assert (copy.source, copy.type, copy.data, copy.route_state) == (
            event.source,
            event.type,
            event.data,
            RouteState.UNROUTED,
        )
    assert "not routed yet" in items[unrouted.seq].message
    assert len(control_events("replay_event")) == 6


def test_a_replay_batch_costs_the_same_statements_for_ten_events_as_for_a_hundred(
    clock, django_assert_max_num_queries
):
    apply(clock)
    few = [e.seq for e in settled_events(10)]
    many = [e.seq for e in settled_events(100)]
    small = events_replay_job(seqs=few, count=10, user="ops", clock=clock)
    large = events_replay_job(seqs=many, count=100, user="ops", clock=clock)
    ten = batch_statements(small, clock, 10)
    with django_assert_max_num_queries(ten):
        bulk_job_step(clock=clock, job_id=large.pk, batch_size=100)
    assert BulkJob.objects.get(pk=large.pk).succeeded == 100


def test_a_cancelled_job_acts_on_none_of_the_work_left(clock):
    apply(clock)
    parked = [parked_work(clock) for _ in range(4)]
    job = work_bulk_job(
        action=WorkControl.RETRY, ids=[w.pk for w in parked], count=4, user="ops", clock=clock
    )
    bulk_job_step(clock=clock, job_id=job.pk, batch_size=2)
    job = bulk_job_cancel(job_id=job.pk, user="boss", clock=clock)
    assert (job.state, job.cancelled_by, job.position) == (JobState.CANCELLED, "boss", 2)
    assert bulk_job_step(clock=clock, job_id=job.pk) is None
    assert Work.objects.filter(pk__in=[w.pk for w in parked], parked_at__isnull=False).count() == 2
    assert [i.outcome for i in bulk_job_items(job)] == ["done", "done"]  # the other two: none


def test_the_oldest_unfinished_job_runs_first_when_none_is_named(clock):
    apply(clock)
    a = work_bulk_job(action=WorkControl.RETRY, ids=[parked_work(clock).pk], count=1, user="ops", clock=clock)
    b = work_bulk_job(action=WorkControl.RETRY, ids=[parked_work(clock).pk], count=1, user="ops", clock=clock)
    assert bulk_job_step(clock=clock).pk == a.pk
    assert bulk_job_step(clock=clock).pk == b.pk
    assert bulk_job_step(clock=clock) is None


@pytest.mark.parametrize("count", [None, "2", -1, True])
def test_a_work_job_needs_the_confirmed_count_by_ids_and_by_filter(clock, count):
    apply(clock)
    parked = [parked_work(clock).pk for _ in range(2)]
    before = stored()
    with pytest.raises(WorkControlInvalid) as invalid:
        work_bulk_job(action=WorkControl.RETRY, ids=parked, count=count, user="ops", clock=clock)
    assert invalid.value.field == "count"
    with pytest.raises(WorkControlInvalid):
        work_bulk_job(
            action=WorkControl.RETRY, filters=WorkFilter(status="parked"), count=count, user="o", clock=clock
        )
    assert stored() == before and not BulkJob.objects.exists()


def test_a_job_whose_filter_matches_another_number_than_confirmed_is_not_stored(clock):
    apply(clock)
    for _ in range(3):
        parked_work(clock)
    with pytest.raises(BulkCountChanged) as changed:
        work_bulk_job(
            action=WorkControl.RETRY, filters=WorkFilter(status="parked"), count=2, user="o", clock=clock
        )
    assert (changed.value.confirmed, changed.value.count) == (2, 3)
    with pytest.raises(BulkCountChanged):
        events_replay_job(seqs=[e.seq for e in settled_events(2)], count=3, user="o", clock=clock)
    with pytest.raises(ReplayInvalid):
        events_replay_job(seqs=[1], count=None, user="o", clock=clock)
    assert not BulkJob.objects.exists()
