"""Several hosts on one database, each named by CONDUIT_HOSTNAME
(bench/takeover.py kills one host and shows the other take over)."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from infra.identity import loop_identity
from tests.support import child_env
from tests.worklife.enginekit import runner
from tests.worklife.factories import AttemptFactory, WorkFactory
from worklife.models import Attempt

pytestmark = pytest.mark.django_db

# No process has this pid: an owner naming it is dead, if it is of this host.
DEAD_PID = 2**22 + 1


def test_loop_identity_carries_conduit_hostname(settings):
    settings.CONDUIT_HOSTNAME = "host-a"
    assert loop_identity().startswith("host-a:")


@pytest.mark.parametrize(("me", "released"), [("host-b", 0), ("host-a", 1)])
def test_a_loop_judges_dead_only_the_loops_of_its_own_host_name(clock, settings, me, released):
    """A dead pid of another host name is not this host's process: its attempts wait for the lease."""
    settings.CONDUIT_HOSTNAME = me
    work = WorkFactory(status="running")
    attempt = AttemptFactory(
        work=work, lease_owner=f"host-a:{DEAD_PID}:abc", lease_until=clock() + timedelta(seconds=30)
    )
    assert runner(clock).release_dead_owners() == released
    attempt.refresh_from_db()
    assert attempt.state == ("lost" if released else "running")
    assert Attempt.objects.count() == 1


@pytest.mark.slow
@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_two_hosts_one_killed_by_sigkill_the_other_takes_over():
    """bench/takeover.py, small: host A's every process killed mid-load; host B routes A's claimed
    Events and reruns A's Work after the claim and lease times; it exits 0 only when the history
    checker is clean and no two attempts of one Work overlapped."""
    name = f"{connection.settings_dict['NAME']}_takeover"
    url = connection.settings_dict
    base = f"postgres://{url['USER']}@{url['HOST']}:{url['PORT']}/postgres"
    done = subprocess.run(
        [
            sys.executable,
            str(Path(settings.BASE_DIR) / "bench" / "takeover.py"),
            "--n",
            "300",
            "--hold",
            "0.5",
            "--kill-after",
            "3",
            "--database",
            name,
        ],
        env={**child_env(), "BENCH_POSTGRES_URL": base},
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "lost 0, duplicated 0, order kept; attempts of one Work at once: 0" in done.stdout
    assert "their Work ran again on B and completed" in done.stdout
