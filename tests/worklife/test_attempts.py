"""Attempts and their leases (worklife.attempts): one live attempt a Work (W1); an attempt lost
with its loop runs again at once, a Work whose attempts keep being lost is parked, and every
attempt carries an idempotency key stable across the retries of one presentation."""

from __future__ import annotations

import sys
from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction

from tests.worklife import enginekit
from tests.worklife.attemptkit import attempt_end, attempt_start
from tests.worklife.enginekit import attempts, runner, send, status, step_until, work_of
from tests.worklife.factories import AttemptFactory, WorkFactory
from worklife.attempts import attempt_fail, attempts_rescue
from worklife.executors.environment import env_setting_problems
from worklife.models import Attempt, Work
from worklife.selectors import work_why_not_running

pytestmark = pytest.mark.django_db(transaction=True)


def test_w1_the_database_forbids_two_live_attempts_of_one_work():
    work = WorkFactory()
    AttemptFactory(work=work, number=1, state="running")
    with pytest.raises(IntegrityError), transaction.atomic():
        AttemptFactory(work=work, number=2, state="waiting")
    AttemptFactory(work=work, number=3, state="failed")  # ended attempts are history


# --- lost with its loop, parked after 3 losses in a row, idempotency keys ---------------------

TARGETS = "tests.worklife.targets"
# Completes with the idempotency key its environment carries.
PRINTS_KEY = (
    "import json, os; print('@conduit ' + json.dumps("
    "{'op': 'complete', 'result': os.environ.get('CONDUIT_IDEMPOTENCY_KEY')}))"
)
BINDINGS = {
    "keyed": {"executor": "python", "settings": {"target": f"{TARGETS}:keyed"}},
    "keyed_command": {"executor": "command", "settings": {"argv": [sys.executable, "-c", PRINTS_KEY]}},
}


@pytest.fixture
def engine(clock, test_handlers, monkeypatch):
    """The engine tests' configuration (tests/worklife/enginekit.py) with this module's bindings."""
    for name, binding in BINDINGS.items():
        monkeypatch.setitem(enginekit.BINDINGS, name, binding)
    enginekit.setup(clock)


def lose(work: Work, clock, owner: str = "crashed-host:1:dead") -> Attempt:
    """Start the Work's next attempt for ``owner``, then lose it as a loop that finds ``owner``
    gone does (``WorkRunner.release_dead_owners``)."""
    attempt = attempt_start(
        work_id=work.pk,
        binding="noop",
        executor="python",
        generation=1,
        capabilities=[],
        clock=clock,
        lease_until=clock() + timedelta(seconds=30),
        lease_owner=owner,
    )
    (rescued,) = attempts_rescue(now=clock(), owners_gone=[owner], clock=clock)
    assert rescued.attempt_id == attempt.pk
    attempt.refresh_from_db()
    work.refresh_from_db()
    return attempt


@pytest.mark.usefixtures("engine")
def test_an_attempt_lost_with_its_loop_runs_again_at_once_with_its_key(clock):
    first, second = runner(clock), runner(clock)
    try:
        work = work_of(send(clock, "listen", "lost"))
        step_until(first, lambda: bool(first.running) and attempts(work)[0].pid is not None)
        attempts_rescue(now=clock(), owners_gone=[first.owner], clock=clock)
        lost = attempts(work)[0]
        work.refresh_from_db()
        assert lost.state == "lost"
        assert (work.status, work.failures, work.losses, work.retry_at, work.parked_at) == (
            "ready",
            0,
            1,
            None,
            None,
        )
        second.step()  # no clock advanced: no backoff
        again = attempts(work)[1]
        assert again.state == "running" and again.lease_owner == second.owner
        assert again.idempotency_key == lost.idempotency_key != ""
        assert again.trigger_id == lost.trigger_id  # the same input, presented again
    finally:
        second.shutdown(grace=0)
        first.shutdown(grace=0)


@pytest.mark.usefixtures("engine")
def test_a_work_whose_attempts_are_lost_3_times_in_a_row_is_parked(clock):
    work = work_of(send(clock, "archive", "p"))
    lose(work, clock)
    lose(work, clock)
    assert (work.losses, work.failures, work.parked_at, work.retry_at) == (2, 0, None, None)
    # A failure of its own breaks the row (and counts as a failure, with its backoff).
    failing = attempt_start(
        work_id=work.pk, binding="noop", executor="python", generation=1, capabilities=[], clock=clock
    )
    attempt_fail(attempt_id=failing.pk, lease_epoch=failing.lease_epoch, error="boom", clock=clock)
    work.refresh_from_db()
    assert (work.losses, work.failures) == (0, 1) and work.retry_at is not None
    clock.advance(3)
    lose(work, clock)
    lose(work, clock)
    assert work.parked_at is None and work.losses == 2
    third = lose(work, clock)
    assert work.losses == 3 and work.parked_at == clock() and work.retry_at is None
    assert work.last_error.startswith(f"attempt {third.number} lost:")
    assert work_why_not_running(work, now=clock()).text.startswith("parked after 3 attempts lost in a row (")
    # Every attempt presented the same input: one idempotency key throughout.
    assert len({a.idempotency_key for a in attempts(work)}) == 1


@pytest.mark.usefixtures("engine")
def test_the_idempotency_key_changes_after_a_success(clock):
    work = work_of(send(clock, "archive", "s"))
    first = lose(work, clock)
    again = attempt_start(
        work_id=work.pk, binding="noop", executor="python", generation=1, capabilities=[], clock=clock
    )
    assert again.idempotency_key == first.idempotency_key
    attempt_end(attempt_id=again.pk, lease_epoch=again.lease_epoch, state="succeeded", clock=clock)
    after = attempt_start(
        work_id=work.pk, binding="noop", executor="python", generation=1, capabilities=[], clock=clock
    )
    assert after.idempotency_key != again.idempotency_key
    assert after.idempotency_key.startswith(f"conduit-{work.pk}-{after.number}-")


@pytest.mark.usefixtures("engine")
def test_targets_read_the_idempotency_key_and_it_survives_a_failed_attempt(clock, loop, work_tmp):
    marker = work_tmp / "failed-once"
    work = work_of(send(clock, "keyed", "k", marker=str(marker)))
    step_until(loop, lambda: attempts(work) and attempts(work)[0].state == "failed")
    clock.advance(2)  # a failure of its own backs off
    step_until(loop, lambda: status(work) == "completed")
    failed, succeeded = attempts(work)
    assert failed.idempotency_key in failed.error
    assert succeeded.result == {"key": failed.idempotency_key, "env": failed.idempotency_key}
    command = work_of(send(clock, "keyed_command", "c"))
    step_until(loop, lambda: status(command) == "completed")
    (attempt,) = attempts(command)
    assert attempt.result == attempt.idempotency_key != ""
    assert dict(env_setting_problems({"env": {"CONDUIT_IDEMPOTENCY_KEY": "mine"}})) == {
        "env.CONDUIT_IDEMPOTENCY_KEY": "set by the attempt protocol (a binding cannot set it)"
    }


@pytest.mark.usefixtures("engine")
def test_an_executor_whose_start_takes_no_key_still_runs(clock, settings, monkeypatch):
    """Executors written before the idempotency key (``start`` without it) are called without it."""
    settings.CONDUIT_EXECUTORS = {
        **settings.CONDUIT_EXECUTORS,
        "instant": "tests.worklife.ext_executors.Instant",
    }
    monkeypatch.setitem(enginekit.BINDINGS, "old_style", {"executor": "instant", "settings": {}})
    enginekit.setup(clock)
    loop = runner(clock)
    try:
        work = work_of(send(clock, "old_style", "o"))
        step_until(loop, lambda: status(work) == "completed")
        (attempt,) = attempts(work)
        assert attempt.state == "succeeded" and attempt.idempotency_key
    finally:
        loop.shutdown(grace=0)
