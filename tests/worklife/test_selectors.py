"""Reads of the Work engine's state: the one line saying why a Work is not
running, the Work a work_loop may claim, parked Work and the counts of the home page. The
states are written by the engine's own services (attempt_fail, a refused dispatch through the
real runner), so the line follows what they write."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction

from routing.engine.configurations import LiveConfigurations
from tests.causal.factories import EventFactory
from tests.routing.routerkit import apply
from tests.worklife.factories import (
    T0,
    AttemptFactory,
    CorrelationKeyFactory,
    WaitFactory,
    WorkFactory,
    WorkInputFactory,
)
from worklife.attempts import attempt_fail
from worklife.models import Work
from worklife.runner import WorkRunner
from worklife.scheduling import work_hold_in_tx
from worklife.selectors import (
    NotRunning,
    WorkFilter,
    work_counts,
    work_filtered,
    work_parked,
    work_runnable,
    work_why_not_running,
)

pytestmark = pytest.mark.django_db


def why(work: Work, clock):
    work.refresh_from_db()
    return work_why_not_running(work, now=clock())


def fail(work: Work, number: int, clock, error: str = "boom") -> None:
    """Start attempt ``number`` and fail it through the engine's service."""
    attempt = AttemptFactory(work=work, number=number, lease_epoch=number)
    attempt_fail(attempt_id=attempt.pk, lease_epoch=number, error=error, clock=clock)


def refuse(clock, work: Work) -> WorkRunner:
    """One pass of a real work_loop over the test configuration: it claims the Work, and its
    dispatch is refused."""
    runner = WorkRunner(clock=clock, configurations=LiveConfigurations(), slots=2, lease_seconds=30)
    runner.step()
    runner.shutdown(grace=0)
    return runner


# --- why a Work is not running ------------------------------------------------------------------


def test_terminal_running_and_waiting_work_say_so(clock):
    assert why(WorkFactory(status="completed"), clock).text == "completed"
    assert why(WorkFactory(status="cancelled"), clock).reason == NotRunning.CANCELLED

    running = WorkFactory(status="running")
    AttemptFactory(work=running, number=1, state="failed")
    AttemptFactory(work=running, number=2)
    line = why(running, clock)
    assert (line.reason, line.text, line.attempt) == (NotRunning.RUNNING, "running attempt 2", 2)

    waiting = WorkFactory(status="waiting")
    attempt = AttemptFactory(work=waiting, number=1, state="waiting")
    WaitFactory(work=waiting, attempt=attempt, name="old", state="woken")
    wait = WaitFactory(work=waiting, attempt=attempt, name="approval", blocked_reason="rate_exceeded")
    line = why(waiting, clock)
    assert line.reason == NotRunning.WAITING and line.wait_id == wait.pk
    assert line.text == "waiting on wait approval (blocked: rate_exceeded)"


def test_work_with_nothing_to_run_has_no_input_or_is_held_by_an_unrouted_event(clock):
    work = WorkFactory()
    assert why(work, clock).reason == NotRunning.NO_INPUT
    assert why(work, clock).text == "no input: nothing is queued for it"

    # Consumed input is no input; an unrouted Event targeting a key it owns holds the next.
    WorkInputFactory(work=work, state="consumed")
    key = CorrelationKeyFactory(work=work, key="pr:acme/web#1")
    held = EventFactory(scope=work.scope, correlation=[key.key])
    EventFactory(scope=work.scope, correlation=[key.key])
    line = why(work, clock)
    assert (line.reason, line.event_seq) == (NotRunning.HELD, held.seq)
    assert line.text == f"held by unrouted #{held.seq}: its later input waits until that Event is routed"


def test_work_with_input_and_no_obstacle_waits_for_a_work_loop(clock):
    work = WorkFactory()
    WorkInputFactory(work=work)
    line = why(work, clock)
    assert line.reason == NotRunning.CLAIMABLE
    assert line.text == "ready to run: waiting for a work_loop to claim it"
    assert list(work_runnable(now=clock()).values_list("pk", flat=True)) == [work.pk]


def test_w5_failed_work_backs_off_then_is_ready_and_is_parked_after_the_bound(clock, settings):
    settings.CONDUIT_MAX_ATTEMPTS = 3
    work = WorkFactory(status="running")
    fail(work, 1, clock)
    fail(work, 2, clock, error="upstream 503\nTraceback ...")
    line = why(work, clock)
    assert line.reason == NotRunning.BACKING_OFF and line.until == clock() + timedelta(seconds=4)
    assert line.text == (
        "backing off until 2026-01-05 12:00:04 UTC after 2 failures: attempt 2 failed: upstream 503 Traceback ..."
    )
    assert not work_runnable(now=clock()).exists()

    clock.advance(seconds=4)
    line = why(work, clock)
    assert line.reason == NotRunning.CLAIMABLE
    assert line.text.startswith("ready to run (a retry after 2 failures: attempt 2 failed: upstream 503")
    assert work_runnable(now=clock()).exists()

    fail(work, 3, clock, error="still down")
    line = why(work, clock)
    assert line.reason == NotRunning.PARKED
    assert line.text == "parked after 3 failures (attempt 3 failed: still down)"
    assert not work_runnable(now=clock()).exists()
    assert list(work_parked()) == [work]


def test_a_queue_only_binding_is_named_from_a_real_refused_dispatch(clock, test_handlers):
    apply(clock)
    work = WorkFactory(scope="acme", binding="inbox")
    WorkInputFactory(work=work, binding="inbox")
    refuse(clock, work)
    line = why(work, clock)
    assert line.reason == NotRunning.QUEUE_ONLY
    assert line.text.startswith(
        "waiting for a binding that can run it: queue-only binding: binding 'inbox' is queue-only"
    )
    assert line.text.endswith("(checked again at 2026-01-05 12:05:00 UTC)")


def test_a_refused_dispatch_is_named_even_after_failures(clock, test_handlers):
    apply(clock)
    work = WorkFactory(scope="acme", binding="gone")
    WorkInputFactory(work=work, binding="gone")
    refuse(clock, work)
    line = why(work, clock)
    assert line.reason == NotRunning.DISPATCH_REFUSED
    assert line.text == (
        "waiting for a binding that can run it: dispatch refused: binding 'gone' is not in scope acme (generation 1) "
        "(checked again at 2026-01-05 12:00:30 UTC)"
    )

    # A Work that failed and then could not be dispatched says the latter.
    failed = WorkFactory(status="running")
    fail(failed, 1, clock)
    clock.advance(seconds=5)
    with transaction.atomic():
        work_hold_in_tx(work_id=failed.pk, reason="dispatch refused: executor 'python' changed", now=clock())
    line = why(failed, clock)
    assert line.reason == NotRunning.DISPATCH_REFUSED
    assert line.text.startswith(
        "waiting for a binding that can run it: dispatch refused: executor 'python' changed (checked again at"
    )


def test_why_not_running_reads_at_most_two_queries(clock, django_assert_max_num_queries):
    work = WorkFactory(status="waiting")
    for number in range(1, 30):
        AttemptFactory(work=work, number=number, state="failed")
    AttemptFactory(work=work, number=30, state="waiting")
    WorkInputFactory.create_batch(30, work=work, state="consumed")
    with django_assert_max_num_queries(1):
        work_why_not_running(work, now=clock())
    idle = WorkFactory()
    with django_assert_max_num_queries(2):
        assert work_why_not_running(idle, now=clock()).reason == NotRunning.NO_INPUT


# --- the Work list, home and doctor's reads ------------------------------------------------------


def test_status_filter_parked_is_ready_work_with_parked_at(clock):
    parked = WorkFactory(parked_at=T0, failures=5)
    WorkFactory()
    WorkFactory(status="cancelled", parked_at=T0)  # cancelled while parked: not parked any more
    assert list(work_filtered(WorkFilter(status="parked"))) == [parked]
    with pytest.raises(ValueError, match="status: unknown status 'sleeping'"):
        WorkFilter(status="sleeping")


def test_work_counts_by_status_and_parked_in_one_query(django_assert_num_queries):
    WorkFactory.create_batch(2, status="running")
    WorkFactory(parked_at=T0)
    WorkFactory()
    WorkFactory(status="completed", parked_at=T0)
    with django_assert_num_queries(1):
        counts = work_counts()
    assert (counts.running, counts.parked) == (2, 1)
    assert counts.by_status == {"ready": 1, "running": 2, "waiting": 0, "completed": 1, "cancelled": 0}


def test_the_work_key_filter_takes_the_start_of_a_key():
    web42 = WorkFactory(scope="acme/web")
    CorrelationKeyFactory(work=web42, key="pr:acme/web#42")
    web43 = WorkFactory(scope="acme/web")
    CorrelationKeyFactory(work=web43, key="pr:acme/web#43")
    api = WorkFactory(scope="acme/api")
    CorrelationKeyFactory(work=api, key="pr:acme/api#1")

    def ids(**filters):
        return sorted(work_filtered(WorkFilter(**filters)).values_list("pk", flat=True))

    assert ids(key="pr:acme/web#") == [web42.pk, web43.pk]
    assert ids(key="pr:acme/web#42") == [web42.pk]
    assert ids(key="pr:", scope="acme/api") == [api.pk]
    assert ids(key="acme") == []
