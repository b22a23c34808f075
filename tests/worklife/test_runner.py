"""The Work engine runs Work for real: worker processes and commands, intents delivered to a
running attempt, outcomes, backoff and parking, cancel, timeouts, leases, waits, timers, and
the attempt API (the Work engine; R11, R32, R36, R41, R46–R51, R56; W1–W5)."""

from __future__ import annotations

import os
import signal
import threading
import time
from datetime import timedelta

import pytest
from django.db import connections, transaction

from causal.models import Event
from tests.worklife import enginekit
from tests.worklife.attemptkit import attempt_renew_lease
from tests.worklife.enginekit import attempts, route_all, runner, send, setup, status, step_until, work_of
from worklife.executors.containment import process_started
from worklife.lifecycle import work_cancel_in_tx
from worklife.models import Attempt, Intent, Timer, Wait, Work, WorkInput

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def engine(clock, test_handlers):
    setup(clock)


def gone(pid: int, within: float = 5.0) -> bool:
    """Whether process ``pid`` ends within ``within`` seconds (reaping it if it is ours)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            finished, _ = os.waitpid(pid, os.WNOHANG)
            if finished == pid:
                return True
        except ChildProcessError:
            pass
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


# --- running and completing ------------------------------------------------------------------


def test_r47_a_python_attempt_runs_its_input_and_completes(clock, loop):
    seq = send(clock, "py", "a")
    work = work_of(seq)
    step_until(loop, lambda: status(work) == "completed")
    (attempt,) = attempts(work)
    assert attempt.state == "succeeded"
    assert attempt.result == {"seen": [seq], "interrupted": False, "reason": ""}
    assert f"echo saw [{seq}]" in attempt.stdout_tail
    assert attempt.pid is not None and attempt.lease_owner == loop.owner
    assert WorkInput.objects.get(event_id=seq).attempt_id == attempt.pk  # consumed by it (R46)


def test_r47_a_command_attempt_runs_and_completes_with_its_result(clock, loop):
    seq = send(clock, "cmd", "c")
    work = work_of(seq)
    step_until(loop, lambda: status(work) == "completed")
    (attempt,) = attempts(work)
    assert (attempt.state, attempt.exit_status, attempt.result) == ("succeeded", 0, {"seen": [seq]})


def test_r36_a_queue_only_binding_is_refused_once_and_visibly(clock, loop):
    seq = send(clock, "archive", "q")
    work = work_of(seq)
    for _ in range(5):
        loop.step()
    work.refresh_from_db()
    assert loop.counters.refused == 1  # looked at once, then left until its recheck: no hot loop
    assert "queue-only" in work.last_error and work.retry_at > clock.now
    assert not Attempt.objects.filter(work=work).exists()


# --- controls reach the running attempt (R32) -------------------------------------------------


def test_r32_inject_and_interrupt_reach_a_running_python_attempt(clock, loop):
    first = send(clock, "listen", "l")
    work = work_of(first)
    step_until(loop, lambda: status(work) == "running")
    more = send(clock, "listen", "l", "more")
    intent = Intent.objects.get(event_id=more)
    step_until(loop, lambda: Intent.objects.get(pk=intent.pk).state == "confirmed")
    stop = send(clock, "listen", "l", "stop")
    step_until(loop, lambda: status(work) == "completed")
    (attempt,) = attempts(work)
    assert attempt.result == {"seen": [first, more], "reason": f"t.listen.stop (#{stop})"}
    assert set(Intent.objects.filter(work=work).values_list("state", flat=True)) == {"confirmed"}
    assert set(WorkInput.objects.filter(work=work).values_list("state", "attempt")) == {
        ("consumed", attempt.pk)
    }


def test_r32_inject_and_interrupt_reach_a_running_command(clock, loop):
    first = send(clock, "cmd", "c")
    work = work_of(first)
    step_until(loop, lambda: status(work) == "running")
    more = send(clock, "cmd", "c", "more")
    step_until(loop, lambda: Intent.objects.get(event_id=more).state == "confirmed")
    stop = send(clock, "cmd", "c", "stop")
    step_until(loop, lambda: status(work) == "completed")
    (attempt,) = attempts(work)
    assert attempt.result == {"seen": [first, more]}
    assert f"interrupted: t.cmd.stop (#{stop})" in attempt.stdout_tail


def test_r32_an_interrupt_a_command_ignores_ends_in_sigterm_after_the_grace(clock, loop):
    seq = send(clock, "stubborn", "s")
    work = work_of(seq)
    step_until(loop, lambda: bool(loop.running) and attempts(work)[0].pid is not None)
    pid = attempts(work)[0].pid
    # Recorded with when it started: a rescue ends this process, never another given its pid.
    assert attempts(work)[0].pid_started == process_started(pid) is not None
    started = time.monotonic()
    send(clock, "stubborn", "s", "stop")
    step_until(loop, lambda: not loop.running, timeout=10)
    assert time.monotonic() - started < 5  # SIGINT ignored, SIGTERM after the 0.5 s grace
    assert gone(pid)
    (attempt,) = attempts(work)
    assert attempt.state == "failed" and attempt.exit_status == -signal.SIGTERM


# --- failures: backoff, bound, parking (W5) ------------------------------------------------------


def test_w5_a_failing_attempt_backs_off_doubling_then_parks(clock, loop, settings):
    settings.CONDUIT_MAX_ATTEMPTS = 3
    seq = send(clock, "boom", "b")
    work = work_of(seq)
    step_until(loop, lambda: len(attempts(work)) == 1 and attempts(work)[0].state == "failed")
    work.refresh_from_db()
    assert (work.status, work.failures, work.retry_at) == ("ready", 1, clock.now + timedelta(seconds=2))
    assert "RuntimeError: agent crashed" in work.last_error
    for _ in range(10):  # backing off: nothing runs, however often the loop looks
        loop.step()
    assert len(attempts(work)) == 1
    clock.advance(2)
    step_until(loop, lambda: len(attempts(work)) == 2 and attempts(work)[1].state == "failed")
    work.refresh_from_db()
    assert work.retry_at == clock.now + timedelta(seconds=4)
    clock.advance(4)
    step_until(loop, lambda: len(attempts(work)) == 3 and attempts(work)[2].state == "failed")
    work.refresh_from_db()
    assert work.is_parked and work.failures == 3 and work.retry_at is None
    clock.advance(3600)
    for _ in range(10):
        loop.step()
    assert len(attempts(work)) == 3  # parked until an operator retries or cancels it
    assert "agent crashed" in attempts(work)[0].stderr_tail  # the traceback is kept


def test_w5_a_retry_presents_the_failed_attempts_input_again(clock, loop, settings):
    """The retry of a failed attempt gets the input the failed attempt took (W4: consumed
    once, by the failed attempt, and presented again)."""
    from worklife.attempts import attempt_fail

    seq = send(clock, "listen", "r")
    work = work_of(seq)
    step_until(loop, lambda: bool(loop.running))
    first = attempts(work)[0]
    attempt_fail(attempt_id=first.pk, lease_epoch=first.lease_epoch, error="test failure", clock=clock)
    step_until(loop, lambda: not loop.running)
    clock.advance(2)
    step_until(loop, lambda: len(attempts(work)) == 2 and bool(loop.running))
    send(clock, "listen", "r", "stop")
    step_until(loop, lambda: status(work) == "completed")
    assert attempts(work)[1].result["seen"] == [seq]
    assert WorkInput.objects.get(event_id=seq).attempt_id == first.pk


# --- cancel, timeouts (R48) -----------------------------------------------------------------------


@pytest.mark.parametrize("binding", ["hang", "stubborn"])
def test_r48_cancel_ends_the_running_process_within_5_seconds(clock, loop, binding):
    seq = send(clock, binding, "x")
    work = work_of(seq)
    step_until(loop, lambda: bool(loop.running) and attempts(work)[0].pid is not None)
    pid = attempts(work)[0].pid
    work_cancel_in_tx(work_id=work.pk, clock=clock)
    started = time.monotonic()
    step_until(loop, lambda: not loop.running, timeout=5)
    assert gone(pid, within=5 - (time.monotonic() - started))
    (attempt,) = attempts(work)
    assert attempt.state == "cancelled" and status(work) == "cancelled"


def test_an_attempt_past_its_timeout_is_ended_and_fails(clock, loop):
    seq = send(clock, "forever", "t")
    work = work_of(seq)
    step_until(loop, lambda: bool(attempts(work)) and attempts(work)[0].state == "failed", timeout=10)
    (attempt,) = attempts(work)
    assert attempt.error == "timed out after 1 s"
    assert gone(attempt.pid)


# --- leases and fencing (W2, W3) ----------------------------------------------------------------


def test_w3_a_lapsed_lease_is_rescued_its_process_ended_and_the_work_runs_under_a_new_epoch(clock):
    first_loop = runner(clock, lease_seconds=30)
    seq = send(clock, "listen", "z")
    work = work_of(seq)
    step_until(first_loop, lambda: bool(first_loop.running) and attempts(work)[0].pid is not None)
    orphan = attempts(work)[0]
    # The first loop stops renewing (as a loop killed with SIGKILL would); its process runs on.
    clock.advance(31)
    second_loop = runner(clock, lease_seconds=30)
    try:
        second_loop.step()
        orphan.refresh_from_db()
        assert orphan.state == "lost" and "lease" in orphan.error
        assert gone(orphan.pid)
        clock.advance(2)
        step_until(second_loop, lambda: len(attempts(work)) == 2 and bool(second_loop.running))
        again = attempts(work)[1]
        assert again.lease_epoch == orphan.lease_epoch + 1
        assert again.lease_owner == second_loop.owner
        # The first loop learns it lost the attempt: nothing it does counts any more.
        first_loop.step()
        assert not first_loop.running
    finally:
        second_loop.shutdown(grace=0)
        first_loop.shutdown(grace=0)


def test_w2_a_takeover_fences_the_old_holder_which_ends_its_process(clock, loop):
    seq = send(clock, "listen", "f")
    work = work_of(seq)
    step_until(loop, lambda: bool(loop.running) and attempts(work)[0].pid is not None)
    attempt = attempts(work)[0]
    attempt_renew_lease(attempt_id=attempt.pk, lease_epoch=attempt.lease_epoch, clock=clock)
    step_until(loop, lambda: not loop.running)
    assert gone(attempt.pid)


# --- complete refused while input is unrouted (R47, R19) -----------------------------------------


def test_r47_complete_waits_for_unrouted_input_then_the_work_runs_it(clock, loop):
    from tests.routing.routerkit import accept

    seq = send(clock, "py", "u")
    work = work_of(seq)
    step_until(loop, lambda: bool(loop.running))
    # Accepted, naming the Work's key, not routed yet.
    late = accept(clock, "t.py", {"key": "u"}, scope="t", correlation=["k:u"])
    # The attempt ends (0.5 s idle) but may not complete past the unrouted Event.
    step_until(loop, lambda: loop.running and next(iter(loop.running.values())).outcome is not None)
    for _ in range(5):
        loop.step()
    assert status(work) == "running" and attempts(work)[0].state == "running"
    route_all(clock)
    step_until(loop, lambda: status(work) == "completed")
    first, second = attempts(work)
    assert first.state == "succeeded" and second.state == "succeeded"
    assert second.result["seen"] == [late.seq]


# --- waits (R41) and timers (R56) ------------------------------------------------------------------


def test_r41_a_matching_event_wakes_the_waiting_attempt_with_it(clock, loop):
    seq = send(clock, "waits", "w")
    work = work_of(seq)
    step_until(loop, lambda: status(work) == "waiting")
    answer = send(clock, "answer", "w")  # routes as t.answer: the wait wins
    step_until(loop, lambda: status(work) == "completed")
    assert attempts(work)[0].result == {"came": answer}
    assert Wait.objects.get(work=work).state == "woken"


def test_r41_a_due_wait_timeout_resumes_the_attempt_without_any_event(clock, loop):
    seq = send(clock, "waits_briefly", "wt")
    work = work_of(seq)
    step_until(loop, lambda: status(work) == "waiting")
    clock.advance(1)
    step_until(loop, lambda: Wait.objects.get(work=work).state == "timed_out")
    attempt = attempts(work)[0]
    assert attempt.state == "running" and status(work) in (
        "running",
        "completed",
    )  # never waiting while ready
    step_until(loop, lambda: status(work) == "completed")
    assert attempts(work)[0].result == {"came": None}


def test_r41_a_timeout_routing_applies_resumes_the_attempt(clock, loop):
    """Known defect fixed: a wait timeout applied by routing left the attempt waiting while
    the Work was ready, so the next dispatch was refused."""
    seq = send(clock, "waits", "wr")
    work = work_of(seq)
    step_until(loop, lambda: status(work) == "waiting")
    clock.advance(61)
    send(clock, "py", "wr")  # routing finds the wait's timeout due first
    wait = Wait.objects.get(work=work)
    assert wait.state == "timed_out"
    assert attempts(work)[0].state == "running" and status(work) == "running"


def test_r41_a_wake_the_causal_limits_blocked_is_tried_again_once_they_allow_it(clock, loop, settings):
    """Known defect fixed: a wait blocked by the causal limits was never retried."""
    from causal.limits import Causal

    settings.CONDUIT_CAUSAL_MAX_DEPTH = 0  # every derived Event is refused: the wake bridge too
    loop.causal = Causal(clock)
    loop.blocked_retry_seconds = 0.0
    seq = send(clock, "waits", "cl")
    work = work_of(seq)
    step_until(loop, lambda: status(work) == "waiting")
    answer = send(clock, "answer", "cl")
    wait = Wait.objects.get(work=work)
    assert wait.blocked_event_id == answer and "causal limits" in wait.blocked_reason
    for _ in range(3):  # still refused: the wait stays blocked, the Work held
        loop.step()
    assert status(work) == "waiting"
    settings.CONDUIT_CAUSAL_MAX_DEPTH = 32  # capacity returns
    loop.causal = Causal(clock)
    # The route loop routes the wake's core.wait.woken bridge meanwhile (until then it holds
    # the Work's completion, R19).
    step_until(loop, lambda: status(work) == "completed", between=lambda: route_all(clock))
    wait.refresh_from_db()
    assert (wait.state, wait.woken_by_id, wait.blocked_reason) == ("woken", answer, "")
    assert attempts(work)[0].result == {"came": answer}


def test_r56_a_scheduled_timer_fires_within_a_second_of_its_due_time():
    from causal.clock import system_clock

    r = runner(system_clock)
    try:
        seq = send(system_clock, "schedules", "tm")
        work = work_of(seq)
        step_until(r, lambda: Timer.objects.filter(work=work).exists())
        timer = Timer.objects.get(work=work)
        step_until(r, lambda: Timer.objects.get(pk=timer.pk).state == "fired")
        fired = Event.objects.get(seq=Timer.objects.get(pk=timer.pk).fired_event_id)
        assert fired.accepted_at - timer.due_at < timedelta(seconds=1)
        assert fired.parent_id == seq and fired.type == "t.tick"  # through the derived boundary
        # The tick routes to its Work and wins the attempt's wait.
        step_until(r, lambda: status(work) == "completed", between=lambda: route_all(system_clock))
        assert attempts(work)[0].result == {"timer": timer.pk, "came": fired.seq}
    finally:
        r.shutdown(grace=0)


# --- the attempt API: emit, child, successor (R50, R51) -----------------------------------------------


def test_r51_an_attempt_emits_a_derived_event_of_its_trigger(clock, loop):
    seq = send(clock, "emits", "e")
    work = work_of(seq)
    step_until(loop, lambda: status(work) == "completed")
    emitted = Event.objects.get(seq=attempts(work)[0].result["emitted"])
    assert (emitted.type, emitted.parent_id, emitted.depth, emitted.scope) == ("t.derived", seq, 1, "t")


def test_r50_an_attempt_creates_a_child_work_that_runs(clock, loop):
    seq = send(clock, "spawns", "p")
    work = work_of(seq)
    step_until(loop, lambda: status(work) == "completed")
    child = Work.objects.get(pk=attempts(work)[0].result["child"])
    assert child.parent_id == work.pk and child.keys.get().key == f"child-of-{work.pk}"
    # The child has no input but the Event that created it, which it runs with (and which
    # the route loop routes meanwhile: until then it holds the child's completion, R19).
    step_until(loop, lambda: status(child) == "completed", between=lambda: route_all(clock))
    (child_attempt,) = attempts(child)
    assert child_attempt.result["seen"] == [child.trigger_id]


def test_r50_a_successor_is_created_once_the_work_completes(clock, loop):
    seq = send(clock, "hands_over", "h")
    work = work_of(seq)
    step_until(loop, lambda: Work.objects.filter(predecessor=work).exists())
    assert status(work) == "completed"
    successor = Work.objects.get(predecessor=work)
    assert successor.parent_id is None and successor.keys.get().key == f"next-{work.pk}"
    assert not work.keys.filter(key=f"next-{work.pk}").exists()


def test_w2_every_call_of_a_stale_attempt_is_refused_by_its_epoch(clock):
    """complete, emit, wait, child, schedule and consume name (attempt, epoch); once the epoch
    moved on (a takeover, a rescue), each is refused and changes nothing."""
    from causal.limits import CausalRefused
    from causal.services import Envelope
    from tests.worklife.attemptkit import work_complete
    from worklife.emit import emit
    from worklife.errors import StaleLease
    from worklife.inputs import consume_inputs_in_tx
    from worklife.lifecycle import work_create_child
    from worklife.timers import timer_schedule
    from worklife.waits import attempt_wait_for

    seq = send(clock, "py", "stale")
    work = work_of(seq)
    from tests.routing.routerkit import attempt_dispatch

    attempt = attempt_dispatch(work_id=work.pk, clock=clock)
    old = attempt.lease_epoch
    attempt_renew_lease(attempt_id=attempt.pk, lease_epoch=old, clock=clock)
    stale = {"attempt_id": attempt.pk, "lease_epoch": old}
    with pytest.raises(StaleLease):
        work_complete(clock=clock, **stale)
    with pytest.raises(CausalRefused, match="stale"):
        emit(envelope=Envelope(id="late", source="agent", type="t.late", scope="t"), **stale)
    with pytest.raises(StaleLease):
        attempt_wait_for(match={"type": "t.answer"}, timeout=None, name="", clock=clock, **stale)
    with pytest.raises(StaleLease):
        work_create_child(binding="py", keys=["kid"], clock=clock, **stale)
    with pytest.raises(StaleLease):
        timer_schedule(after=1, type="t.tick", data=None, clock=clock, **stale)
    input_id = WorkInput.objects.get(event_id=seq).pk
    with pytest.raises(StaleLease), transaction.atomic():
        consume_inputs_in_tx(input_ids=[input_id], clock=clock, **stale)
    assert status(work) == "running" and not Work.objects.filter(parent=work).exists()
    assert not Timer.objects.exists() and not Wait.objects.exists()
    assert WorkInput.objects.get(pk=input_id).state == "pending"
    assert not Event.objects.filter(envelope_id="late").exists()


def test_r9_two_work_loops_share_one_database_and_run_each_work_once(clock, test_handlers):
    """Two work_loop processes claim from one database (SKIP LOCKED on PostgreSQL, the write
    lock on SQLite): every Work runs exactly once."""
    import subprocess

    from causal.clock import system_clock
    from routing.acceptance.services import events_accept
    from tests.support import child_env, manage_command

    setup(system_clock)
    payloads = [
        {
            "specversion": "1.0",
            "id": f"two-{n}",
            "source": "tests",
            "type": "t.noop",
            "scope": "t",
            "data": {"key": f"two{n}"},
        }
        for n in range(60)
    ]
    events_accept(payloads=payloads, clock=system_clock)
    route_all(system_clock)
    loops = [
        subprocess.Popen(
            manage_command("work_loop", "--slots", "4", "--poll-interval", "0.02"),
            env=child_env(LOG_LEVEL="WARNING"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        deadline = time.monotonic() + 120
        while Work.objects.exclude(status="completed").exists():
            assert all(p.poll() is None for p in loops), [
                p.stderr.read() for p in loops if p.poll() is not None
            ]
            assert time.monotonic() < deadline, "the two loops did not run every Work"
            time.sleep(0.1)
    finally:
        for p in loops:
            p.send_signal(signal.SIGTERM)
        for p in loops:
            p.wait(timeout=60)
    assert Attempt.objects.count() == 60 and set(Attempt.objects.values_list("state", flat=True)) == {
        "succeeded"
    }


# --- each pass's hygiene, as the route loop's -------------------------------------------------------


def test_each_pass_empties_the_query_log_that_debug_keeps(clock, loop, settings):
    """With ``DEBUG`` on, Django logs every query a connection runs; a work loop that runs for
    days would keep them all. Each pass empties the log after it, as the route loop does."""
    from django.db import connection

    settings.DEBUG = True
    send(clock, "archive", "log")  # Work each pass looks at: claimed, refused, looked at again
    for _ in range(5):
        loop.step()
        assert len(connection.queries_log) == 0


def test_each_pass_drops_a_connection_past_its_age_first(clock, loop):
    """A connection past ``CONN_MAX_AGE`` (or broken) is dropped before a pass, as the route
    loop drops it: a work loop does not hold one connection for its whole life."""
    from django.db import connection

    loop.step()
    held = connection.connection
    assert held is not None
    connection.close_at = time.monotonic() - 1  # its CONN_MAX_AGE has passed
    loop.step()
    assert connection.connection is not None and connection.connection is not held


def test_a_hostile_call_line_does_not_stop_the_attempt_talking_to_its_loop():
    from worklife.executors.process import parse_call

    assert parse_call(b"[" * 100_000 + b"]" * 100_000) is None
    assert parse_call(b'{"op": "complete"}') == {"op": "complete"}


# --- an interrupt wakes a target blocked in receive; waiting Work holds no slot ----------------

RECEIVES = {
    "executor": "python",
    "settings": {"target": "tests.worklife.targets:receives", "interrupt_grace": 60},
    "controls": ["inject", "interrupt"],
}


@pytest.fixture
def receiving(clock, monkeypatch):
    """The engine's configuration with a binding whose target blocks in ``run.receive``."""
    monkeypatch.setitem(enginekit.BINDINGS, "receives", RECEIVES)
    enginekit.setup(clock)


@pytest.mark.usefixtures("receiving")
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


def test_an_idle_loop_commits_an_attempts_result_when_it_arrives_not_after_its_poll_interval(clock):
    loop = runner(clock)
    work = work_of(send(clock, "brief", "idle"))
    stop = threading.Event()

    def run() -> None:
        try:
            # Its second pass finds nothing to do while the target sleeps: the loop waits.
            loop.run(stop, poll_interval=60.0, stop_grace=0)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20.0
        while status(work) != "completed" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert status(work) == "completed", "the loop waited out its poll interval"
    finally:
        stop.set()
        thread.join(10.0)
    assert not thread.is_alive()


def test_a_pass_completes_the_attempts_that_ended_and_claims_for_their_slots_in_one_commit(
    clock, monkeypatch
):
    """With its slots full of attempts that returned, one pass completes their Work and starts the
    next Work in the slots they free, committing once (the new attempts' pids ride along in the
    next pass's commit): the commits per Work stay at accept, route, claim and complete, the last
    two shared by a pass."""
    loop = runner(clock, slots=2)
    try:
        works = [work_of(send(clock, "py", f"c{n}")) for n in range(4)]
        loop.step()
        first = [w for w in works if attempts(w)]
        assert len(first) == 2 and loop.occupied() == 2
        deadline = time.monotonic() + 20.0
        while not all(r.execution.poll() is not None for r in loop.running.values()):
            assert time.monotonic() < deadline, "the attempts did not return"
            time.sleep(0.02)
        commits = []
        wrapper = type(connections["default"])
        real_commit = wrapper.commit

        def counted(conn):
            commits.append(conn.alias)
            return real_commit(conn)

        monkeypatch.setattr(wrapper, "commit", counted)
        loop.step()
        monkeypatch.undo()
        assert [status(w) for w in first] == ["completed", "completed"]
        assert sum(bool(attempts(w)) for w in works) == 4 and loop.occupied() == 2
        assert len(commits) == 1
    finally:
        loop.shutdown(grace=0)
