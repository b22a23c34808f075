"""The Work engine under interrupts, waits and crashes (issue 36): a target blocked in
``run.receive`` wakes on an interrupt (item 15); waiting Work does not hold the slots that run
new attempts (item 16); an attempt lost with its loop runs again at once, a Work whose attempts
keep being lost is parked, and every attempt carries an idempotency key stable across the retries
of one presentation (item 17). Real worker processes where the item is about them."""

from __future__ import annotations

import sys
from datetime import timedelta

import pytest

from tests.worklife import enginekit
from tests.worklife.attemptkit import attempt_end, attempt_start
from tests.worklife.enginekit import runner, send, status, step_until, work_of
from worklife.attempts import attempt_fail, attempts_rescue
from worklife.executors.environment import env_setting_problems
from worklife.models import Attempt, Work
from worklife.selectors import work_why_not_running

pytestmark = pytest.mark.django_db(transaction=True)

TARGETS = "tests.worklife.targets"
# Completes with the idempotency key its environment carries.
PRINTS_KEY = (
    "import json, os; print('@conduit ' + json.dumps("
    "{'op': 'complete', 'result': os.environ.get('CONDUIT_IDEMPOTENCY_KEY')}))"
)
BINDINGS = {
    "keyed": {"executor": "python", "settings": {"target": f"{TARGETS}:keyed"}},
    "keyed_command": {"executor": "command", "settings": {"argv": [sys.executable, "-c", PRINTS_KEY]}},
    "receives": {
        "executor": "python",
        "settings": {"target": f"{TARGETS}:receives", "interrupt_grace": 60},
        "controls": ["inject", "interrupt"],
    },
}


@pytest.fixture(autouse=True)
def engine(clock, test_handlers, monkeypatch):
    """The engine tests' configuration (tests/worklife/enginekit.py) with this module's bindings."""
    for name, binding in BINDINGS.items():
        monkeypatch.setitem(enginekit.BINDINGS, name, binding)
    enginekit.setup(clock)


@pytest.fixture
def loop(clock):
    r = runner(clock)
    yield r
    r.shutdown(grace=0)


def attempts(work: Work) -> list[Attempt]:
    return list(Attempt.objects.filter(work=work).order_by("number"))


# --- item 15: receive wakes on an interrupt -------------------------------------------------------


def test_an_interrupt_wakes_a_target_blocked_in_receive(clock, loop):
    """Blocked in ``run.receive(timeout=600)`` with a 60 s grace: the interrupt returns
    ``None`` at once with ``run.interrupted`` set, and the attempt ends as the target says
    (before, it stayed blocked until SIGTERM after the grace, and failed)."""
    seq = send(clock, "receives", "r")
    work = work_of(seq)
    step_until(loop, lambda: status(work) == "running" and bool(loop.running))
    send(clock, "receives", "r", "stop", reason="enough")
    step_until(loop, lambda: status(work) == "completed", timeout=15)
    (attempt,) = attempts(work)
    assert attempt.state == "succeeded"
    assert attempt.result["item"] is None and attempt.result["interrupted"] is True
    assert attempt.result["reason"] == "enough"
    assert attempt.result["blocked"] < 15


# --- item 16: waiting Work holds no slot ------------------------------------------------------------


def test_with_2_slots_and_10_works_waiting_new_work_starts_in_the_next_passes(clock):
    loop = runner(clock, slots=2)
    try:
        waiting = [work_of(send(clock, "waits", f"w{n}")) for n in range(10)]
        step_until(loop, lambda: all(status(w) == "waiting" for w in waiting), timeout=60)
        assert loop.parked() == 10 and loop.occupied() == 0
        new = work_of(send(clock, "noop", "n"))
        for _ in range(3):  # the next passes, not a wall clock
            loop.step()
            if attempts(new):
                break
        assert attempts(new), "new Work did not start while 10 Works wait with 2 slots"
        step_until(loop, lambda: status(new) == "completed")
        # Every wait woken at once: they resume as slots free, never more than 2 running.
        for n in range(10):
            send(clock, "answer", f"w{n}")
        most = []
        step_until(
            loop,
            lambda: all(status(w) == "completed" for w in waiting),
            timeout=60,
            between=lambda: most.append(loop.occupied()),
        )
        assert max(most) <= 2
        assert all(attempts(w)[0].result["came"] is not None for w in waiting)
    finally:
        loop.shutdown(grace=0)


def test_parked_attempts_past_the_wait_bound_hold_slots_again(clock):
    loop = runner(clock, slots=2, wait_slots=1)
    try:
        waiting = [work_of(send(clock, "waits", f"b{n}")) for n in range(4)]
        step_until(loop, lambda: sum(status(w) == "waiting" for w in waiting) == 3, timeout=60)
        for _ in range(5):
            loop.step()
        # One parked attempt beside the slots, two holding them: the fourth Work waits its turn.
        assert loop.parked() == 3 and loop.occupied() == 2
        assert [len(attempts(w)) for w in waiting] == [1, 1, 1, 0]
    finally:
        loop.shutdown(grace=0)


# --- item 17: lost with its loop, parked after 3 losses in a row, idempotency keys --------------


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


def test_targets_read_the_idempotency_key_and_it_survives_a_failed_attempt(clock, loop, tmp_path):
    marker = tmp_path / "failed-once"
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
