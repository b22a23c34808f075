"""``work_loop`` killed with SIGKILL at random points, again and again, while it runs 200
Work: afterwards every Work completed exactly once, no two attempts of one Work were live
at the same time, and no input was lost (W1–W4), checked from the attempt rows."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from datetime import UTC, datetime

import pytest
from django.db.models import Count, Q

from causal.clock import system_clock
from routing.acceptance.services import events_accept
from tests.support import child_env, manage_command
from tests.worklife.enginekit import route_all, setup
from worklife.models import Attempt, Work, WorkInput

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

WORK = 200
KILLS = 20


def start_loop() -> subprocess.Popen:
    return subprocess.Popen(
        manage_command("work_loop", "--slots", "4", "--poll-interval", "0.05"),
        env=child_env(CONDUIT_ATTEMPT_LEASE_SECONDS="3", CONDUIT_MAX_ATTEMPTS="100", LOG_LEVEL="WARNING"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


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
