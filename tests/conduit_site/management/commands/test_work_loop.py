"""``manage.py work_loop``: flags, --once, --drain, and a graceful stop on SIGTERM."""

from __future__ import annotations

import io
import random
import signal
import subprocess
import time
from datetime import UTC, datetime

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db.models import Count, Q

from causal.clock import system_clock
from causal.models import KV
from routing.acceptance.services import events_accept
from tests.conduit_site.management.commands.loopkit import command_running, sigterm
from tests.support import child_env, manage_command
from tests.worklife.enginekit import route_all, send, setup, work_of
from worklife.heartbeat import HEARTBEATS_NAMESPACE
from worklife.models import Attempt, Work, WorkInput
from worklife.scheduling import backoff_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def engine(test_handlers):
    setup(system_clock)


@pytest.mark.usefixtures("engine")
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--slots", "0"], "--slots must be at least 1"),
        (["--poll-interval", "-1"], "cannot be negative"),
        (["--wait-slots", "-1"], "--wait-slots cannot be negative"),
    ],
)
def test_bad_flags_are_refused(args, message):
    with pytest.raises(CommandError, match=message):
        call_command("work_loop", "--once", *args)


@pytest.mark.usefixtures("engine")
def test_drain_runs_ready_work_to_completion_and_reports():
    work = work_of(send(system_clock, "noop", "d"))
    out = io.StringIO()
    call_command("work_loop", "--drain", stdout=out)
    work.refresh_from_db()
    assert work.status == "completed"
    assert "1 started, 1 completed, 0 failed" in out.getvalue()
    assert KV.objects.filter(namespace=HEARTBEATS_NAMESPACE).exists()  # doctor reads it


@pytest.mark.usefixtures("engine")
def test_once_runs_one_pass():
    work = work_of(send(system_clock, "noop", "o"))
    out = io.StringIO()
    call_command("work_loop", "--once", stdout=out)
    assert out.getvalue().startswith("pass: 1 started")
    assert Attempt.objects.get(work=work).state in ("succeeded", "lost")


@pytest.mark.usefixtures("engine")
def test_sigterm_gives_running_attempts_their_grace_then_gives_the_work_back_uncounted():
    work = work_of(send(system_clock, "listen", "g"))  # runs until interrupted
    with command_running("work_loop", "--poll-interval", "0.05", "--stop-grace", "1") as proc:
        deadline = time.monotonic() + 60
        while not Attempt.objects.filter(work=work, state="running", pid__isnull=False).exists():
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "the loop started no attempt"
            time.sleep(0.1)
        out, err = sigterm(proc)
    assert proc.returncode == 0, err
    assert "work_loop stopped" in out
    attempt = Attempt.objects.get(work=work)
    assert (attempt.state, attempt.error) == ("lost", "its work loop stopped")
    work = Work.objects.get(pk=work.pk)
    assert (work.status, work.failures, work.retry_at) == ("ready", 0, None)  # runs again at once


# ``work_loop`` killed with SIGKILL at random points, again and again, while it runs 200
# Work: afterwards every Work completed exactly once, no two attempts of one Work were live
# at the same time, and no input was lost (W1–W4), checked from the attempt rows.

WORK = 200
KILLS = 20


def start_loop() -> subprocess.Popen:
    return subprocess.Popen(
        manage_command("work_loop", "--slots", "4", "--poll-interval", "0.05"),
        env=child_env(
            CONDUIT_ATTEMPT_LEASE_SECONDS="3",
            CONDUIT_MAX_ATTEMPTS="100",
            CONDUIT_MAX_LOSSES="100",
            LOG_LEVEL="WARNING",
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_w1_w4_work_loop_killed_20_times_completes_every_work_exactly_once(test_handlers):
    setup(system_clock)
    payloads = [
        {
            "specversion": "1.0",
            "id": f"crash-{n}",
            "source": "tests",
            "type": "t.brief",
            "scope": "t",
            "data": {"key": f"c{n}"},
        }
        for n in range(WORK)
    ]
    events_accept(payloads=payloads, clock=system_clock)
    route_all(system_clock)
    assert Work.objects.count() == WORK

    rng = random.Random(20261130)
    kills = 0
    while kills < KILLS:
        started = datetime.now(UTC)
        proc = start_loop()
        if kills % 4 == 0:
            # Kill at a random point of its start: while Django starts, while claiming.
            time.sleep(rng.uniform(0.05, 0.6))
        else:
            # Kill while attempts run: once this loop has started one, at a random point of
            # the next 0.6 s. Timed from the loop's own progress, not from its start, so that
            # a machine that starts processes fast does not let the loop finish every Work
            # before the kills are done (each life completes a few Work at most).
            deadline = time.monotonic() + 30
            while not Attempt.objects.filter(started_at__gt=started).exists():
                assert proc.poll() is None, proc.stderr.read()
                assert time.monotonic() < deadline, "the work loop started no attempt within 30 s"
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, 0.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        kills += 1
    completed_before_the_last_loop = Work.objects.filter(status="completed").count()

    final = start_loop()
    try:
        deadline = time.monotonic() + 240
        while Work.objects.exclude(status="completed").exists():
            assert final.poll() is None, final.stderr.read()
            assert time.monotonic() < deadline, Work.objects.exclude(status="completed").values_list(
                "pk", "status", "last_error"
            )[:5]
            time.sleep(0.2)
    finally:
        final.send_signal(signal.SIGTERM)
        final.wait(timeout=60)

    assert completed_before_the_last_loop < WORK  # the kills really interrupted the run
    # Exactly one successful attempt per Work, and every attempt ended.
    per_work = Work.objects.annotate(
        succeeded=Count("attempts", filter=Q(attempts__state="succeeded")),
        live=Count("attempts", filter=Q(attempts__state__in=["running", "waiting"])),
    )
    assert {(w.succeeded, w.live) for w in per_work} == {(1, 0)}
    # No two attempts of one Work overlap: each starts after the previous one ended.
    lost = 0
    for work in Work.objects.prefetch_related("attempts"):
        attempts = sorted(work.attempts.all(), key=lambda a: a.number)
        for before, after in zip(attempts, attempts[1:], strict=False):
            assert before.ended_at is not None and before.ended_at <= after.started_at, (
                work.pk,
                before.pk,
                after.pk,
            )
            assert after.lease_epoch > before.lease_epoch
        lost += sum(1 for a in attempts if a.state == "lost")
    assert lost > 0  # some attempts were running when their loop was killed
    # No input lost: every Event was consumed, by exactly the attempts of its own Work.
    assert set(WorkInput.objects.values_list("state", flat=True)) == {"consumed"}
    assert not Attempt.objects.filter(state__in=["running", "waiting"]).exists()


# --- recovery after a crash -----------------------------------------------------------------------

TARGETS = "tests.worklife.targets"
ROUNDS = 6
SLOTS = 4


@pytest.fixture
def crash_bindings(monkeypatch, test_handlers):
    """The engine tests' configuration with a target long enough to be killed mid-run and one
    that runs until its loop is killed."""
    from tests.worklife import enginekit

    monkeypatch.setitem(
        enginekit.BINDINGS,
        "sleeps",
        {"executor": "python", "settings": {"target": f"{TARGETS}:sleeps", "params": {"seconds": 3}}},
    )
    monkeypatch.setitem(
        enginekit.BINDINGS,
        "kills",
        {"executor": "python", "settings": {"target": f"{TARGETS}:runs_until_its_loop_dies"}},
    )
    setup(system_clock)


def start_plain_loop() -> subprocess.Popen:
    """A loop as ``serve`` starts it: the default lease (30 s) and attempt budget."""
    return subprocess.Popen(
        manage_command("work_loop", "--slots", str(SLOTS), "--poll-interval", "0.05"),
        env=child_env(LOG_LEVEL="WARNING"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(rows, count: int, proc: subprocess.Popen, what: str, timeout: float = 60) -> None:
    """Wait until the query ``rows`` counts ``count`` rows (while ``proc`` lives)."""
    deadline = time.monotonic() + timeout
    while rows.count() != count:
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


@pytest.mark.slow
def test_a_restarted_loop_runs_the_killed_loops_in_flight_work_again_at_once(crash_bindings):
    """Each round: four Works run (3 s each), their loop is killed with SIGKILL and a new one
    started. Measured: from the new loop's start (and from the kill) to the start of each
    in-flight Work's next attempt, and to its loss being recorded (the new loop's own start-up).
    Asserted: every lost attempt ran again in the pass after its loss (no failure's backoff)
    under the same idempotency key, and every Work completed exactly once."""

    from_restart: list[float] = []
    from_kill: list[float] = []
    to_release: list[float] = []
    lost_works: set[int] = set()
    loop = start_plain_loop()
    try:
        for round_ in range(ROUNDS):
            payloads = [
                {
                    "specversion": "1.0",
                    "id": f"recover-{round_}-{n}",
                    "source": "tests",
                    "type": "t.sleeps",
                    "scope": "t",
                    "data": {"key": f"r{round_}-{n}"},
                }
                for n in range(SLOTS)
            ]
            seqs = [accepted.event.seq for accepted in events_accept(payloads=payloads, clock=system_clock)]
            route_all(system_clock)
            works = list(Work.objects.filter(trigger_id__in=seqs).values_list("pk", flat=True))
            assert len(works) == SLOTS
            running = Attempt.objects.filter(work_id__in=works, state="running", pid__isnull=False)
            wait_for(running, SLOTS, loop, "the attempts did not start")
            time.sleep(0.5)  # well inside the 3 s each attempt runs
            in_flight = {a.work_id: a for a in running}
            killed_at = datetime.now(UTC)
            loop.send_signal(signal.SIGKILL)
            loop.wait(timeout=30)
            restarted = datetime.now(UTC)
            loop = start_plain_loop()
            again = Attempt.objects.filter(work_id__in=works, number=2)
            wait_for(again, SLOTS, loop, "the lost Work did not run again")
            for attempt in again:
                lost = in_flight[attempt.work_id]
                lost.refresh_from_db()
                assert lost.state == "lost"
                assert attempt.idempotency_key == lost.idempotency_key != ""
                # Run again in the pass after the loss, not after a failure's backoff (2 s at least).
                assert attempt.started_at - lost.ended_at < backoff_for(1)
                from_restart.append((attempt.started_at - restarted).total_seconds())
                from_kill.append((attempt.started_at - killed_at).total_seconds())
                to_release.append((lost.ended_at - restarted).total_seconds())
                lost_works.add(attempt.work_id)
        wait_for(Work.objects.exclude(status="completed"), 0, loop, "not every Work completed", timeout=120)
    finally:
        loop.send_signal(signal.SIGTERM)
        loop.wait(timeout=60)

    print(
        f"\nrecovery of {len(from_restart)} in-flight Work over {ROUNDS} SIGKILLs of work_loop "
        f"(--slots {SLOTS}, lease 30 s):\n"
        f"  from the restarted loop's start to the next attempt: median {median(from_restart):.2f} s, "
        f"min {min(from_restart):.2f} s, max {max(from_restart):.2f} s\n"
        f"  from the kill: median {median(from_kill):.2f} s, max {max(from_kill):.2f} s\n"
        f"  of which the new loop's start-up until it marked them lost: median {median(to_release):.2f} s"
    )
    per_work = Work.objects.annotate(
        succeeded=Count("attempts", filter=Q(attempts__state="succeeded")),
        lost=Count("attempts", filter=Q(attempts__state="lost")),
    )
    assert {(w.succeeded, w.lost) for w in per_work} == {(1, 1)}


@pytest.mark.slow
def test_a_work_whose_loop_is_killed_under_it_is_parked_after_3_attempts_lost_in_a_row(crash_bindings):

    accepted = events_accept(
        payloads=[
            {
                "specversion": "1.0",
                "id": "kills",
                "source": "tests",
                "type": "t.kills",
                "scope": "t",
                "data": {"key": "k"},
            }
        ],
        clock=system_clock,
    )
    route_all(system_clock)
    work = Work.objects.get(trigger_id=accepted[0].event.seq)
    lives = 0
    loop = start_plain_loop()
    try:
        while True:
            # Each loop is killed while the attempt it started runs (as the kernel kills a loop
            # whose Work exhausts the memory), or finds the Work parked.
            deadline = time.monotonic() + 60
            while loop.poll() is None and Work.objects.get(pk=work.pk).parked_at is None:
                assert time.monotonic() < deadline, "the loop neither died nor parked the Work"
                if Attempt.objects.filter(
                    work=work, number=lives + 1, state="running", pid__isnull=False
                ).exists():
                    loop.kill()
                    loop.wait(timeout=30)
                time.sleep(0.05)
            if loop.poll() is None:
                break
            assert loop.returncode == -signal.SIGKILL, loop.stderr.read()
            lives += 1
            assert lives <= 5, "the Work was never parked"
            loop = start_plain_loop()
        # Parked: the fourth loop lives on and runs it no more.
        time.sleep(1.0)
        assert loop.poll() is None
    finally:
        loop.send_signal(signal.SIGTERM)
        loop.wait(timeout=60)
    work.refresh_from_db()
    states = list(work.attempts.order_by("number").values_list("state", flat=True))
    assert states == ["lost", "lost", "lost"] and lives == 3
    assert (work.losses, work.failures, work.status) == (3, 0, "ready")
    assert work.last_error.startswith("attempt 3 lost:")
