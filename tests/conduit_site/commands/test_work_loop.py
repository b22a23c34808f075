"""``manage.py work_loop``: flags, --once, --drain, and a graceful stop on SIGTERM."""

from __future__ import annotations

import io
import signal
import subprocess
import time

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from causal.clock import system_clock
from causal.models import KV
from tests.support import child_env, manage_command
from tests.worklife.enginekit import send, setup, work_of
from worklife.heartbeat import HEARTBEATS_NAMESPACE
from worklife.models import Attempt, Work

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def engine(test_handlers):
    setup(system_clock)


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


def test_drain_runs_ready_work_to_completion_and_reports():
    work = work_of(send(system_clock, "noop", "d"))
    out = io.StringIO()
    call_command("work_loop", "--drain", stdout=out)
    work.refresh_from_db()
    assert work.status == "completed"
    assert "1 started, 1 completed, 0 failed" in out.getvalue()
    assert KV.objects.filter(namespace=HEARTBEATS_NAMESPACE).exists()  # doctor reads it


def test_once_runs_one_pass():
    work = work_of(send(system_clock, "noop", "o"))
    out = io.StringIO()
    call_command("work_loop", "--once", stdout=out)
    assert out.getvalue().startswith("pass: 1 started")
    assert Attempt.objects.get(work=work).state in ("succeeded", "lost")


def test_sigterm_gives_running_attempts_their_grace_then_gives_the_work_back_uncounted():
    work = work_of(send(system_clock, "listen", "g"))  # runs until interrupted
    proc = subprocess.Popen(
        manage_command("work_loop", "--poll-interval", "0.05", "--stop-grace", "1"),
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not Attempt.objects.filter(work=work, state="running", pid__isnull=False).exists():
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "the loop started no attempt"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "work_loop stopped" in out
    attempt = Attempt.objects.get(work=work)
    assert (attempt.state, attempt.error) == ("lost", "its work loop stopped")
    work = Work.objects.get(pk=work.pk)
    assert (work.status, work.failures, work.retry_at) == ("ready", 0, None)  # runs again at once
