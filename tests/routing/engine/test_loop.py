"""Runtime cases over real connections and processes (R58), statement counts, properties."""

from __future__ import annotations

import json
import time

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from hypothesis.extra.django import TestCase as HypothesisTestCase

from causal.clock import system_clock
from causal.models import Event, RouteState
from routing.acceptance.services import events_accept
from routing.engine.loop import RouteLoop
from routing.engine.options import RouterOptions
from routing.models import RouteRecord
from tests.routing.history import history_payloads, history_violations
from tests.routing.routerkit import (
    MATCH_ONLY,
    apply,
    assert_routing_invariants,
    conversation_payloads,
    drain_loop,
    run_route_loops,
)
from tests.support import child_env, run_manage
from worklife.models import WorkInput


@pytest.mark.django_db(transaction=True)
def test_r58_accept_route_and_read_in_three_processes():
    apply(system_clock, MATCH_ONLY)
    accepted = events_accept(payloads=conversation_payloads(40, 5), clock=system_clock, may_address_work=True)
    seqs = [a.event.seq for a in accepted]
    routed = run_manage("route_loop", "--once", "--batch-size", "100")
    assert routed.returncode == 0, routed.stderr
    assert "pass: 40 routed" in routed.stdout
    reader = run_manage(
        "shell",
        "-c",
        "import json; from routing.models import RouteRecord; "
        "print(json.dumps(sorted(RouteRecord.objects.values_list('event_id', flat=True))))",
    )
    assert reader.returncode == 0, reader.stderr
    assert json.loads(reader.stdout.strip().splitlines()[-1]) == seqs
    # And this process, on its own (persistent) connection, sees the same state.
    assert sorted(RouteRecord.objects.values_list("event_id", flat=True)) == seqs
    assert_routing_invariants()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("reopen", [False, True], ids=["persistent", "reopened"])
def test_r58_routing_over_persistent_and_reopened_connections(reopen):
    apply(system_clock, MATCH_ONLY)
    events_accept(payloads=conversation_payloads(120, 7), clock=system_clock, may_address_work=True)
    loop = RouteLoop(clock=system_clock, options=RouterOptions(batch_size=25))
    try:
        for _ in range(10):
            loop.step()
            if reopen:
                connections.close_all()  # a restarted process: nothing cached on a handle
    finally:
        loop.close()
    assert Event.objects.filter(route_state=RouteState.UNROUTED).count() == 0
    assert_routing_invariants()


UNBUILDABLE_ONLY = """
version: 1
scopes:
  - path: acme
    bindings:
      inbox: {}
    routes:
      - slot: broken
        handler: unbuildable
        params: {}
        binding: inbox
        policy: queue
"""


@pytest.mark.django_db
def test_a_route_loop_builds_its_router_before_its_first_pass(clock):
    apply(clock, MATCH_ONLY)
    loop = RouteLoop(clock=clock, options=RouterOptions(route_timeout=2.0))
    try:
        assert loop.router is not None and loop.passes == 0
        assert set(loop.router.handlers) == {"match"}
        assert loop.step().generation_changed is False  # built already
    finally:
        loop.close()


@pytest.mark.django_db
def test_a_route_loop_whose_router_cannot_be_built_starts_and_fails_its_first_pass(clock, settings):
    """A handler that cannot be instantiated does not stop the loop from starting: its first pass
    tries again and fails as a pass, which the loop reports (and goes on)."""
    settings.CONDUIT_ROUTE_HANDLERS = {"unbuildable": "tests.routing.ext_handlers.Unbuildable"}
    apply(clock, UNBUILDABLE_ONLY)
    loop = RouteLoop(clock=clock, options=RouterOptions(route_timeout=2.0))
    try:
        assert loop.router is None
        with pytest.raises(RuntimeError, match="upstream is not configured"):
            loop.step()
    finally:
        loop.close()


@pytest.mark.django_db
def test_router_statements_per_routed_event_are_bounded():
    apply(system_clock, MATCH_ONLY)
    events_accept(payloads=conversation_payloads(400, 120), clock=system_clock, may_address_work=True)
    with CaptureQueriesContext(connection) as queries:
        routed = drain_loop(batch_size=200)
    assert routed == 400
    per_event = len(queries.captured_queries) / routed
    assert per_event <= 7, f"{per_event:.2f} statements per routed Event"


class RoutingProperties(HypothesisTestCase):
    """For random interleavings of Events over shared keys and scopes, every Event gets one
    RouteRecord, each key has one owner, and each Work's input is in acceptance order."""

    @hsettings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        st.lists(
            st.tuples(
                st.sampled_from(["c.msg", "c.msg", "c.msg", "noise.x", "other.y"]),
                st.integers(0, 4),
                st.booleans(),
                st.sampled_from([1, 3, 50]),
            ),
            min_size=1,
            max_size=20,
        )
    )
    def test_r31_every_event_one_record_one_owner_per_key_input_in_order(self, plan):
        apply(system_clock, MATCH_ONLY)
        payloads = []
        for i, (kind, k, explicit, _) in enumerate(plan):
            payload = {
                "specversion": "1.0",
                "id": f"p{i}",
                "source": "prop",
                "scope": "acme",
                "type": kind,
                "data": {"k": k},
            }
            if explicit:
                payload["correlation"] = [f"k:{(k + 1) % 5}"]
            payloads.append(payload)
        events_accept(payloads=payloads, clock=system_clock, may_address_work=True)
        drain_loop(batch_size=plan[0][3])
        # Events whose keys name two Work stay unrouted with a reason; every other one settles.
        for event in Event.objects.filter(route_state=RouteState.UNROUTED):
            assert event.unrouted_reason, f"#{event.seq} unrouted without a reason"
        assert_routing_invariants()


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
@pytest.mark.parametrize(
    ("batch_size", "claim_seconds"),
    [(100, "60"), (7, "60"), (50, "0.05")],
    ids=["windows-of-100", "windows-of-7", "lapsing-claims"],
)
def test_r9_four_route_loop_processes_share_one_database(batch_size, claim_seconds):
    """4 route_loop processes over shared keys: no duplicate owner, no lost or duplicated
    input, per-Work order kept (10,000 Events on PostgreSQL; 2,000 on SQLite). Small windows
    make the loops interleave more claims, releases and waits; claims that lapse after 50 ms
    make loops take over each other's windows while they are being evaluated (those two cases
    on a quarter of the Events; before the orphan rule, the lapsing case failed most runs)."""
    full = (batch_size, claim_seconds) == (100, "60")
    n = (10_000 if connection.vendor == "postgresql" else 2_000) // (1 if full else 4)
    apply(system_clock, MATCH_ONLY)
    payloads = conversation_payloads(n, 300, seed=4)
    for start in range(0, n, 1000):
        events_accept(payloads=payloads[start : start + 1000], clock=system_clock, may_address_work=True)
    started = time.monotonic()
    run_route_loops(4, batch_size, child_env(CONDUIT_ROUTE_CLAIM_SECONDS=claim_seconds))
    # A loop may stop while another still holds claims: finish what is left in this process.
    drain_loop()
    elapsed = time.monotonic() - started
    # Each Event names at most one key, so no identity can conflict: every Event settles, and
    # an Event left "conflicting" would mean a later one of its conversation routed first.
    unrouted = Event.objects.filter(route_state=RouteState.UNROUTED)
    assert not unrouted.exists(), list(unrouted.values_list("seq", "unrouted_reason")[:5])
    assert RouteRecord.objects.count() == n
    assert (
        WorkInput.objects.count()
        == RouteRecord.objects.filter(work__isnull=False, policy__in=["start", "queue"]).count()
    )
    assert_routing_invariants()
    print(
        f"{n} Events routed by 4 processes (windows of {batch_size}, claims of {claim_seconds} s) in {elapsed:.1f} s"
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
@pytest.mark.parametrize(("seed", "batch_size"), [(1, 100), (2, 25)], ids=["windows-of-100", "windows-of-25"])
def test_r9_four_loops_history_nothing_lost_or_duplicated_each_work_in_order(seed, batch_size):
    """4 route_loop processes over a stream whose targets overlap (a few hot
    keys) and are disjoint (many cold keys, explicit or decided): the history checker finds
    no Event lost, none duplicated, and each Work's input and each key's route records in
    acceptance order. bench/route_history.py runs it 20 times."""
    n = 4_000 if connection.vendor == "postgresql" else 1_000
    apply(system_clock, MATCH_ONLY)
    payloads = history_payloads(n, seed=seed)
    for start in range(0, n, 1000):
        events_accept(payloads=payloads[start : start + 1000], clock=system_clock, may_address_work=True)
    run_route_loops(4, batch_size, child_env())
    # A loop may stop while another still holds claims: finish what is left in this process.
    drain_loop()
    assert history_violations(payloads) == []
    assert_routing_invariants()
