"""Live updates from the router: each routed window records, in its own transaction, one
outbox row naming the Events it decided and the Work it touched (the real ids of the Work it
started, never their temporary ones); a window that rolls back records nothing."""

from __future__ import annotations

import io
import logging

import pytest
from django.core.management import call_command
from django.db import transaction

from infra.live import EVENTS_GROUP, live_changes_after
from infra.models import LiveChange
from routing.engine.live import publish_routed
from routing.models import RouteRecord
from tests.routing.livekit import route_pass
from tests.routing.routerkit import accept, apply
from worklife.models import Work

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def handlers(test_handlers):
    """Every test here routes with the test handlers registered (tests/conftest.py)."""


def pr(clock, number: int):
    return accept(clock, "github.pull_request.opened", {"repo": "acme/api", "number": number})


def test_d4_publish_routed_records_one_row_with_its_events_and_works_in_the_transaction():
    with transaction.atomic():
        publish_routed(range(1, 201), [*range(1, 61), -1, None])
        assert LiveChange.objects.count() == 1  # in the window's transaction, before it commits
    (row,) = LiveChange.objects.values_list("groups", "works", "events")
    assert row == ([EVENTS_GROUP], list(range(1, 61)), list(range(1, 201)))
    # Nothing to say: no row.
    with transaction.atomic():
        publish_routed([], [])
    assert LiveChange.objects.count() == 1


def test_d4_a_rolled_back_window_records_nothing():
    with pytest.raises(RuntimeError), transaction.atomic():
        publish_routed([1, 2], [1])
        raise RuntimeError("the window rolled back")
    assert not LiveChange.objects.exists()


def test_d4_a_router_pass_records_its_window_for_its_events_and_works(clock):
    apply(clock)
    first = pr(clock, 1)
    route_pass(clock)
    work_id = RouteRecord.objects.get(event=first).work_id
    position = LiveChange.objects.order_by("-pk").values_list("pk", flat=True).first()
    followup = accept(clock, "followup.comment", {"repo": "acme/api", "number": 1})
    noise = accept(clock, "noise.tick", {})
    route_pass(clock)
    groups = set().union(*(change.groups for change in live_changes_after(position)))
    assert {EVENTS_GROUP, f"work.{work_id}", f"event.{followup.seq}", f"event.{noise.seq}"} <= groups


ONE_KEYED_ROUTE = """
version: 1
scopes:
  - path: acme
    bindings:
      inbox: {}
    routes:
      - slot: chat
        handler: match
        params: {type: "chat.message", keys: ["thread:{data.thread}"]}
        binding: inbox
        policy: queue
"""


def test_a_window_that_starts_a_work_and_queues_on_it_records_the_real_work_and_logs_no_traceback(
    clock, caplog
):
    apply(clock, ONE_KEYED_ROUTE)
    first = accept(clock, "chat.message", {"thread": "t1"})
    second = accept(clock, "chat.message", {"thread": "t1"})
    with caplog.at_level(logging.DEBUG):
        call_command("route_loop", "--drain", stdout=io.StringIO(), stderr=io.StringIO())
    (work,) = Work.objects.all()
    assert set(RouteRecord.objects.values_list("event", "work")) == {
        (first.seq, work.pk),
        (second.seq, work.pk),
    }
    assert [record for record in caplog.records if record.exc_info] == []
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]
    works = [w for row in LiveChange.objects.values_list("works", flat=True) for w in row]
    assert work.pk in works and all(w > 0 for w in works)
    groups = set().union(*(change.groups for change in live_changes_after(0)))
    assert {f"work.{work.pk}", f"event.{first.seq}", f"event.{second.seq}"} <= groups
