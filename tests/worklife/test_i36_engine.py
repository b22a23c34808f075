"""The Work engine under interrupts, waits and crashes (issue 36): a target blocked in
``run.receive`` wakes on an interrupt (item 15); waiting Work does not hold the slots that run
new attempts (item 16); an attempt lost with its loop runs again at once, a Work whose attempts
keep being lost is parked, and every attempt carries an idempotency key stable across the retries
of one presentation (item 17). Real worker processes where the item is about them."""

from __future__ import annotations

import pytest

from tests.worklife import enginekit
from tests.worklife.enginekit import runner, send, status, step_until, work_of
from worklife.models import Attempt, Work

pytestmark = pytest.mark.django_db(transaction=True)

TARGETS = "tests.worklife.i36_engine_targets"
BINDINGS = {
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


def test_i36_15_an_interrupt_wakes_a_target_blocked_in_receive(clock, loop):
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


def test_i36_16_with_2_slots_and_10_works_waiting_new_work_starts_in_the_next_passes(clock):
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


def test_i36_16_parked_attempts_past_the_wait_bound_hold_slots_again(clock):
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
