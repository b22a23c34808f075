"""Ending an attempt ends every process it started, ``setsid`` included, with cgroups where the
machine offers them and with the process mark elsewhere. Real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from django.conf import settings

from worklife.executors import CommandExecutor, PythonExecutor, containment


@pytest.fixture(params=["cgroup", "marker"])
def mechanism(request, settings):
    """Each test runs with the machine's cgroup v2 (where it offers one) and with the
    fallback that works anywhere (the environment marker and the process tree)."""
    if request.param == "marker":
        settings.CONDUIT_ATTEMPT_CGROUPS = False
    elif containment.containment_mechanism() != "cgroup":
        pytest.skip("this machine offers no writable cgroup v2 to this process")
    assert containment.containment_mechanism() == request.param
    return request.param


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has ended: only its parent's wait is missing)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 :].split()[0] not in (b"Z", b"X")


def ended(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def pid_in(path, within: float = 10.0) -> int:
    deadline = time.monotonic() + within
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, f"{path} was never written"
        time.sleep(0.02)
    return int(path.read_text())


# A daemon in a session of its own (setsid): its process group is not the attempt's.
SETSID_DAEMON = "setsid sh -c 'echo $$ > \"$PIDFILE\"; exec sleep 300' &"
# The same, started by a double fork with an empty environment: no mark, no living parent.
HIDDEN_DAEMON = '(setsid env -i sh -c "echo \\$\\$ > $PIDFILE; exec sleep 300" &) ;'


def command(script: str, pidfile) -> dict:
    return {"argv": ["sh", "-c", script], "env": {"PIDFILE": str(pidfile)}}


def test_ending_a_command_ends_the_daemon_it_started_with_setsid(mechanism, work_tmp):
    pidfile = work_tmp / "daemon.pid"
    execution = CommandExecutor().start(
        work_id=1,
        attempt_id=601,
        binding_settings=command(f"{SETSID_DAEMON} echo started; wait", pidfile),
        inputs=[],
    )
    daemon = pid_in(pidfile)
    assert alive(daemon) and os.getsid(daemon) == daemon != os.getsid(execution.pid)
    execution.kill()  # what the loop does on cancel, a lost lease, a timeout, a stop
    outcome = execution.wait(timeout=10)
    assert outcome is not None and not outcome.ok
    assert ended(daemon) and ended(execution.pid)


def test_a_command_that_exits_leaves_nothing_running(mechanism, work_tmp):
    pidfile = work_tmp / "daemon.pid"
    script = f'{SETSID_DAEMON} while [ ! -s "$PIDFILE" ]; do sleep 0.02; done; exit 0'
    execution = CommandExecutor().start(
        work_id=1, attempt_id=602, binding_settings=command(script, pidfile), inputs=[]
    )
    outcome = execution.wait(timeout=10)
    assert outcome is not None and outcome.ok, outcome
    assert ended(pid_in(pidfile))


def test_ending_a_python_attempt_ends_the_daemon_its_target_started(mechanism, work_tmp):
    pidfile = work_tmp / "daemon.pid"
    executor = PythonExecutor()
    try:
        execution = executor.start(
            work_id=1,
            attempt_id=603,
            binding_settings={
                "target": "tests.worklife.targets:leaves_a_daemon",
                "params": {"pidfile": str(pidfile)},
            },
            inputs=[],
        )
        daemon = pid_in(pidfile)
        assert alive(daemon)
        execution.kill()
        assert execution.wait(timeout=10) is not None
        execution.release()
        assert ended(daemon) and ended(execution.pid)
    finally:
        executor.close()


def test_a_python_attempt_that_returns_leaves_nothing_running_and_the_next_runs_in_a_new_process(
    mechanism, work_tmp
):
    pidfile = work_tmp / "daemon.pid"
    executor = PythonExecutor()
    settings = {
        "target": "tests.worklife.targets:leaves_a_daemon",
        "params": {"pidfile": str(pidfile), "returns": True},
    }
    try:
        execution = executor.start(work_id=1, attempt_id=604, binding_settings=settings, inputs=[])
        outcome = execution.wait(timeout=10)
        assert outcome is not None and outcome.ok, outcome
        execution.release()  # as the loop does once the outcome is in
        assert ended(outcome.result) and ended(execution.pid)
        pidfile.unlink()
        clean = executor.start(
            work_id=1, attempt_id=605, binding_settings={"target": "tests.worklife.targets:noop"}, inputs=[]
        )
        assert clean.pid != execution.pid
        assert clean.wait(timeout=10).ok
        clean.release()
        again = executor.start(
            work_id=1, attempt_id=606, binding_settings={"target": "tests.worklife.targets:noop"}, inputs=[]
        )
        assert again.pid not in (clean.pid, execution.pid)  # a process of its own, every attempt
        assert again.wait(timeout=10).ok
    finally:
        executor.close()


def test_with_cgroups_even_a_double_forked_daemon_without_the_mark_ends(work_tmp):
    if containment.containment_mechanism() != "cgroup":
        pytest.skip("this machine offers no writable cgroup v2 to this process")
    pidfile = work_tmp / "daemon.pid"
    execution = CommandExecutor().start(
        work_id=1,
        attempt_id=607,
        binding_settings=command(f"{HIDDEN_DAEMON} echo started; sleep 300", pidfile),
        inputs=[],
    )
    daemon = pid_in(pidfile)
    with open(f"/proc/{daemon}/environ", "rb") as handle:
        assert b"CONDUIT_PROCESS_MARK" not in handle.read()
    execution.kill()
    assert execution.wait(timeout=10) is not None
    assert ended(daemon) and ended(execution.pid)
    assert not os.path.exists(execution.process.containment.cgroup)


@pytest.mark.django_db(transaction=True)
def test_cancelling_the_work_ends_the_daemon_its_command_started(clock, test_handlers, work_tmp):
    """Through the work loop: an operator's cancel ends the attempt, and with it the daemon."""
    from tests.routing.routerkit import accept, apply, router
    from tests.worklife.enginekit import runner, step_until
    from worklife.lifecycle import work_cancel_in_tx
    from worklife.models import Attempt, Work

    pidfile = work_tmp / "daemon.pid"
    binding = {"executor": "command", "settings": command(f"{SETSID_DAEMON} echo started; wait", pidfile)}
    route = {
        "slot": "daemon",
        "handler": "match",
        "params": {"type": "c.daemon", "keys": ["k:{data.key}"]},
        "binding": "daemon",
        "policy": "queue",
    }
    apply(
        clock,
        json.dumps(
            {"version": 1, "scopes": [{"path": "c", "bindings": {"daemon": binding}, "routes": [route]}]}
        ),
    )
    accept(clock, "c.daemon", {"key": "one"}, scope="c")
    router(clock).route_pending()
    loop = runner(clock)
    try:
        step_until(loop, lambda: bool(loop.running))
        daemon = pid_in(pidfile)
        (work,) = Work.objects.all()
        work_cancel_in_tx(work_id=work.pk, clock=clock)
        step_until(loop, lambda: not loop.running, timeout=10)
        assert ended(daemon)
        assert Attempt.objects.get(work=work).state == "cancelled"
    finally:
        loop.shutdown(grace=0)


DYING_LOOP = """
import os, signal, sys, time
import django
django.setup()
from worklife.executors import CommandExecutor
execution = CommandExecutor().start(
    work_id=1,
    attempt_id=608,
    binding_settings={"argv": ["sh", "-c", sys.argv[1]], "env": {"PIDFILE": sys.argv[2]}},
    inputs=[],
)
while not (os.path.exists(sys.argv[2]) and open(sys.argv[2]).read().strip()):
    time.sleep(0.02)
print(execution.pid, execution.process.containment.cgroup, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_what_a_killed_loops_attempt_left_ends_when_a_loop_next_starts_one(monkeypatch, work_tmp):
    if containment.containment_mechanism() != "cgroup":
        pytest.skip("this machine offers no writable cgroup v2 to this process")
    pidfile = work_tmp / "daemon.pid"
    dying = subprocess.run(
        [sys.executable, "-c", DYING_LOOP, f"{SETSID_DAEMON} wait", str(pidfile)],
        cwd=settings.BASE_DIR,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "conduit_site.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert dying.returncode == -signal.SIGKILL, dying.stderr[-2000:]
    leader, cgroup = dying.stdout.split()
    daemon = pid_in(pidfile)
    assert alive(int(leader)) and alive(daemon) and os.path.isdir(cgroup)
    monkeypatch.setitem(containment.cgroup_state, "swept", None)  # as in a loop just started
    execution = CommandExecutor().start(
        work_id=2, attempt_id=609, binding_settings={"argv": ["true"]}, inputs=[]
    )
    assert execution.wait(timeout=10).ok
    assert ended(daemon) and ended(int(leader))
    assert not os.path.exists(cgroup)


def test_a_lost_attempts_process_is_ended_only_while_its_pid_names_the_process_that_started():
    """The host gives an ended process's pid to another process sooner or later (32,768 pids
    here): a Python attempt's process cannot show its environment, so its command line alone
    matched any Python attempt's, another deployment's included. The start time recorded with
    the pid tells them apart."""
    other = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "worklife.child"], start_new_session=True
    )
    try:
        started = containment.process_started(other.pid)
        assert started is not None
        # The recorded process started at another time: this one only has its pid now.
        containment.lost_attempt_process_kill(other.pid, attempt_id=1, started=started - 1)
        assert not ended(other.pid, within=0.5)
        containment.lost_attempt_process_kill(other.pid, attempt_id=1, started=started)
        assert other.wait(timeout=5) == -signal.SIGKILL
    finally:
        other.kill()
        other.wait()
