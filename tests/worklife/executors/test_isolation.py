"""A Work's processes cannot read the server's secrets: not the work loop's environment or
memory, not pid 1's environment, not the database file, var/ or the secrets folder."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys

import pytest
from django.conf import settings
from django.db import connection

from causal.clock import system_clock
from infra.private_files import private_directory, private_file
from tests.routing.routerkit import apply, router
from tests.support import child_env, run_manage
from tests.worklife.enginekit import document, send, work_of
from tests.worklife.isolationkit import PEEK, UNPRIVILEGED_LOOP
from worklife.executors.isolation import Isolation, exposures, needed_paths
from worklife.models import Attempt

pytestmark = pytest.mark.django_db(transaction=True)

MARKER = "conduit-secret-marker-4f1c"


@pytest.fixture
def server_var(work_tmp):
    """A var/ of the loop's with an operator password and a receiver's secret file in it (in a
    folder anyone may enter, as /srv/conduit)."""
    var = private_directory(work_tmp / "var")
    for path in (var / "operator-password", var / "secrets" / "gh"):
        private_file(path).write_text(MARKER)
    return var


def peeking_document() -> str:
    doc = json.loads(document())
    scope = doc["scopes"][0]
    scope["bindings"]["peek_command"] = {
        "executor": "command",
        "settings": {"argv": [sys.executable, "-c", PEEK, str(settings.BASE_DIR)]},
    }
    scope["bindings"]["peek_python"] = {
        "executor": "python",
        "settings": {"target": "tests.worklife.targets:peeks"},
    }
    for name in ("peek_command", "peek_python"):
        scope["routes"].append(
            {
                "slot": name,
                "handler": "match",
                "params": {"type": f"t.{name}", "keys": ["k:{data.key}"]},
                "binding": name,
                "policy": "queue",
            }
        )
    return json.dumps(doc)


@pytest.mark.parametrize("binding", ["peek_command", "peek_python"])
def test_a_work_cannot_read_the_loops_environment_pid_1_the_database_or_var(binding, server_var):
    apply(system_clock, peeking_document())
    database = str(connection.settings_dict["NAME"]) if connection.vendor == "sqlite" else ""
    paths = [str(server_var), str(server_var / "operator-password"), str(server_var / "secrets" / "gh")]
    paths += [database] if database else []
    work = work_of(send(system_clock, binding, "p", paths=paths))
    router(system_clock).route_pending()
    done = run_manage(
        "work_loop",
        "--drain",
        "--drain-timeout",
        "60",
        SECRET_KEY=MARKER,
        CONDUIT_VAR_DIR=str(server_var),
        CONDUIT_DEMO_HOOK_SECRET=MARKER,
    )
    assert done.returncode == 0, done.stderr
    attempt = Attempt.objects.get(work=work)
    assert attempt.state == "succeeded", (attempt.error, attempt.stderr_tail)
    lines = attempt.stdout_tail.strip().splitlines()
    # Each try was made, and each was refused: the environ and mem of its parent and
    # grandparent (the loop and what started it; for Python, its fork server and the loop),
    # pid 1's environ, var/ itself, the files in it, the database.
    assert len(lines) == 4 + 1 + len(paths)
    assert all(line.endswith("refused (PermissionError)") for line in lines), attempt.stdout_tail
    assert MARKER not in attempt.stdout_tail
    assert os.geteuid() != 0 or "children run as nobody" in done.stderr


def test_a_loop_that_is_not_root_hides_var_from_its_work_in_a_user_namespace(work_tmp):
    """The work loop of the systemd unit runs as an ordinary user: its Work runs as that user
    too, in a user and mount namespace where var/ is covered; the loop is undumpable."""
    if os.geteuid() != 0:
        pytest.fail("this test starts the loop as another user: run it as root (CI does)")
    nobody = pwd.getpwnam("nobody")
    var = work_tmp / "var"
    for path in (var / "operator-password", var / "secrets" / "gh"):
        private_file(path).write_text(MARKER)
    for path in (var, var / "secrets", var / "operator-password", var / "secrets" / "gh"):
        os.chown(path, nobody.pw_uid, nobody.pw_gid)  # the loop's own files, as its user's
    paths = [str(var), str(var / "operator-password"), str(var / "secrets" / "gh")]
    # The loop as nobody (reaching the interpreter as any attempt process does), not isolated.
    as_nobody = Isolation(
        user="nobody",
        uid=nobody.pw_uid,
        gid=nobody.pw_gid,
        namespace=True,
        exposed=exposures(needed_paths(), nobody.pw_uid, nobody.pw_gid),
    )
    done = subprocess.run(
        [sys.executable, "-c", UNPRIVILEGED_LOOP, json.dumps(paths), PEEK, str(settings.BASE_DIR)],
        env=child_env(CONDUIT_VAR_DIR=str(var), SECRET_KEY=MARKER, PYTHONPATH=str(settings.BASE_DIR)),
        cwd=str(settings.BASE_DIR),
        preexec_fn=as_nobody.preexec(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (
        f"isolation: children run as the loop's user, in a user and mount namespace hiding {var}"
        in done.stdout
    )
    peeked = [line for line in done.stdout.splitlines() if line.startswith("/")]
    assert len(peeked) == 4 + 1 + len(paths), done.stdout
    assert all(line.endswith("refused (PermissionError)") for line in peeked), done.stdout
    assert MARKER not in done.stdout
    # Without the namespace, the same user reads its own var/: the namespace is what hides it.
    assert MARKER in (var / "operator-password").read_text()
