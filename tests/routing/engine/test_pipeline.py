"""A pass with a full window claims the next window before its commit and asks that window's
routes while its own transaction ends: a commit alone, on SQLite. The next
pass commits that window on those answers, in acceptance order, as every commit orders its
Events (I3, I4). On PostgreSQL, where loops commit beside each other, a pass claims one window.
"""

from __future__ import annotations

import pytest
from django.db import connection

from causal.models import Event, RouteState
from routing.engine.loop import RouteLoop
from routing.engine.router import GenerationChanged
from routing.models import RouteRecord
from tests.routing import sample_handlers
from tests.routing.routerkit import (
    MATCH_ONLY,
    SCRIPTED_ONLY,
    accept,
    apply,
    assert_routing_invariants,
    conversation_payloads,
    drain,
    router,
)
from worklife.models import WorkInput

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def handlers(test_handlers):
    """Routes here use the test handlers (tests/conftest.py)."""


def pipelined() -> bool:
    """Whether a loop's pass claims ahead here: SQLite. (Inside a transaction around the pass,
    a test's, PostgreSQL's commits run alone too: the tests that tell the two apart run
    outside one.)"""
    return connection.vendor == "sqlite"


def claimed_by(owner: str) -> list[int]:
    return sorted(Event.objects.filter(claimed_by=owner).values_list("seq", flat=True))


@pytest.mark.django_db(transaction=True)
def test_a_full_window_claims_the_next_and_asks_its_routes_while_it_commits(clock):
    apply(clock, SCRIPTED_ONLY)
    events = [accept(clock, "x", {"keys": [f"k{n % 2}"]}) for n in range(7)]
    seqs, ids = [e.seq for e in events], [e.envelope_id for e in events]
    r = router(clock, batch_size=3)
    try:
        first = r.route_pending()
        assert [o.seq for o in first] == seqs[:3] and all(o.settled for o in first)
        if pipelined():
            # The next window is claimed, and its routes were asked during the first commit.
            assert claimed_by(r.owner) == seqs[3:6]
            assert sorted(sample_handlers.CALLS) == sorted(ids[:6])
        else:
            assert claimed_by(r.owner) == []
            assert sorted(sample_handlers.CALLS) == sorted(ids[:3])
        second = r.route_pending()
        assert [o.seq for o in second] == seqs[3:6] and all(o.settled for o in second)
        # Each Event's routes are asked once: the second window was not asked again.
        asked = sorted(sample_handlers.CALLS)
        assert asked == sorted(ids[:7] if pipelined() else ids[:6])
        third = r.route_pending()
        assert [o.seq for o in third] == seqs[6:]
        # A window short of the batch size is the end of the backlog: nothing is claimed ahead.
        assert claimed_by(r.owner) == []
        assert r.route_pending() == []
    finally:
        r.close()
    assert sorted(sample_handlers.CALLS) == sorted(ids)
    assert not Event.objects.filter(route_state=RouteState.UNROUTED).exists()
    assert_routing_invariants()
    # Both Works took their input in acceptance order, across the windows.
    for key in ("k0", "k1"):
        work = RouteRecord.objects.get(event=events[0 if key == "k0" else 1]).work_id
        expected = [e.seq for n, e in enumerate(events) if f"k{n % 2}" == key]
        assert (
            list(WorkInput.objects.filter(work_id=work).order_by("pk").values_list("seq", flat=True))
            == expected
        )


def test_a_backlog_routed_window_after_window_keeps_acceptance_order_i3(clock):
    """Windows of seven over conversations sharing five keys, decided by their routes (and
    some by explicit keys): every Event settles once, every key has one owner and every
    Work takes its input in acceptance order."""
    from causal.clock import system_clock
    from routing.acceptance.services import events_accept

    apply(clock, MATCH_ONLY)
    events_accept(payloads=conversation_payloads(60, 5), clock=system_clock, may_address_work=True)
    r = router(clock, batch_size=7)
    try:
        drain(r, rounds=30)
    finally:
        r.close()
    assert not Event.objects.filter(route_state=RouteState.UNROUTED).exists()
    assert not Event.objects.exclude(claimed_by="").exists()
    assert_routing_invariants()


@pytest.mark.django_db(transaction=True)
def test_a_window_claimed_ahead_is_given_back_when_the_router_closes(clock):
    apply(clock, SCRIPTED_ONLY)
    events = [accept(clock, "x", {"keys": [f"k{n}"]}) for n in range(6)]
    r = router(clock, batch_size=3)
    r.route_pending()
    assert claimed_by(r.owner) == ([e.seq for e in events[3:]] if pipelined() else [])
    r.close()
    assert claimed_by(r.owner) == []
    # Another loop takes them at once.
    other = router(clock, batch_size=3)
    other.owner = "elsewhere:1:a"
    try:
        assert [o.seq for o in other.route_pending()] == [e.seq for e in events[3:]]
    finally:
        other.close()
    assert_routing_invariants()


def test_r7_a_new_generation_discards_the_answers_asked_ahead(clock):
    """Answers asked ahead under generation 1 are never committed under generation 2: the
    commit finds the generation changed, the window claimed ahead of it is given back, and
    the Events left are asked again by a router of the new generation."""
    apply(clock, SCRIPTED_ONLY)
    events = [accept(clock, "x", {"keys": [f"k{n}"]}) for n in range(9)]
    seqs = [e.seq for e in events]
    r = router(clock, batch_size=3)
    try:
        r.route_pending()
        apply(clock, SCRIPTED_ONLY.replace("policy: queue", "policy: queue\n        start: true"))
        with pytest.raises(GenerationChanged):
            r.route_pending()
        # The window it was committing stays this loop's to take again; the one it claimed
        # ahead of that commit is free.
        assert claimed_by(r.owner) == seqs[3:6]
        assert not Event.objects.filter(seq__in=seqs[6:]).exclude(claimed_by="").exists()
    finally:
        r.close()
    # The route loop builds the new generation's router under its own identity.
    fresh = router(clock, batch_size=3)
    fresh.owner = r.owner
    try:
        drain(fresh)
    finally:
        fresh.close()
    generations = dict(RouteRecord.objects.values_list("event_id", "generation"))
    assert [generations[s] for s in seqs] == ["1"] * 3 + ["2"] * 6
    assert_routing_invariants()


def test_r4_a_running_loop_routes_the_rest_of_a_backlog_on_a_new_generation(clock):
    apply(clock, SCRIPTED_ONLY)
    events = [accept(clock, "x", {"keys": [f"k{n}"]}) for n in range(7)]
    from routing.engine.options import RouterOptions

    loop = RouteLoop(clock=clock, options=RouterOptions(batch_size=3, route_timeout=2.0))
    try:
        assert loop.step().settled == 3
        apply(clock, SCRIPTED_ONLY.replace("policy: queue", "policy: queue\n        start: true"))
        # The rest of the backlog on the new generation: a full window, the last Event, then
        # nothing left.
        steps = [loop.step() for _ in range(3)]
        assert [s.settled for s in steps] == [3, 1, 0] and steps[-1].empty
    finally:
        loop.close()
    generations = dict(RouteRecord.objects.values_list("event_id", "generation"))
    assert [generations[e.seq] for e in events] == ["1"] * 3 + ["2"] * 4
    assert not Event.objects.exclude(claimed_by="").exists()
    assert_routing_invariants()


@pytest.mark.django_db(transaction=True)
def test_a_pass_that_gives_its_window_back_gives_the_next_one_back_too_i4(clock):
    """An earlier Event another loop holds undecided stops the window (acceptance order): the
    pass gives its Events back, and the window it claimed ahead with them, so the next claim
    starts at the oldest unrouted Event again."""
    apply(clock, SCRIPTED_ONLY)
    events = [accept(clock, "x", {"keys": [f"k{n}"]}) for n in range(7)]
    other = router(clock)
    other.owner = "elsewhere:1:a"
    assert [e.seq for e in other.claim_window(1)] == [events[0].seq]
    r = router(clock, batch_size=3, claim_seconds=0.2)
    try:
        outcomes = r.route_pending()
        assert [o.seq for o in outcomes] == [e.seq for e in events[1:4]]
        assert {o.reason for o in outcomes} == {"retry"}
        assert claimed_by(r.owner) == []
        assert not Event.objects.exclude(route_state=RouteState.UNROUTED).exists()
    finally:
        r.close()
    other.close()
