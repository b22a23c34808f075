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
