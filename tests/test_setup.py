"""The two README commands' parts: find-python, the operator login, serve, deploy checks, README."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import identify_hasher
from django.core.management import call_command, get_commands
from django.core.management.base import CommandError

from causal.models import Event
from conduit_site.management.commands import serve as serve_module
from conduit_site.management.commands.serve import url_for
from conduit_site.supervision.supervisor import clean_stop
from routing.acceptance.services import event_accept
from routing.config.validate import parse_document
from routing.models import RouteRecord
from routing.receivers.services import delivery_map
from routing.receivers.verify import Delivery
from tests.routing.factories import UserFactory, apply_config
from tests.support import child_env, demo_send_module, free_port
from worklife.executors import containment

ROOT = Path(settings.BASE_DIR)
FIND_PYTHON = ROOT / "scripts" / "find-python"
BASH = shutil.which("bash") or "/bin/bash"


# --- scripts/find-python ---------------------------------------------------------------------


def fake_bin(tmp_path: Path, name: str = "bin") -> Path:
    """A PATH directory holding only the few tools find-python needs (no python at all)."""
    directory = tmp_path / name
    directory.mkdir()
    for tool in ("ls", "grep", "sort"):
        (directory / tool).symlink_to(shutil.which(tool))
    return directory


def write_script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{BASH}\n{textwrap.dedent(body)}")
    path.chmod(0o755)
    return path


def run_find_python(path_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BASH, str(FIND_PYTHON)],
        env={"PATH": str(path_dir), "HOME": str(path_dir), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def version_of(python: str) -> tuple[int, int]:
    out = subprocess.run(
        [python, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True, text=True, check=True
    ).stdout
    major, minor = out.split()
    return int(major), int(minor)


def test_find_python_with_only_an_old_python_exits_non_zero_with_the_install_hint(tmp_path):
    bin_dir = fake_bin(tmp_path)
    write_script(bin_dir / "python3.11", 'echo "Python 3.11.2"; exit 1\n')
    write_script(bin_dir / "python3", 'exec "$(dirname "$0")/python3.11" "$@"\n')
    # A pyenv shim that exists but whose version is not activated fails when run.
    write_script(bin_dir / "python3.13", 'echo "pyenv: python3.13: command not found" >&2; exit 127\n')

    result = run_find_python(bin_dir)

    assert result.returncode != 0
    assert result.stdout == ""
    assert "needs Python 3.12 or newer" in result.stderr
    assert "apt-get install python3.13 python3.13-venv" in result.stderr
    assert "pyenv install 3.13" in result.stderr
    assert str(bin_dir / "python3.13") in result.stderr  # says what it tried


def test_find_python_prints_a_real_python_on_path(tmp_path):
    bin_dir = fake_bin(tmp_path)
    (bin_dir / "python3.12").symlink_to(sys.executable)

    result = run_find_python(bin_dir)

    assert result.returncode == 0, result.stderr
    found = result.stdout.strip()
    assert Path(found).is_absolute()
    assert version_of(found) >= (3, 12)


def test_find_python_falls_back_to_the_newest_working_pyenv_version(tmp_path):
    bin_dir = fake_bin(tmp_path)
    root = tmp_path / "pyenv-root"
    write_script(bin_dir / "pyenv", f'[ "$1" = root ] && echo "{root}"\n')
    write_script(bin_dir / "python3.12", "echo 'pyenv: python3.12: command not found' >&2; exit 127\n")
    # 3.13.0 is broken; of the 3.12s, 3.12.10 is newer than 3.12.9 (numeric, not text order).
    write_script(root / "versions" / "3.13.0" / "bin" / "python3", "exit 1\n")
    write_script(root / "versions" / "3.12.9" / "bin" / "python3", "exit 1\n")
    newest = root / "versions" / "3.12.10" / "bin" / "python3"
    newest.parent.mkdir(parents=True)
    newest.symlink_to(sys.executable)
    write_script(root / "versions" / "myenv" / "bin" / "python3", "exit 1\n")

    result = run_find_python(bin_dir)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(newest)
    assert version_of(result.stdout.strip()) >= (3, 12)


# --- manage.py operator ----------------------------------------------------------------------


def run_operator(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("operator", "create", *args, stdout=out, stderr=err, no_color=True)
    return out.getvalue(), err.getvalue()


@pytest.mark.django_db
def test_operator_create_is_idempotent_stores_the_password_hashed_and_prints_it_once():
    printed, note = run_operator("operator", "--role", "admin")
    password = printed.strip()
    assert printed == password + "\n"  # stdout holds the password alone
    assert len(password) >= 24
    assert "Created login 'operator' (role admin)" in note

    user = get_user_model().objects.get(username="operator")
    assert user.is_staff and user.is_active and not user.is_superuser
    assert list(user.groups.values_list("name", flat=True)) == ["admin"]
    assert password not in user.password
    identify_hasher(user.password)  # a real hash, not the password
    assert user.check_password(password)
    stored = user.password

    printed_again, note_again = run_operator("operator", "--role", "admin")

    assert printed_again == ""
    assert "exists; nothing changed (role admin)" in note_again
    assert get_user_model().objects.filter(username="operator").count() == 1
    user.refresh_from_db()
    assert user.password == stored


@pytest.mark.django_db
def test_operator_create_reset_password_prints_a_new_one_once():
    old = run_operator("operator", "--role", "admin")[0].strip()

    new = run_operator("operator", "--reset-password")[0].strip()

    user = get_user_model().objects.get(username="operator")
    assert new and new != old
    assert user.check_password(new) and not user.check_password(old)


@pytest.mark.django_db
def test_operator_create_takes_the_password_from_a_file_and_prints_nothing(tmp_path):
    secret_file = tmp_path / "pw"
    secret_file.write_text("correct horse battery staple\n")

    printed, _ = run_operator("alice", "--role", "viewer", "--password-file", str(secret_file))

    assert printed == ""
    assert get_user_model().objects.get(username="alice").check_password("correct horse battery staple")


@pytest.mark.django_db
def test_operator_create_reads_the_password_from_stdin(monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("a much longer passphrase\n"))

    run_operator("bob", "--role", "operator", "--password-file", "-")

    assert get_user_model().objects.get(username="bob").check_password("a much longer passphrase")


@pytest.mark.django_db
def test_operator_create_sets_a_given_password_on_an_existing_login(tmp_path):
    run_operator("operator", "--role", "admin")
    secret_file = tmp_path / "pw"
    secret_file.write_text("another fine passphrase")

    _, note = run_operator("operator", "--password-file", str(secret_file))

    assert "password was set" in note
    assert get_user_model().objects.get(username="operator").check_password("another fine passphrase")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "file_text", "message"),
    [
        (["bad name!", "--role", "viewer"], None, "USERNAME: Enter a valid username"),
        (["", "--role", "viewer"], None, "USERNAME: This field cannot be blank"),
        (
            ["carol", "--role", "viewer", "--password-file", "{file}"],
            "short\n",
            "--password-file {file}: This password is too short",
        ),
        (
            ["carol", "--role", "viewer", "--password-file", "{file}"],
            "\n",
            "--password-file: '{file}' is empty",
        ),
        (
            ["carol", "--role", "viewer", "--password-file", "{missing}"],
            None,
            "--password-file: cannot read '{missing}'",
        ),
        (["carol"], None, "--role: a new login needs a role: viewer, operator, admin"),
        (["carol", "--role", "root"], None, "--role: unknown role 'root': choose viewer, operator, admin"),
    ],
)
def test_operator_create_refuses_bad_input_naming_the_field_and_stores_nothing(
    tmp_path, args, file_text, message
):
    secret_file = tmp_path / "pw"
    if file_text is not None:
        secret_file.write_text(file_text)
    names = {"file": str(secret_file), "missing": str(tmp_path / "missing")}

    with pytest.raises(CommandError) as raised:
        run_operator(*[arg.format(**names) for arg in args])

    assert message.format(**names) in str(raised.value)
    assert get_user_model().objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("role", "staff", "can_read", "can_skip", "can_apply", "can_manage_logins"),
    [
        ("viewer", False, True, False, False, False),
        ("operator", False, True, True, False, False),
        ("admin", True, True, True, True, True),
    ],
)
def test_operator_create_gives_the_role_its_permissions_and_never_superuser(
    role, staff, can_read, can_skip, can_apply, can_manage_logins
):
    run_operator("someone", "--role", role)

    user = get_user_model().objects.get(username="someone")
    assert (user.is_staff, user.is_superuser) == (staff, False)
    assert user.has_perm("routing.view_event") is can_read
    assert user.has_perm("routing.accept_event") is can_skip  # operators accept, viewers do not
    assert all(
        user.has_perm(p) is can_skip
        for p in (
            "routing.skip_event",
            "routing.reroute_event",
            "worklife.cancel_work",
            "worklife.retry_work",
            "worklife.send_input",
            "worklife.create_work",
            "worklife.rebind_work",
        )
    )
    assert user.has_perm("routing.apply_configuration") is can_apply
    assert user.has_perm("auth.change_user") is can_manage_logins


@pytest.mark.django_db
def test_operator_create_with_a_role_changes_an_existing_logins_role_idempotently():
    UserFactory(username="legacy", is_staff=True, is_superuser=True, permissions=())  # the old rule

    _, note = run_operator("legacy", "--role", "viewer")

    user = get_user_model().objects.get(username="legacy")
    assert "its role is now viewer" in note
    assert (user.is_staff, user.is_superuser) == (False, False)
    assert not user.has_perm("routing.skip_event")
    _, note = run_operator("legacy", "--role", "admin")
    _, again = run_operator("legacy", "--role", "admin")
    _, kept = run_operator("legacy")
    user = get_user_model().objects.get(username="legacy")
    assert list(user.groups.values_list("name", flat=True)) == ["admin"] and user.is_staff
    assert "its role is now admin" in note
    assert "nothing changed (role admin)" in again and "nothing changed (role admin)" in kept


def test_operator_create_refuses_both_a_file_and_a_reset(tmp_path):
    result = subprocess.run(
        [sys.executable, "manage.py", "operator", "create", "x", "--password-file", "f", "--reset-password"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "not allowed with argument" in result.stderr


# --- manage.py serve -------------------------------------------------------------------------


def test_serve_fails_clearly_when_route_loop_is_missing(monkeypatch):
    monkeypatch.setattr(serve_module, "get_commands", lambda: {"serve": "routing"})

    with pytest.raises(CommandError, match="no 'route_loop' management command.*--no-router"):
        call_command("serve", "--port", str(free_port()))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "0"], "--port: must be between 1 and 65535, got 0"),
        (["--port", "70000"], "--port: must be between 1 and 65535, got 70000"),
        (["--host", " "], "--host: must not be empty"),
        (["--stop-timeout", "0"], "--stop-timeout: must be positive"),
        (["--workers", "0"], "--workers: must be at least 1, got 0"),
        (["--workers", "2", "--host", "::1"], "--workers: several web server processes need an IPv4 --host"),
    ],
)
def test_serve_refuses_bad_arguments_naming_them(args, message):
    with pytest.raises(CommandError, match=re.escape(message)):
        call_command("serve", "--no-router", *args)


def test_serve_refuses_a_port_already_in_use():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(CommandError, match=f"cannot listen on 127.0.0.1:{port}"):
            call_command("serve", "--no-router", "--port", str(port))


def _serve_web_processes(tmp_path, *options: str, requests: int = 4) -> tuple[str, int]:
    """Start ``serve --no-router`` with ``options``, send ``requests`` requests (each must be
    answered), stop it with SIGTERM (it must exit cleanly); returns its banner and how many
    web processes (daphne, run by ``conduit_site.edge``) it ran."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--no-router", *options, "--port", str(port)],
        cwd=ROOT,
        env=child_env(CONDUIT_VAR_DIR=str(tmp_path)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        banner = server.stdout.readline()
        daphnes = subprocess.run(
            ["pgrep", "-P", str(server.pid), "-f", "conduit_site.edge"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.split()
        for _ in range(requests):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/openapi.json", timeout=30) as answer:
                assert answer.status == 200
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
    assert server.returncode == 0, err
    return banner, len(daphnes)


@pytest.mark.django_db(transaction=True)
def test_serve_workers_share_one_port(tmp_path):
    """``serve --workers 2`` runs two daphne processes accepting on one port; both answer, and
    a stop signal stops them both cleanly."""
    banner, daphnes = _serve_web_processes(tmp_path, "--workers", "2")
    assert "Conduit console" in banner and "web processes: 2;" in banner
    assert daphnes == 2


@pytest.mark.parametrize(
    ("cpus", "host", "expected"),
    [(2, "127.0.0.1", 2), (1, "127.0.0.1", 1), (16, "0.0.0.0", 4), (None, "127.0.0.1", 1), (8, "::1", 1)],
)
def test_serve_runs_one_web_process_per_cpu_by_default(monkeypatch, cpus, host, expected):
    from conduit_site.management.commands import serve

    monkeypatch.setattr(serve.os, "process_cpu_count", lambda: cpus)
    assert serve.default_workers(host) == expected


@pytest.mark.django_db(transaction=True)
def test_serve_without_workers_starts_the_default_number(tmp_path):
    from conduit_site.management.commands.serve import default_workers

    expected = default_workers("127.0.0.1")
    banner, daphnes = _serve_web_processes(tmp_path, requests=1)
    assert f"web processes: {expected};" in banner
    assert daphnes == expected


def test_each_worker_listens_on_a_socket_of_its_own_on_one_port():
    """``--workers N`` opens N sockets on the port (SO_REUSEPORT), so that the kernel spreads
    connections over the processes; a port another program holds is refused clearly."""
    import socket

    from conduit_site.management.commands.serve import listening_sockets

    port = free_port()
    listeners = listening_sockets("127.0.0.1", port, 3)
    try:
        assert len({listener.fileno() for listener in listeners}) == 3
        for listener in listeners:
            assert listener.getsockname() == ("127.0.0.1", port)
            assert listener.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
            assert listener.get_inheritable()
        with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
            assert client.getpeername() == ("127.0.0.1", port)
    finally:
        for listener in listeners:
            listener.close()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        with pytest.raises(CommandError, match="cannot listen on"):
            listening_sockets("127.0.0.1", busy.getsockname()[1], 2)


def test_serve_fails_clearly_when_the_database_cannot_be_read():
    env = {**os.environ, "DATABASE_URL": "postgres://postgres@127.0.0.1:1/nowhere"}

    result = subprocess.run(
        [sys.executable, "manage.py", "serve", "--no-router", "--port", str(free_port())],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 1
    assert "cannot read the postgresql database nowhere (DATABASE_URL)" in result.stderr
    assert "Conduit console" not in result.stdout


def test_serve_url_and_clean_stop_statuses():
    assert url_for("127.0.0.1", 8000) == "http://127.0.0.1:8000/"
    assert url_for("::1", 8000) == "http://[::1]:8000/"
    assert clean_stop(0) and clean_stop(-signal.SIGTERM) and clean_stop(128 + signal.SIGINT)
    assert not clean_stop(1) and not clean_stop(-signal.SIGKILL)


@pytest.mark.slow
def test_serve_starts_on_a_free_port_answers_login_and_stops_cleanly_on_sigterm(tmp_path):
    var_dir = tmp_path / "var"
    var_dir.mkdir()
    env = {
        **os.environ,
        "CONDUIT_VAR_DIR": str(var_dir),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'serve.sqlite3'}",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("TEST_DATABASE_NAME", None)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=180,
    )
    port = free_port()
    # The router loop runs beside the console once the route_loop command exists.
    router_args = [] if "route_loop" in get_commands() else ["--no-router"]
    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--port", str(port), *router_args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(server.stdout), daemon=True)
    reader.start()
    try:
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 60
        while not any(f"Conduit console: {url}" in line for line in lines):
            assert server.poll() is None, "".join(lines)
            assert time.monotonic() < deadline, "".join(lines)
            time.sleep(0.1)

        status, location = get_without_redirects(f"{url}login/")
        assert status == 200 or (status == 302 and "/login/" in location), (status, location)

        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0, "".join(lines)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    reader.join(timeout=5)
    with socket.socket() as sock:  # the console child is gone too: nothing listens any more
        assert sock.connect_ex(("127.0.0.1", port)) != 0


def _child_pid(parent: int, name: str) -> int | None:
    found = subprocess.run(
        ["pgrep", "-P", str(parent), "-f", name], capture_output=True, text=True, check=False
    )
    pids = [int(pid) for pid in found.stdout.split()]
    return pids[0] if pids else None


@pytest.mark.slow
def test_serve_restarts_killed_loops_while_the_web_keeps_answering(tmp_path):
    """kill -9 of the work loop and the route loop under a real serve: /healthz keeps
    answering, both loops are back within the first backoff, and the restarts are logged and
    recorded for doctor and the banner."""
    from causal.models import KV
    from conduit_site.supervision.restarts import RESTARTS_NAMESPACE

    database = tmp_path / "serve.sqlite3"
    env = {
        **os.environ,
        "CONDUIT_VAR_DIR": str(tmp_path),
        "DATABASE_URL": f"sqlite:///{database}",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("TEST_DATABASE_NAME", None)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=180,
    )
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--port", str(port), "--workers", "1", "--slots", "1"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(server.stdout), daemon=True)
    reader.start()
    try:
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 90
        while not any(f"Conduit console: {url}" in line for line in lines):
            assert server.poll() is None, "".join(lines)
            assert time.monotonic() < deadline, "".join(lines)
            time.sleep(0.1)
        killed = {name: _child_pid(server.pid, name) for name in ("work_loop", "route_loop")}
        assert all(killed.values()), killed
        for pid in killed.values():
            os.kill(pid, signal.SIGKILL)

        # Back within the first backoff (1 s) plus a start; bounded, polled.
        deadline = time.monotonic() + 60
        while True:
            with urllib.request.urlopen(f"{url}healthz", timeout=10) as response:
                assert response.status == 200
            back = {name: _child_pid(server.pid, name) for name in killed}
            if all(pid and pid != killed[name] for name, pid in back.items()):
                break
            assert server.poll() is None, "".join(lines)
            assert time.monotonic() < deadline, "".join(lines)
            time.sleep(0.2)

        output = "".join(lines)
        for name in killed:
            assert f"{name} exited with status -9 after" in output
            assert f"Restarting {name} (restart 1)." in output
        with sqlite3.connect(database) as db:
            rows = db.execute(
                f"SELECT value FROM {KV._meta.db_table} WHERE namespace = ?", (RESTARTS_NAMESPACE,)
            ).fetchall()
        recorded = {json.loads(value)["child"]: json.loads(value) for (value,) in rows}
        assert {name: (item["status"], item["restarts"]) for name, item in recorded.items()} == {
            "work_loop": (-9, 1),
            "route_loop": (-9, 1),
        }

        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0, "".join(lines)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    reader.join(timeout=5)


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def get_without_redirects(url: str) -> tuple[int, str]:
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(url, timeout=10) as response:
            return response.status, ""
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Location", "")


# --- manage.py check --deploy ----------------------------------------------------------------


def test_check_deploy_passes_with_production_settings():
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DEBUG", "ALLOWED_HOSTS", "SECRET_KEY", "DJANGO_SETTINGS_MODULE"}
    }
    env.update(CONDUIT_ENV="production", SECRET_KEY=secrets.token_urlsafe(50), ALLOWED_HOSTS="example.com")

    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "DEBUG"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout
    assert "WARNING" not in result.stdout + result.stderr


def test_production_settings_refuse_to_start_without_a_secret_key():
    env = {key: value for key, value in os.environ.items() if key not in {"SECRET_KEY"}}
    env["CONDUIT_ENV"] = "production"

    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )

    assert result.returncode != 0
    assert "SECRET_KEY must be set when CONDUIT_ENV=production" in result.stderr


# --- demo/events: the README tour ----------------------------------------------------------

# What the demo configuration does with each demo Event (the effective policy routing records),
# sent in this order, the README's: a comment or a resolution before its opening Event would be
# unmatched, since their routes start no Work.
DEMO_EVENT_POLICIES = {
    "pr-opened": ("pull-requests", "start"),
    "pr-synchronize": ("pull-requests", "queue"),
    "pr-comment": ("pr-comments", "queue"),
    "issue-opened": ("", "unmatched"),
    "slack-message": ("chat", "start"),
    "slack-crash": ("chat", "start"),
    "slack-bot-message": ("bot-noise", "drop"),
    "ops-alert": ("alerts", "start"),
    "ops-alert-resolved": ("resolved", "queue"),
    "ops-heartbeat": ("heartbeats", "drop"),
}


@pytest.mark.django_db(transaction=True)
def test_demo_events_are_accepted_and_routed_by_the_demo_configuration(clock):
    apply_config((ROOT / "demo" / "conduit.yaml").read_text(encoding="utf-8"), clock)
    events_dir = ROOT / "demo" / "events"
    assert sorted(path.stem for path in events_dir.glob("*.json")) == sorted(DEMO_EVENT_POLICIES)

    accepted = {}
    for name in DEMO_EVENT_POLICIES:
        payload = json.loads((events_dir / f"{name}.json").read_text(encoding="utf-8"))
        result = event_accept(payload=payload, clock=clock)
        assert result.created, name
        accepted[name] = result.event.seq
    call_command("route_loop", "--drain", stdout=io.StringIO(), stderr=io.StringIO())

    records = {record.event_id: record for record in RouteRecord.objects.all()}
    decided = {name: (records[seq].route, records[seq].policy) for name, seq in accepted.items()}
    assert decided == DEMO_EVENT_POLICIES
    # The pull request's later input and its comment joined the Work the opening started.
    pr_work = {records[accepted[name]].work_id for name in ("pr-opened", "pr-synchronize", "pr-comment")}
    assert len(pr_work) == 1 and None not in pr_work


# --- demo/deliveries and demo/send: the tour through the receivers -------------------------------


def demo_deliveries() -> dict[str, Path]:
    return {path.stem: path for path in sorted((ROOT / "demo" / "deliveries").glob("*/*.json"))}


def test_each_demo_delivery_maps_to_its_demo_event():
    """demo/deliveries/ hold deliveries in the providers' documented shapes; each maps, through its
    receiver of the demo configuration, to the Event of the same name in demo/events/ (what the
    tour sends without HTTP)."""
    receivers = {
        spec.name: spec for spec in parse_document((ROOT / "demo" / "conduit.yaml").read_text()).receivers
    }
    deliveries = demo_deliveries()
    assert sorted(deliveries) == sorted(DEMO_EVENT_POLICIES)
    for stem, path in deliveries.items():
        headers = demo_send_module().saved_headers(path)
        delivery = Delivery.of(path.read_bytes(), [("Content-Type", "application/json"), *headers])
        mapped = delivery_map(spec=receivers[path.parent.name], delivery=delivery, clock=None, verify=False)
        expected = json.loads((ROOT / "demo" / "events" / f"{stem}.json").read_text(encoding="utf-8"))
        assert list(mapped.events) == [expected], stem


@pytest.mark.django_db(transaction=True)
def test_demo_deliveries_signed_by_demo_send_are_accepted_and_routed(
    clock, monkeypatch, client, settings, tmp_path
):
    """The tour through the receivers: each delivery, signed by demo/send's signer with the demo
    secret, is accepted by the demo configuration's receivers and routed as the README says."""
    secret = "demo-secret-for-the-test"
    settings.CONDUIT_SECRETS_DIR = tmp_path
    (tmp_path / "demo-hook-secret").write_text(f"{secret}\n")
    monkeypatch.setenv("CONDUIT_SECRETS_DIR", str(tmp_path))
    send = demo_send_module()
    apply_config((ROOT / "demo" / "conduit.yaml").read_text(encoding="utf-8"), clock)
    deliveries = demo_deliveries()

    accepted = {}
    for stem in DEMO_EVENT_POLICIES:
        path = deliveries[stem]
        body = path.read_bytes()
        headers = {
            **dict(send.saved_headers(path)),
            **send.signed(path.parent.name, body, send.demo_secret()),
        }
        content_type = headers.pop("Content-Type", "application/json")
        response = client.post(f"/hooks/{path.parent.name}", body, content_type=content_type, headers=headers)
        assert response.status_code == 201, (stem, response.content)
        (item,) = response.json()["events"]
        accepted[stem] = item["seq"]
    call_command("route_loop", "--drain", stdout=io.StringIO(), stderr=io.StringIO())

    records = {record.event_id: record for record in RouteRecord.objects.all()}
    assert {
        name: (records[seq].route, records[seq].policy) for name, seq in accepted.items()
    } == DEMO_EVENT_POLICIES
    pr_work = {records[accepted[name]].work_id for name in ("pr-opened", "pr-synchronize", "pr-comment")}
    assert len(pr_work) == 1 and None not in pr_work


# --- README ----------------------------------------------------------------------------------


def test_readme_lists_every_environment_variable_of_the_settings():
    source = (ROOT / "conduit_site" / "settings.py").read_text(encoding="utf-8")
    names = set(
        re.findall(
            r"""(?:getenv\(|environ(?:\.get)?\(|environ\[|env_\w+\()\s*["']([A-Z][A-Z0-9_]+)["']""", source
        )
    )
    readme = (ROOT / "README.md").read_text(encoding="utf-8")

    assert {"DATABASE_URL", "SECRET_KEY", "CONDUIT_VAR_DIR"} <= names
    missing = sorted(name for name in names if f"`{name}`" not in readme)
    assert missing == [], f"README.md 'Configuration' does not list {missing}"


def test_readme_opens_with_the_two_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    head = readme[: readme.index("\n## ", readme.index("make test"))]

    assert "make run" in head and "make test" in head
    for target in ("run", "test", "test-postgres", "lint"):
        assert re.search(rf"^{target}:", (ROOT / "Makefile").read_text(encoding="utf-8"), re.MULTILINE), (
            target
        )


@pytest.mark.django_db
def test_the_readme_says_metrics_answer_404_until_turned_on(client, settings):
    """``make run`` sets neither metrics setting: its /metrics is a 404, and the README's
    Watching paragraph, which lists /metrics for machines, says what turns it on."""
    settings.CONDUIT_METRICS = False
    settings.CONDUIT_METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 404
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    watching = " ".join(readme[readme.index("**Watching.**") : readme.index("**Housekeeping.**")].split())
    assert (
        "`GET /metrics` (Prometheus: a 404 until `CONDUIT_METRICS_TOKEN` or `CONDUIT_METRICS=on`" in watching
    )


def test_the_readme_is_for_users_short_and_its_links_resolve():
    """At most 450 lines, no benchmark diary (figures live in docs/performance.md), and every
    relative link it makes names a file of the repository."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 450
    assert not re.search(r"\bissue #?\d+", readme, re.IGNORECASE)
    assert (ROOT / "docs" / "performance.md").is_file()
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", readme):
        assert (ROOT / target).exists(), target


@pytest.mark.django_db(transaction=True)
def test_make_run_shares_the_demo_secret_with_receivers_test_and_its_port_with_demo_send(tmp_path):
    """``make run PORT=…`` writes the demo secret where every process reads it and the address
    it serves where demo/send finds it: ``receivers test`` in another shell verifies a delivery,
    and demo/send without --url reaches the server."""
    var = tmp_path / "var"
    port = free_port()
    env = child_env(CONDUIT_VAR_DIR=str(var), LOG_LEVEL="WARNING")
    env.pop("CONDUIT_DEMO_HOOK_SECRET", None)
    # -o: the virtualenv is the one these tests run in, never rebuilt here.
    server = subprocess.Popen(
        ["make", "-o", ".venv/.requirements-installed", "run", f"PORT={port}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert any("Conduit console" in line for line in server.stdout)
        delivery = ROOT / "demo" / "deliveries" / "alertmanager" / "ops-alert.json"
        secret = (var / "secrets" / "demo-hook-secret").read_text(encoding="utf-8").strip()
        (authorization,) = demo_send_module().signed("alertmanager", delivery.read_bytes(), secret).items()
        tested = subprocess.run(
            [
                sys.executable,
                "manage.py",
                "receivers",
                "test",
                "alertmanager",
                str(delivery),
                "--header",
                f"{authorization[0]}:{authorization[1]}",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        sent = subprocess.run(
            [sys.executable, "demo/send", str(delivery)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        # Not stopped within the minute (a loaded machine): ended below.
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.communicate(timeout=60)
        # Nothing of it may outlive the test: its loops would go on routing and running Work in
        # the test database under the next tests.
        # (containment's own sweep: every process whose environment carries the mark, and theirs).
        containment.end_marked(f"CONDUIT_VAR_DIR={var}".encode(), None)
        server.kill()
        server.communicate(timeout=30)
    assert tested.returncode == 0, tested.stderr + tested.stdout
    assert "secret_unavailable" not in tested.stdout
    assert sent.returncode == 0 and ": 201 " in sent.stdout, sent.stdout + sent.stderr
    assert Event.objects.filter(accepted_by="receiver:alertmanager").count() == 1
