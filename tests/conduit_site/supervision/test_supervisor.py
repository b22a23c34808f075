"""serve's supervisor: a child that cannot start stops everything, restarts back off, a stop
signal is forwarded once."""

from __future__ import annotations

import io
import os
import signal
import sys
import textwrap
import threading
import time

from django.core.management.base import BaseCommand

from conduit_site.supervision import supervisor as supervisor_module
from conduit_site.supervision.supervisor import Child, Supervisor
from tests.support import free_port


class Quiet(BaseCommand):
    """A command whose output the supervisor tests read."""

    def __init__(self) -> None:
        super().__init__(stdout=io.StringIO(), stderr=io.StringIO(), no_color=True)


def python_child(name: str, code: str) -> Child:
    return Child(name=name, argv=[sys.executable, "-c", code])


def test_serve_supervisor_stops_when_a_child_cannot_start():
    """A child that exits with a status within a second of each of its first starts cannot
    start (bad configuration): serve stops the others and fails with its status."""
    command = Quiet()
    survivor = python_child("survivor", "import time; time.sleep(60)")
    crasher = python_child("crasher", "import sys; sys.exit(3)")

    started = time.monotonic()
    status = Supervisor(command, [survivor, crasher], stop_timeout=10).run(
        url="http://127.0.0.1:1/", probe=("127.0.0.1", free_port())
    )

    assert status == 3
    assert survivor.returncode == -signal.SIGTERM  # stopped, not left running
    assert time.monotonic() - started < 30
    err = command.stderr.getvalue()
    assert "crasher exited with status 3 after" in err and "restarting it in 1 s (restart 1)" in err
    assert "restarting it in 2 s (restart 2)" in err
    assert (
        f"crasher cannot start: it exited with status 3 within {supervisor_module.STARTUP_SECONDS:g} s "
        f"of each of its first {supervisor_module.START_ATTEMPTS} starts; stopping." in err
    )


def test_restart_backoff_doubles_to_30_s_and_resets_after_a_minute_up():
    child = python_child("loop", "")
    delays = []
    now = 100.0
    for _ in range(7):
        child.started_at, child.returncode = now, -signal.SIGKILL
        delays.append(child.exited(now + 0.5))
        now += 1000
    assert delays == [1, 2, 4, 8, 16, 30, 30]
    child.started_at = now
    assert child.exited(now + supervisor_module.HEALTHY_SECONDS) == 1  # a minute of health
    child.started_at = now + 100
    assert child.exited(now + 100.5) == 2
    assert not child.cannot_start()  # killed by a signal: not a configuration failure


def test_a_child_that_once_ran_is_always_restarted():
    child = python_child("loop", "")
    child.started_at, child.returncode = 0.0, 1
    child.exited(supervisor_module.STARTUP_SECONDS + 1)
    for start in range(supervisor_module.START_ATTEMPTS + 2):
        child.started_at, child.returncode = 1000.0 * (start + 1), 1
        child.exited(child.started_at + 0.1)
    assert not child.cannot_start()


def test_serve_supervisor_forwards_sigterm_once_and_exits_zero_on_a_clean_stop(tmp_path):
    marker = tmp_path / "terms"
    # Each child says it is ready once its handler is in place, then counts the SIGTERMs it
    # receives and exits 0 on the first.
    code = textwrap.dedent(
        f"""
        import os, signal, sys, time
        def stop(signum, frame):
            with open({str(marker)!r}, "a") as f:
                f.write("x")
            sys.exit(0)
        signal.signal(signal.SIGTERM, stop)
        open(os.path.join({str(tmp_path)!r}, f"ready-{{os.getpid()}}"), "w").close()
        time.sleep(60)
        """
    )
    children = [python_child("one", code), python_child("two", code)]
    finished = threading.Event()

    def terminate_serve_once_children_are_ready() -> None:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("ready-*"))) < 2 and time.monotonic() < deadline:
            if finished.wait(0.05):
                return
        os.kill(os.getpid(), signal.SIGTERM)

    # Should the signal ever come after the supervisor restored the handlers, it is ignored
    # rather than ending the test run.
    original = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    sender = threading.Thread(target=terminate_serve_once_children_are_ready, daemon=True)
    sender.start()
    try:
        status = Supervisor(Quiet(), children, stop_timeout=10).run(
            url="http://127.0.0.1:1/", probe=("127.0.0.1", free_port())
        )
    finally:
        finished.set()
        sender.join(timeout=10)
        signal.signal(signal.SIGTERM, original)

    assert status == 0
    assert [child.returncode for child in children] == [0, 0]
    assert marker.read_text(encoding="utf-8") == "xx"  # one SIGTERM each, no second one
