"""The route loop's heartbeat (routing.engine.heartbeat): what the route loop's host writes,
with the JSON keys running loops and stored rows use, and what doctor, the console and the
other route loops read back."""

from __future__ import annotations

from datetime import timedelta

import pytest

from causal.models import KV
from routing.engine.heartbeat import (
    HEARTBEATS_NAMESPACE,
    RouteLoopHeartbeat,
    beating_since,
    heartbeat_write,
    other_loops_alive,
    route_loop_heartbeats,
)
from routing.engine.loop import RouteLoop
from routing.engine.options import RouterOptions
from tests.causal.factories import KVFactory

pytestmark = pytest.mark.django_db


def test_a_route_loop_beat_keeps_the_json_keys_running_loops_and_stored_rows_read(clock):
    """The beat's shape is one module's: the route loop writes exactly these keys (its last
    beat, as it closes, says it stopped), and a beat written and read back is the same beat."""
    loop = RouteLoop(clock=clock, options=RouterOptions(route_timeout=2.0))
    expected = {
        "at": clock().isoformat(),
        "generation": "",
        "passes": 0,
        "routed": 0,
        "abandoned_calls": 0,
        "abandoned_total": 0,
        "failing": None,
        "stopped": False,
    }
    try:
        loop.step()  # no configuration applied: a beat with no generation
        assert KV.objects.get(namespace=HEARTBEATS_NAMESPACE, key=loop.owner).value == expected
    finally:
        loop.close()
    assert KV.objects.get(namespace=HEARTBEATS_NAMESPACE, key=loop.owner).value == {
        **expected,
        "stopped": True,
    }
    beat = RouteLoopHeartbeat(
        loop="host:1:abc",
        at=clock() + timedelta(seconds=5),
        generation="3",
        passes=40,
        routed=1200,
        abandoned_calls=1,
        abandoned_total=2,
        failing={"error": "RuntimeError: boom", "count": 2, "since": clock().isoformat(), "events": [7]},
    )
    heartbeat_write(beat, clock=clock)
    assert beat in route_loop_heartbeats()
    assert [b.loop for b in route_loop_heartbeats(since=clock() + timedelta(seconds=1))] == []


def test_other_route_loops_are_alive_while_one_beats_and_beating_since_counts_them(clock):
    KVFactory(namespace=HEARTBEATS_NAMESPACE, key="me", value={}, updated_at=clock())
    assert not other_loops_alive(owner="me", now=clock(), within=timedelta(seconds=10))
    KVFactory(
        namespace=HEARTBEATS_NAMESPACE, key="old", value={}, updated_at=clock() - timedelta(seconds=120)
    )
    assert not other_loops_alive(owner="me", now=clock(), within=timedelta(seconds=10))
    KVFactory(namespace=HEARTBEATS_NAMESPACE, key="other", value={}, updated_at=clock())
    assert other_loops_alive(owner="me", now=clock(), within=timedelta(seconds=10))
    since = clock() - timedelta(seconds=60)
    assert sorted(KV.objects.filter(beating_since(since)).values_list("key", flat=True)) == ["me", "other"]


def test_a_stopped_route_loop_no_longer_counts_as_alive(clock):
    from conduit_site.doctor import loop_heartbeats, loops_alive

    loop = RouteLoop(clock=clock, options=RouterOptions(route_timeout=2.0))
    try:
        loop.step()
        assert loop_heartbeats(now=clock())["route_loop"].alive == 1
        assert loops_alive(now=clock()).route_loop
        assert other_loops_alive(owner="me", now=clock(), within=timedelta(seconds=10))
    finally:
        loop.close()
    assert loop_heartbeats(now=clock())["route_loop"].alive == 0
    assert not loops_alive(now=clock()).route_loop
    assert not other_loops_alive(owner="me", now=clock(), within=timedelta(seconds=10))
    assert route_loop_heartbeats()[0].stopped
