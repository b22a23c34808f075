"""R12 and I7 with batched hand-overs: the pool's workers take calls in
batches, each call still under its own deadline from its own start."""

from __future__ import annotations

import threading
import time

from routing.engine.handler_pool import BATCH_CALLS, HandlerPool


def test_r12_every_call_answers_in_order_from_batches():
    pool = HandlerPool(workers=4)
    try:
        outcomes = pool.run_all([lambda n=n: n * n for n in range(1000)], timeout=5)
    finally:
        pool.close()
    assert [o.result for o in outcomes] == [n * n for n in range(1000)]
    assert not any(o.timed_out or o.exception for o in outcomes)


def test_r12_batches_are_small_enough_for_every_worker_to_take_several():
    pool = HandlerPool(workers=4)
    queued = []
    enqueue = pool._enqueue

    def recorded(calls):
        batches = enqueue(calls)
        queued.extend(batches)
        return batches

    pool._enqueue = recorded  # type: ignore[method-assign]
    try:
        outcomes = pool.run_all([lambda n=n: n for n in range(500)], timeout=5)
    finally:
        pool.close()
    batches = queued
    assert len(batches) >= 16 and max(len(b.calls) for b in batches) <= BATCH_CALLS
    assert sum(len(b.calls) for b in batches) == 500
    assert [o.result for o in outcomes] == list(range(500))


def test_r12_i7_a_hung_call_inside_a_batch_times_out_and_the_calls_behind_it_still_run():
    """The hung call is abandoned at its own deadline; the calls queued after it in its batch
    go to another worker and answer; exceptions stay each call's own."""
    release = threading.Event()
    ran_after: list[int] = []

    def fn(n: int):
        if n == 3:
            release.wait(30)
            return "late"
        if n == 5:
            raise ValueError("five")
        ran_after.append(n)
        return n

    pool = HandlerPool(workers=1, max_abandoned=2)
    try:
        started = time.monotonic()
        outcomes = pool.run_all([lambda n=n: fn(n) for n in range(8)], timeout=0.3)
        elapsed = time.monotonic() - started
        abandoned = pool.abandoned
    finally:
        release.set()
        pool.close()
    assert outcomes[3].timed_out and 0.3 <= outcomes[3].elapsed < 1.0
    assert isinstance(outcomes[5].exception, ValueError) and "five" in outcomes[5].stack
    assert [o.result for i, o in enumerate(outcomes) if i not in (3, 5)] == [0, 1, 2, 4, 6, 7]
    assert sorted(ran_after) == [0, 1, 2, 4, 6, 7]
    assert abandoned == 1 and 0.3 <= elapsed < 1.5


def test_r12_each_call_of_a_batch_has_its_own_deadline_from_its_start():
    """Calls that together run longer than the deadline, each within it, all answer."""
    pool = HandlerPool(workers=1)
    try:
        outcomes = pool.run_all([lambda: time.sleep(0.05) or "ok" for _ in range(8)], timeout=0.2)
    finally:
        pool.close()
    assert [o.result for o in outcomes] == ["ok"] * 8
    assert all(0.04 <= o.elapsed < 0.2 for o in outcomes)


def test_r12_start_all_returns_at_once_and_outcomes_waits_under_each_deadline():
    """The route loop asks the next window's routes while its commit ends: ``start_all``
    queues the calls and returns while they run; ``outcomes`` waits for them, abandoning a
    call that overruns its own deadline, and answers the same again when asked twice."""
    release = threading.Event()
    running = threading.Event()

    def fn(n: int):
        if n == 0:
            running.set()
            release.wait(5)
        return n

    pool = HandlerPool(workers=2, max_abandoned=2)
    try:
        started = pool.start_all([lambda n=n: fn(n) for n in range(4)], timeout=0.3)
        # start_all has returned while its first call runs, waiting for the caller.
        assert running.wait(5)
        release.set()
        outcomes = started.outcomes()
        again = started.outcomes()
    finally:
        release.set()
        pool.close()
    assert [o.result for o in outcomes] == [0, 1, 2, 3]
    assert again is outcomes
    assert not any(o.timed_out for o in outcomes)


def test_r12_a_call_started_ahead_still_times_out_at_its_deadline():
    release = threading.Event()
    pool = HandlerPool(workers=1, max_abandoned=2)
    try:
        started = pool.start_all([lambda: release.wait(30) and "late", lambda: "next"], timeout=0.3)
        began = time.monotonic()
        outcomes = started.outcomes()
        waited = time.monotonic() - began
    finally:
        release.set()
        pool.close()
    assert outcomes[0].timed_out and 0.3 <= outcomes[0].elapsed < 1.0
    assert outcomes[1].result == "next"
    assert waited < 1.5


def test_r12_a_call_that_returned_after_its_deadline_in_a_batch_not_yet_waited_on_is_a_timeout():
    """The waiter follows one batch at a time: while it waited on the first call (its steps
    each within the deadline, together longer), the second call, on another worker, ran past
    its deadline and returned. Its answer came too late all the same."""
    pause = threading.Event()  # never set: each wait is a real pause on a real thread

    def long_but_each_step_in_time(steps):
        for slot in ("a", "b", "c"):
            steps.running = (time.monotonic(), slot)
            pause.wait(0.2)
        return "in time"

    def one_step_too_long(steps):
        steps.running = (time.monotonic(), "slow")
        pause.wait(0.45)
        return "too late"

    pool = HandlerPool(workers=2)
    try:
        outcomes = pool.run_all([long_but_each_step_in_time, one_step_too_long], timeout=0.3, stepped=True)
    finally:
        pool.close()
    assert outcomes[0].result == "in time" and not outcomes[0].timed_out
    assert outcomes[1].timed_out and outcomes[1].step == "slow" and outcomes[1].result is None
    assert 0.3 <= outcomes[1].elapsed < 1.0


def test_r12_a_step_that_overran_is_a_timeout_though_a_later_step_was_quick():
    pause = threading.Event()

    def slow_then_quick(steps):
        steps.running = (time.monotonic(), "slow")
        pause.wait(0.45)
        steps.running = (time.monotonic(), "quick")
        return "too late"

    def long_but_each_step_in_time(steps):
        for slot in ("a", "b", "c"):
            steps.running = (time.monotonic(), slot)
            pause.wait(0.2)
        return "in time"

    pool = HandlerPool(workers=2)
    try:
        outcomes = pool.run_all([long_but_each_step_in_time, slow_then_quick], timeout=0.3, stepped=True)
    finally:
        pool.close()
    assert not outcomes[0].timed_out
    assert outcomes[1].timed_out and outcomes[1].step == "slow" and 0.3 <= outcomes[1].elapsed < 1.0
