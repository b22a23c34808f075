"""Attempts run contained (issue 36): a child's environment is an allow-list and its binding's
``env`` (item 1); output is read in bounded lines and kept in a bounded tail (item 4); ending
an attempt ends every process it started, ``setsid`` included (item 6). Real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from django.conf import settings

from worklife.executors import CommandExecutor, PythonExecutor, containment, output

SERVER_SECRETS = {
    "SECRET_KEY": "django-secret-key-do-not-leak",
    "DATABASE_URL": "postgres://conduit:db-password-do-not-leak@db.internal:5432/conduit",
    "REDIS_URL": "redis://:redis-password-do-not-leak@cache:6379/0",
    "CONDUIT_WEBHOOK_SECRET": "made-up-server-secret-do-not-leak",
    "CONDUIT_ENV": "production-do-not-leak",
    "CONDUIT_VAR_DIR": "/srv/conduit-var-do-not-leak",
    "AWS_SECRET_ACCESS_KEY": "aws-key-do-not-leak",
}
ALLOWED = {
    "LANG": "C.UTF-8",
    "LC_TIME": "C",
    "LC_ALL": "C.UTF-8",
    "TZ": "Europe/Paris",
    "HOME": "/home/conduit-test",
}
BINDING_ENV = {"GREETING": "hi", "CONDUIT_API_URL": "http://conduit.example/api"}
PROTOCOL = {"CONDUIT_WORK_ID", "CONDUIT_ATTEMPT_ID", "CONDUIT_CALL_FD", "CONDUIT_PROCESS_MARK"}


@pytest.fixture
def server_environment(monkeypatch, tmp_path):
    for name, value in {**SERVER_SECRETS, **ALLOWED, "TMPDIR": str(tmp_path)}.items():
        monkeypatch.setenv(name, value)
    return {**ALLOWED, "TMPDIR": str(tmp_path)}


def assert_contained(env: dict[str, str], allowed: dict[str, str], *, also: set[str]) -> None:
    text = repr(env)
    for name, value in SERVER_SECRETS.items():
        assert name not in env
        assert value not in text, f"{name}'s value reached the child"
    for name, value in {**allowed, **BINDING_ENV}.items():
        assert env.get(name) == value, name
    assert {name for name in env if name.startswith("CONDUIT_")} == PROTOCOL | {"CONDUIT_API_URL"}
    expected = {"PATH", *allowed, *BINDING_ENV, *PROTOCOL, *also}
    unexpected = {name for name in env if name not in expected and not name.startswith("LC_")}
    assert not unexpected, f"not on the allow-list: {sorted(unexpected)}"


# --- item 1: the environment ------------------------------------------------------------------


def test_i36_1_a_command_gets_the_allow_list_and_its_binding_env_only(server_environment):
    execution = CommandExecutor().start(
        work_id=5,
        attempt_id=50,
        binding_settings={"argv": ["sh", "-c", "env"], "env": BINDING_ENV},
        inputs=[],
    )
    outcome = execution.wait(timeout=30)
    assert outcome is not None and outcome.ok, outcome
    stdout, _ = execution.output()
    env = dict(line.partition("=")[::2] for line in stdout.splitlines() if "=" in line)
    # sh sets PWD (and some shells SHLVL, OLDPWD and _); PYTHONPATH names the project.
    assert_contained(env, server_environment, also={"PYTHONPATH", "PWD", "SHLVL", "OLDPWD", "_"})
    assert env["CONDUIT_WORK_ID"] == "5" and env["CONDUIT_ATTEMPT_ID"] == "50"


def test_i36_1_a_python_target_gets_the_allow_list_its_binding_env_and_still_imports(server_environment):
    executor = PythonExecutor()
    try:
        execution = executor.start(
            work_id=6,
            attempt_id=60,
            binding_settings={"target": "tests.worklife.i36_targets:environment", "env": BINDING_ENV},
            inputs=[],
        )
        outcome = execution.wait(timeout=30)
        assert outcome is not None and outcome.ok, outcome
        env = outcome.result
        assert_contained(env, server_environment, also={"PYTHONPATH", "PYTHONUNBUFFERED"})
        assert env["CONDUIT_WORK_ID"] == "6" and env["CONDUIT_ATTEMPT_ID"] == "60"
        execution.release()
        # A worker kept for reuse runs the next attempt with that attempt's ids; a binding
        # with another env gets a worker of its own.
        again = executor.start(
            work_id=7,
            attempt_id=70,
            binding_settings={"target": "tests.worklife.i36_targets:environment", "env": BINDING_ENV},
            inputs=[],
        )
        assert again.wait(timeout=30).result["CONDUIT_ATTEMPT_ID"] == "70"
        assert again.pid == execution.pid
        again.release()
        other = executor.start(
            work_id=8,
            attempt_id=80,
            binding_settings={"target": "tests.worklife.i36_targets:environment", "env": {"OTHER": "1"}},
            inputs=[],
        )
        result = other.wait(timeout=30).result
        assert other.pid != execution.pid
        assert result["OTHER"] == "1" and "GREETING" not in result
    finally:
        executor.close()


@pytest.mark.parametrize("executor", [CommandExecutor, PythonExecutor])
def test_i36_1_the_env_setting_is_a_mapping_of_names_to_strings(executor):
    base = {"argv": ["true"]} if executor is CommandExecutor else {"target": "a.b:c"}
    assert list(executor.validate_settings({**base, "env": {"A": "1", "LANG": "C"}})) == []
    assert list(executor.validate_settings({**base, "env": ["A=1"]})) == [
        ("env", "expected a mapping of names to strings")
    ]
    assert list(
        executor.validate_settings({**base, "env": {"N": 3, "A=B": "x", "CONDUIT_ATTEMPT_ID": "9"}})
    ) == [
        ("env.N", "expected a string (quote numbers)"),
        ("env.A=B", "not a variable name"),
        ("env.CONDUIT_ATTEMPT_ID", "set by the attempt protocol (a binding cannot set it)"),
    ]


# --- item 4: bounded output -------------------------------------------------------------------

FLOOD = 50_000_000
OUTPUT_TAIL = LINE_LIMIT = 64 * 1024  # the README's figures
CALL_LIMIT = 4 * 1024 * 1024


def test_i36_4_a_flood_of_output_keeps_the_loops_memory_flat_and_its_tail_bounded_and_marked():
    """Real children write 50 MB each (on standard output or error without a newline, as lines,
    as one over-long call, one print, one result) to executors in a process of their own, which
    reports how far its peak resident set rose for each."""
    run = subprocess.run(
        [sys.executable, "-m", "tests.worklife.i36_output_memory", str(FLOOD)],
        cwd=settings.BASE_DIR,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "conduit_site.settings"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    reports = {r["scenario"]: r for r in map(json.loads, run.stdout.splitlines())}
    assert len(reports) == 8
    for report in reports.values():
        # Unbounded, reading 50 MB without a newline took 97 MiB or more (two copies).
        assert report["peak_rise_kib"] < 24 * 1024, report
        assert report["stdout_bytes"] <= OUTPUT_TAIL and report["stderr_bytes"] <= OUTPUT_TAIL, report
    mark = f" … [cut {FLOOD - LINE_LIMIT} bytes]"
    assert reports["command_stdout"]["ok"] and reports["command_stdout"]["stdout_end"].endswith(mark)
    assert reports["command_stderr"]["ok"] and reports["command_stderr"]["stderr_end"].endswith(mark)
    assert reports["command_stdout_lines"]["stdout_bytes"] == OUTPUT_TAIL
    assert reports["python_fd1"]["ok"] and reports["python_fd1"]["stdout_end"].endswith(mark + "\n")
    assert reports["python_print"]["ok"] and reports["python_print"]["stdout_end"].endswith("z\nthe end\n")
    refused = f"a call line longer than {CALL_LIMIT} bytes (the limit) was refused"
    for name in ("command_call_fd", "command_call_on_stdout", "python_result"):
        assert not reports[name]["ok"] and reports[name]["error"] == refused, reports[name]
    assert (output.OUTPUT_TAIL, output.OUTPUT_LINE_LIMIT) == (OUTPUT_TAIL, LINE_LIMIT)
    assert output.call_line_limit() == CALL_LIMIT


def test_a_call_line_under_its_limit_is_read_whole():
    script = "import json; print('@conduit ' + json.dumps({'op': 'complete', 'result': 'r' * 3_000_000}))"
    execution = CommandExecutor().start(
        work_id=9, attempt_id=90, binding_settings={"argv": [sys.executable, "-c", script]}, inputs=[]
    )
    outcome = execution.wait(timeout=30)
    assert outcome is not None and outcome.ok, outcome
    assert outcome.result == "r" * 3_000_000


def test_calls_past_the_pending_bound_wait_until_the_loop_takes_them():
    count = output.PENDING_CALLS * 3
    script = (
        "import json, os\n"
        "out = os.fdopen(int(os.environ['CONDUIT_CALL_FD']), 'w')\n"
        f"for n in range({count}):\n"
        "    out.write(json.dumps({'op': 'received', 'seq': n}) + '\\n')\n"
        "out.flush()\n"
    )
    execution = CommandExecutor().start(
        work_id=9, attempt_id=91, binding_settings={"argv": [sys.executable, "-c", script]}, inputs=[]
    )
    assert execution.wait(timeout=1) is None  # it waits for the loop, holding no more than the bound
    taken = []
    deadline = time.monotonic() + 30
    while execution.poll() is None and time.monotonic() < deadline:
        calls = execution.take_calls()
        assert len(calls) <= output.PENDING_CALLS
        taken += calls
        time.sleep(0.05)
    taken += execution.take_calls()
    assert execution.poll() is not None and execution.poll().ok
    assert [call["seq"] for call in taken] == list(range(count))


# --- item 6: ending an attempt ends every process it started ------------------------------------


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


def test_i36_6_ending_a_command_ends_the_daemon_it_started_with_setsid(mechanism, tmp_path):
    pidfile = tmp_path / "daemon.pid"
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


def test_i36_6_a_command_that_exits_leaves_nothing_running(mechanism, tmp_path):
    pidfile = tmp_path / "daemon.pid"
    script = f'{SETSID_DAEMON} while [ ! -s "$PIDFILE" ]; do sleep 0.02; done; exit 0'
    execution = CommandExecutor().start(
        work_id=1, attempt_id=602, binding_settings=command(script, pidfile), inputs=[]
    )
    outcome = execution.wait(timeout=10)
    assert outcome is not None and outcome.ok, outcome
    assert ended(pid_in(pidfile))


def test_i36_6_ending_a_python_attempt_ends_the_daemon_its_target_started(mechanism, tmp_path):
    pidfile = tmp_path / "daemon.pid"
    executor = PythonExecutor()
    try:
        execution = executor.start(
            work_id=1,
            attempt_id=603,
            binding_settings={
                "target": "tests.worklife.i36_targets:leaves_a_daemon",
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


def test_i36_6_a_python_attempt_that_returns_leaves_nothing_running_and_its_worker_is_not_reused(
    mechanism, tmp_path
):
    pidfile = tmp_path / "daemon.pid"
    executor = PythonExecutor()
    settings = {
        "target": "tests.worklife.i36_targets:leaves_a_daemon",
        "params": {"pidfile": str(pidfile), "returns": True},
    }
    try:
        execution = executor.start(work_id=1, attempt_id=604, binding_settings=settings, inputs=[])
        outcome = execution.wait(timeout=10)
        assert outcome is not None and outcome.ok, outcome
        execution.release()  # the loop gives the worker back once the outcome is in
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
        assert again.pid == clean.pid  # a worker with nothing left behind is reused
        again.wait(timeout=10)
    finally:
        executor.close()


def test_i36_6_with_cgroups_even_a_double_forked_daemon_without_the_mark_ends(tmp_path):
    if containment.containment_mechanism() != "cgroup":
        pytest.skip("this machine offers no writable cgroup v2 to this process")
    pidfile = tmp_path / "daemon.pid"
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
def test_i36_6_cancelling_the_work_ends_the_daemon_its_command_started(clock, test_handlers, tmp_path):
    """Through the work loop: an operator's cancel ends the attempt, and with it the daemon."""
    from tests.routing.routerkit import accept, apply, router
    from tests.worklife.enginekit import runner, step_until
    from worklife.lifecycle import work_cancel_in_tx
    from worklife.models import Attempt, Work

    pidfile = tmp_path / "daemon.pid"
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


def test_i36_6_what_a_killed_loops_attempt_left_ends_when_a_loop_next_starts_one(monkeypatch, tmp_path):
    if containment.containment_mechanism() != "cgroup":
        pytest.skip("this machine offers no writable cgroup v2 to this process")
    pidfile = tmp_path / "daemon.pid"
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
    monkeypatch.setitem(containment._cgroup_state, "swept", None)  # as in a loop just started
    execution = CommandExecutor().start(
        work_id=2, attempt_id=609, binding_settings={"argv": ["true"]}, inputs=[]
    )
    assert execution.wait(timeout=10).ok
    assert ended(daemon) and ended(int(leader))
    assert not os.path.exists(cgroup)
