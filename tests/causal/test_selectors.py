"""Reads of the causal limits: chains root first, refused roots for doctor, root status and
trees (R52, R53, R55)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from causal.limits import Causal, CausalRefused, Limits
from causal.models import Event
from causal.selectors import (
    DiagnosticFilter,
    ListTotal,
    NotARoot,
    count_capped,
    event_chain,
    root_limits_status,
    root_tree,
    roots_refused_since,
)
from tests.causal.factories import CausalDiagnosticFactory, EventFactory
from tests.causal.support import envelope

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


@pytest.fixture
def causal(clock) -> Causal:
    return Causal(clock, Limits(max_depth=32, rate_per_minute=128))


def test_r52_event_chain_is_root_first_in_two_queries(causal):
    root = EventFactory()
    parent = root
    chain = [root]
    for i in range(10):
        parent = causal.derive(parent=parent, envelope=envelope(f"c{i}")).event
        chain.append(parent)
    causal.derive(parent=chain[3], envelope=envelope("side-branch"))
    with CaptureQueriesContext(connection) as queries:
        result = event_chain(chain[-1].seq)
    assert [e.seq for e in result] == [e.seq for e in chain]
    assert [e.depth for e in result] == list(range(11))
    assert len(queries) == 2
    assert [e.seq for e in event_chain(root.seq)] == [root.seq]


def test_r52_event_chain_of_an_unknown_event_raises():
    with pytest.raises(Event.DoesNotExist):
        event_chain(123456)


def test_r55_roots_refused_since_groups_refusals_per_root():
    CausalDiagnosticFactory.create_batch(3, kind="rate_exceeded", root_seq=5, at=T0)
    CausalDiagnosticFactory(kind="depth_exceeded", root_seq=5, at=T0 + timedelta(minutes=2))
    CausalDiagnosticFactory(kind="depth_exceeded", root_seq=9, at=T0)
    CausalDiagnosticFactory(kind="missing_parent", root_seq=None, parent_seq=None, at=T0)
    CausalDiagnosticFactory(kind="rate_exceeded", root_seq=11, at=T0 - timedelta(seconds=1))  # too old
    result = roots_refused_since(T0)
    assert result == [
        {
            "root_seq": 5,
            "refusals": 4,
            "kinds": {"rate_exceeded": 3, "depth_exceeded": 1},
            "last_at": T0 + timedelta(minutes=2),
        },
        {"root_seq": 9, "refusals": 1, "kinds": {"depth_exceeded": 1}, "last_at": T0},
        {"root_seq": None, "refusals": 1, "kinds": {"missing_parent": 1}, "last_at": T0},
    ]
    assert roots_refused_since(T0 + timedelta(hours=1)) == []


def test_r55_roots_refused_since_needs_an_aware_time():
    with pytest.raises(ValueError, match="since"):
        roots_refused_since(datetime(2026, 1, 5))


def test_r55_roots_refused_since_sees_real_refusals(clock):
    causal = Causal(clock, Limits(max_depth=1, rate_per_minute=10))
    root = EventFactory()
    child = causal.derive(parent=root, envelope=envelope("child")).event
    with pytest.raises(CausalRefused):
        causal.derive(parent=child, envelope=envelope("too-deep"))
    [entry] = roots_refused_since(clock.now - timedelta(minutes=1))
    assert (entry["root_seq"], entry["kinds"]) == (root.seq, {"depth_exceeded": 1})


def test_r53_root_limits_status_reads_the_pin_and_this_minutes_tokens(clock, causal, settings):
    root = EventFactory()
    status = root_limits_status(root.seq, now=clock.now)
    assert (status.pinned, status.used, status.remaining, status.limits) == (False, 0, 128, Limits(32, 128))
    for i in range(3):
        causal.derive(parent=root, envelope=envelope(f"s{i}"))
    settings.CONDUIT_CAUSAL_RATE_PER_MINUTE = 5  # the pin stands
    status = root_limits_status(root.seq, now=clock.now + timedelta(seconds=30))
    assert (status.pinned, status.used, status.remaining) == (True, 3, 125)
    assert status.pin.pinned_at == clock.now
    assert root_limits_status(root.seq, now=clock.now + timedelta(minutes=1)).used == 0


def test_r53_root_tree_is_pre_order_and_truncates_connected(causal):
    root = EventFactory()
    a = causal.derive(parent=root, envelope=envelope("a")).event
    b = causal.derive(parent=root, envelope=envelope("b")).event
    a1 = causal.derive(parent=a, envelope=envelope("a1")).event
    b1 = causal.derive(parent=b, envelope=envelope("b1")).event
    tree = root_tree(root.seq)
    assert [(n.event.seq, n.level) for n in tree.nodes] == [
        (root.seq, 0),
        (a.seq, 1),
        (a1.seq, 2),
        (b.seq, 1),
        (b1.seq, 2),
    ]
    assert (tree.descendants, tree.truncated) == (4, False)
    small = root_tree(root.seq, max_nodes=2)
    assert [n.event.seq for n in small.nodes] == [root.seq, a.seq, b.seq]
    assert (small.descendants, small.truncated) == (4, True)
    with pytest.raises(NotARoot) as not_root:
        root_tree(a1.seq)
    assert not_root.value.root_seq == root.seq


def test_r55_diagnostic_filter_rejects_an_unknown_kind():
    with pytest.raises(ValueError, match="kind"):
        DiagnosticFilter(kind="bogus")


# --- capped totals --------------------------------------------------------------------------------
@pytest.fixture
def routing_handlers(test_handlers):
    """The test handlers registered (tests/conftest.py), for the tests here that route."""


@pytest.mark.usefixtures("routing_handlers")
@pytest.mark.django_db
def test_totals_are_exact_up_to_the_cap_then_say_plus():
    EventFactory.create_batch(7)
    from causal.models import Event

    assert count_capped(Event.objects.all(), cap=10) == ListTotal(7, capped=False)
    assert count_capped(Event.objects.all(), cap=5) == ListTotal(5, capped=True)
    assert str(ListTotal(10_000, capped=True)) == "10,000+"
    assert str(ListTotal(1234, capped=False)) == "1,234"
