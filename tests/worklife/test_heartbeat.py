"""The work loop's heartbeat (worklife.heartbeat): what the runner writes, with the JSON keys
running loops and stored rows use, and what doctor and the console read back."""

from __future__ import annotations

from datetime import timedelta

import pytest

from causal.models import KV
from routing.engine.configurations import LiveConfigurations
from tests.causal.factories import KVFactory
from tests.worklife.factories import T0
from worklife.executors.isolation import isolation
from worklife.heartbeat import (
    HEARTBEATS_NAMESPACE,
    WorkLoopHeartbeat,
    beating_since,
    heartbeat_write,
    work_loop_heartbeats,
)
from worklife.runner import WorkRunner

pytestmark = pytest.mark.django_db


def test_work_loop_heartbeats_read_what_the_runner_writes(clock):
    runner = WorkRunner(clock=clock, configurations=LiveConfigurations(), slots=3, lease_seconds=30)
    runner.step()
    KVFactory(
        namespace=HEARTBEATS_NAMESPACE, key="older", value="not a mapping", updated_at=T0 - timedelta(1)
    )
    (beat, older) = work_loop_heartbeats()
    assert (beat.loop, beat.at, beat.slots, beat.running, beat.stopped) == (
        runner.owner,
        clock(),
        3,
        0,
        False,
    )
    assert (older.loop, older.at, older.slots) == ("older", T0 - timedelta(1), 0)
    runner.shutdown(grace=0)
    assert work_loop_heartbeats(limit=1)[0].stopped is True


def test_a_work_loop_beat_keeps_the_json_keys_running_loops_and_stored_rows_read(clock):
    """The beat's shape is one module's: the runner writes exactly these keys, and a beat
    written and read back is the same beat."""
    runner = WorkRunner(clock=clock, configurations=LiveConfigurations(), slots=2, lease_seconds=30)
    runner.step()
    runner.shutdown(grace=0)
    assert KV.objects.get(namespace=HEARTBEATS_NAMESPACE, key=runner.owner).value == {
        "at": clock().isoformat(),
        "slots": 2,
        "running": 0,
        "started": 0,
        "completed": 0,
        "failed": 0,
        "refused": 0,
        "lost": 0,
        "stopped": True,
        "isolation": isolation().describe(),
    }
    beat = WorkLoopHeartbeat(
        loop="host:1:abc",
        at=clock() + timedelta(seconds=5),
        slots=8,
        running=3,
        started=10,
        completed=6,
        failed=1,
        refused=2,
        lost=1,
        stopped=False,
    )
    heartbeat_write(beat, clock=clock)
    assert beat in work_loop_heartbeats()


def test_beating_since_leaves_out_stale_and_stopped_work_loops(clock):
    for loop, age, stopped in (("fresh", 0, False), ("stale", 120, False), ("stopped", 0, True)):
        KVFactory(
            namespace=HEARTBEATS_NAMESPACE,
            key=loop,
            value={"at": (clock() - timedelta(seconds=age)).isoformat(), "stopped": stopped},
            updated_at=clock() - timedelta(seconds=age),
        )
    since = clock() - timedelta(seconds=60)
    assert list(KV.objects.filter(beating_since(since)).values_list("key", flat=True)) == ["fresh"]
