"""A paused route (routing.holds, worklife.pauses): routing goes on, the route's Events stay
unrouted saying which pause holds them, later input for the same Work waits behind them, and a
resume routes them in acceptance order."""

from __future__ import annotations

from datetime import timedelta

import pytest

from causal.models import Event, RouteState
from routing.holds import route_held_release
from routing.models import RouteRecord
from routing.setup.trace import trace
from tests.routing.routerkit import accept
from tests.worklife.enginekit import route_all, setup
from worklife.models import PauseKind, WorkInput
from worklife.pauses import PauseTarget, pause_create, pause_end, route_hold_prefix

ROUTE = PauseTarget(PauseKind.ROUTE, "t", "noop")


def _state(seq: int) -> tuple[str, str]:
    event = Event.objects.get(pk=seq)
    return event.route_state, event.unrouted_reason


@pytest.mark.django_db(transaction=True)
def test_a_paused_route_holds_its_events_in_order_and_routes_them_on_resume(clock):
    setup(clock)
    pause_create(target=ROUTE, paused_by="alice", reason="incident 42", until=None, clock=clock)
    first = accept(clock, "t.noop", {"key": "a"}, scope="t").seq
    second = accept(clock, "t.noop", {"key": "a"}, scope="t").seq
    other = accept(clock, "t.py", {"key": "b"}, scope="t").seq
    route_all(clock)
    state, reason = _state(first)
    assert state == RouteState.UNROUTED
    assert reason.startswith("held: route 'noop' in t is paused by alice at ") and reason.endswith(
        "incident 42"
    )
    assert _state(second)[0] == RouteState.UNROUTED
    assert _state(other)[0] == RouteState.ROUTED  # routing goes on
    held = Event.objects.filter(unrouted_reason__startswith=route_hold_prefix("t", "noop"))
    assert held.filter(route_state=RouteState.UNROUTED).count() >= 1
    pause_end(target=ROUTE, ended_by="bob", clock=clock)
    assert route_held_release(scope="t", slot="noop") >= 1
    route_all(clock)
    assert _state(first)[0] == _state(second)[0] == RouteState.ROUTED
    work_id = RouteRecord.objects.get(event_id=first).work_id
    assert list(
        WorkInput.objects.filter(work_id=work_id).order_by("seq").values_list("event_id", flat=True)
    ) == [
        first,
        second,
    ]


@pytest.mark.django_db(transaction=True)
def test_a_held_event_is_looked_at_again_and_stays_held_while_the_route_is_paused(clock):
    setup(clock)
    pause_create(target=ROUTE, paused_by="alice", reason="", until=None, clock=clock)
    seq = accept(clock, "t.noop", {"key": "c"}, scope="t").seq
    route_all(clock)
    # Looked at again 30 s later, not at every pass.
    assert Event.objects.get(pk=seq).retry_at == clock() + timedelta(seconds=30)
    clock.advance(31)
    route_all(clock)
    state, reason = _state(seq)
    assert state == RouteState.UNROUTED and reason.startswith("held: route 'noop' in t")


@pytest.mark.django_db(transaction=True)
def test_a_trace_says_a_paused_route_would_hold_the_event(clock):
    setup(clock)
    pause_create(target=ROUTE, paused_by="alice", reason="incident 42", until=None, clock=clock)
    result = trace(
        payload={"id": "x1", "source": "tests", "type": "t.noop", "scope": "t", "data": {"key": "z"}},
        clock=clock,
    )
    assert (result.effect, result.state, result.route) == ("held", RouteState.UNROUTED, "noop")
    assert result.notes[0].startswith("held: route 'noop' in t is paused by alice")
    assert result.notes[0].endswith("routing would hold it unrouted until the route resumes")


@pytest.mark.django_db(transaction=True)
def test_an_event_a_paused_route_holds_keeps_later_input_for_its_key_behind_it_in_the_same_window(clock):
    """Held, the Event still holds its key's later input, even input another route takes, in its
    window and in later passes: acceptance order on every key."""
    setup(clock)
    pause_create(target=ROUTE, paused_by="alice", reason="", until=None, clock=clock)
    held = accept(clock, "t.noop", {"key": "d"}, scope="t").seq
    behind = accept(clock, "t.py", {"key": "d"}, scope="t").seq
    route_all(clock)
    later = accept(clock, "t.py", {"key": "d"}, scope="t").seq  # a later pass: the key is remembered
    route_all(clock)
    assert _state(held)[0] == RouteState.UNROUTED
    for seq in (behind, later):
        assert Event.objects.get(pk=seq).route_state == RouteState.UNROUTED
        assert Event.objects.get(pk=seq).waiting_on_id == held
