"""Concurrent acceptances of one process share a commit
(``routing.acceptance.services.GroupCommit``): one transaction and one flush for every Event offered
while the previous commit was being made, each caller keeping its own answer."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection

from causal.models import Event
from routing.acceptance.envelopes import EnvelopeInvalid, EventConflict
from routing.acceptance.services import ACCEPTANCES, event_accept
from tests.routing.factories import T0, apply_config


def offer(i: str, **overrides):
    event = {
        "specversion": "1.0",
        "id": i,
        "source": "github/acme",
        "type": "github.issue_comment",
        "scope": "acme",
        "data": {"n": i},
    }
    event.update(overrides)
    return event


class HoldingClock:
    """A clock whose first reading waits until ``release`` is set: the first group's commit
    is held open while the other callers queue. Counts the readings (one per group)."""

    def __init__(self) -> None:
        self.readings = 0
        self.first_reading = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()

    def __call__(self):
        with self._lock:
            self.readings += 1
            reading = self.readings
        if reading == 1:
            self.first_reading.set()
            assert self.release.wait(30)
        return T0 + timedelta(seconds=reading)


def wait_for_queue(count: int) -> None:
    """Until ``count`` callers wait behind the held commit (at most 30 s)."""
    deadline = time.monotonic() + 30
    while len(ACCEPTANCES._waiting) < count:
        assert time.monotonic() < deadline, f"{len(ACCEPTANCES._waiting)} of {count} callers queued"
        time.sleep(0.01)


def accept_in_thread(payload, clock, answers, name, accepted_by):
    def run() -> None:
        try:
            answers[name] = event_accept(payload=payload, clock=clock, accepted_by=accepted_by)
        except BaseException as exc:  # noqa: BLE001 - the test thread inspects it
            answers[name] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.django_db(transaction=True)
def test_callers_offering_during_a_commit_share_the_next_one_each_with_its_answer():
    apply_config()
    event_accept(payload=offer("earlier"), clock=lambda: T0, accepted_by="setup")
    clock = HoldingClock()
    answers: dict[str, object] = {}
    first = accept_in_thread(offer("first"), clock, answers, "first", "alice")
    assert clock.first_reading.wait(30)  # the first group's commit is open, holding "first"
    followers = {
        "new-1": (offer("new-1"), "bob"),
        "new-2": (offer("new-2"), "carol"),
        "repeat": (offer("earlier"), "dave"),  # the same body: a duplicate
        "conflict": (offer("earlier", data={"n": "changed"}), "erin"),  # another body: 409
        "unknown": (offer("elsewhere", scope="nowhere"), "frank"),  # not a live scope
        "twice": (offer("new-1"), "grace"),  # repeats new-1 within the same group
    }
    threads = [
        accept_in_thread(payload, clock, answers, name, by) for name, (payload, by) in followers.items()
    ]
    wait_for_queue(len(followers))
    clock.release.set()
    for thread in [first, *threads]:
        thread.join(60)
    assert clock.readings == 2, "the six followers were committed together, in one group"
    assert answers["first"].created and answers["first"].event.accepted_by == "alice"
    new_1, new_2 = answers["new-1"], answers["new-2"]
    assert new_1.created and new_2.created
    assert (new_1.event.accepted_by, new_2.event.accepted_by) == ("bob", "carol")
    assert new_1.event.accepted_at == new_2.event.accepted_at == T0 + timedelta(seconds=2)
    assert answers["repeat"].created is False and answers["repeat"].event.envelope_id == "earlier"
    assert isinstance(answers["conflict"], EventConflict)
    assert isinstance(answers["unknown"], EnvelopeInvalid) and answers["unknown"].field == "scope"
    assert answers["twice"].created is False and answers["twice"].event.seq == new_1.event.seq
    stored = list(Event.objects.order_by("seq").values_list("envelope_id", "accepted_by"))
    assert stored[:2] == [("earlier", "setup"), ("first", "alice")]
    assert sorted(stored[2:]) == [("new-1", "bob"), ("new-2", "carol")]
    assert not ACCEPTANCES._waiting and not ACCEPTANCES._committing


@pytest.mark.django_db(transaction=True)
def test_when_a_group_commit_fails_every_caller_of_the_group_raises():
    apply_config()
    clock = HoldingClock()
    answers: dict[str, object] = {}
    first = accept_in_thread(offer("first"), clock, answers, "first", "alice")
    assert clock.first_reading.wait(30)
    broken = {"a": offer("a"), "b": offer("b")}

    def failing_clock():
        raise OSError("the clock failed")

    threads = [
        accept_in_thread(payload, failing_clock, answers, name, "bob") for name, payload in broken.items()
    ]
    wait_for_queue(len(broken))
    clock.release.set()
    for thread in [first, *threads]:
        thread.join(60)
    assert answers["first"].created
    assert all(isinstance(answers[name], OSError) for name in broken), answers
    assert answers["a"] is not answers["b"]  # each thread raises an exception of its own
    assert list(Event.objects.values_list("envelope_id", flat=True)) == ["first"]
    assert not ACCEPTANCES._waiting and not ACCEPTANCES._committing


@pytest.mark.django_db
def test_inside_a_transaction_an_acceptance_is_part_of_it_not_of_a_group():
    from django.db import transaction

    apply_config()
    with transaction.atomic():
        accepted = event_accept(payload=offer("inside"), clock=lambda: T0)
        transaction.set_rollback(True)
    assert accepted.created
    assert not Event.objects.filter(envelope_id="inside").exists()
