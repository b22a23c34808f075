"""Issue 38 item 9: several hosts on one database, each named by CONDUIT_HOSTNAME
(bench/takeover.py kills one host and shows the other take over)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from infra.identity import loop_identity
from tests.worklife.enginekit import runner
from tests.worklife.factories import AttemptFactory, WorkFactory
from worklife.models import Attempt

pytestmark = pytest.mark.django_db

# No process has this pid: an owner naming it is dead, if it is of this host.
DEAD_PID = 2**22 + 1


def test_i38_9_loop_identity_carries_conduit_hostname(settings):
    settings.CONDUIT_HOSTNAME = "host-a"
    assert loop_identity().startswith("host-a:")


@pytest.mark.parametrize(("me", "released"), [("host-b", 0), ("host-a", 1)])
def test_i38_9_a_loop_judges_dead_only_the_loops_of_its_own_host_name(clock, settings, me, released):
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
