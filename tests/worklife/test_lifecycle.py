"""The Work lifecycle: complete, cancel, child and successor (R47–R50, R60, R61)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from causal.limits import Causal, CausalRefused, Limits
from causal.models import Event
from routing.models import RouteRecord
from tests.causal.factories import EventFactory
from tests.routing.routerkit import accept, apply, router
from tests.worklife.attemptkit import attempt_renew_lease, attempt_start, pending_inputs_in_tx, work_complete
from tests.worklife.factories import (
    T0,
    AttemptFactory,
    CorrelationKeyFactory,
    DependencySubscriptionFactory,
    IntentFactory,
    TimerFactory,
    WaitFactory,
    WorkFactory,
    WorkInputFactory,
)
from worklife import lifecycle
from worklife.errors import StaleLease, WorkError, WorkTerminal
from worklife.inputs import consume_inputs_in_tx, intents
from worklife.models import (
    Attempt,
    CorrelationKey,
    DependencySubscription,
    InputState,
    Intent,
    Timer,
    Wait,
    Work,
    WorkInput,
)
from worklife.waits import attempt_wait

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def handlers(test_handlers):
    """Every test here routes with the test handlers registered (tests/conftest.py)."""


@pytest.fixture
def running(clock):
    """A Work started by a routed pull request, with a running attempt."""
    apply(clock)
    start = accept(clock, "github.pull_request.opened", {"repo": "acme/api", "number": 1})
    r = router(clock)
    r.route(start.seq)
    work_id = RouteRecord.objects.get(event=start).work_id
    attempt = attempt_start(
        work_id=work_id,
        binding="triage",
        executor="python",
        generation=1,
        capabilities=["inject"],
        clock=clock,
    )
    r.close()
    return Work.objects.get(pk=work_id), attempt


def consume_all(clock, work, attempt):
    with transaction.atomic():
        pending = pending_inputs_in_tx(work_id=work.pk)
        consume_inputs_in_tx(
            attempt_id=attempt.pk,
            lease_epoch=attempt.lease_epoch,
            input_ids=[p.pk for p in pending],
            clock=clock,
        )


def test_r47_complete_requires_current_attempt_authority(clock, running):
    work, attempt = running
    attempt_renew_lease(attempt_id=attempt.pk, lease_epoch=1, clock=clock)
    with pytest.raises(StaleLease):
        work_complete(attempt_id=attempt.pk, lease_epoch=1, clock=clock)
    assert Work.objects.get(pk=work.pk).status == "running"


def test_r47_complete_refuses_to_overtake_unrouted_input(clock, running):
    work, attempt = running
    consume_all(clock, work, attempt)
    unrouted = accept(clock, "x.later", {"keys": []}, correlation=["pr:acme/api#1"])
    with pytest.raises(lifecycle.UnroutedInput, match=f"#{unrouted.seq}"):
        work_complete(attempt_id=attempt.pk, lease_epoch=1, clock=clock)
    router(clock).route(unrouted.seq)
    done = work_complete(attempt_id=attempt.pk, lease_epoch=1, clock=clock)
    assert done.status == "ready", "the routed input is still queued"


def test_r47_complete_with_nothing_left_completes(clock, running):
    work, attempt = running
    consume_all(clock, work, attempt)
    done = work_complete(attempt_id=attempt.pk, lease_epoch=1, clock=clock)
    assert done.status == "completed" and done.ended_at == clock()


def test_r47_unconfirmed_injected_input_leaves_the_work_ready(clock, running):
    work, attempt = running
    consume_all(clock, work, attempt)
    edited = accept(clock, "github.pull_request.edited", {"repo": "acme/api", "number": 1})
    router(clock).route(edited.seq)
    assert Intent.objects.filter(event=edited, state="pending").exists()
    done = work_complete(attempt_id=attempt.pk, lease_epoch=1, clock=clock)
    assert done.status == "ready"
    assert WorkInput.objects.get(event=edited).kind == "queue", (
        "the injected input is kept for the next attempt"
    )


def test_r48_cancel_is_atomic_and_terminal(clock, running):
    work, attempt = running
    wait = attempt_wait(attempt_id=attempt.pk, lease_epoch=1, match={"type": "x.*"}, clock=clock)
    timer = TimerFactory(work=work)
    cancelled = lifecycle.work_cancel_in_tx(work_id=work.pk, clock=clock)
    assert cancelled.status == "cancelled"
    attempt.refresh_from_db()
    assert attempt.state == "cancelled"
    assert Wait.objects.get(pk=wait.pk).state == "cancelled"
    assert Timer.objects.get(pk=timer.pk).state == "cancelled"
    assert not WorkInput.objects.filter(work=work, state=InputState.PENDING).exists()
    with pytest.raises(WorkTerminal):
        lifecycle.work_cancel_in_tx(work_id=work.pk, clock=clock)


def test_r48_cancel_supersedes_pending_intents_and_ends_dependency_subscriptions(clock, running):
    work, attempt = running
    edited = accept(clock, "github.pull_request.edited", {"repo": "acme/api", "number": 1})
    router(clock).route(edited.seq)
    routed = Intent.objects.get(event=edited, state="pending")
    # An intent an earlier attempt's end left pending: the services never leave one, so this
    # pins cancel's own promise that no intent of a cancelled Work stays pending.
    earlier = AttemptFactory(work=work, number=0, state="failed", ended_at=clock())
    left_over = IntentFactory(attempt=earlier)
    wait = attempt_wait(attempt_id=attempt.pk, lease_epoch=1, match={"type": "x.*"}, clock=clock)
    subscription = DependencySubscriptionFactory(wait=wait, work=work, scope="acme/web")
    other = DependencySubscriptionFactory(scope="acme/web")  # another Work's stays active

    lifecycle.work_cancel_in_tx(work_id=work.pk, clock=clock)

    assert set(Intent.objects.filter(work=work).values_list("pk", "state")) == {
        (routed.pk, "superseded"),
        (left_over.pk, "superseded"),
    }
    assert not DependencySubscription.objects.get(pk=subscription.pk).active
    assert DependencySubscription.objects.get(pk=other.pk).active


def test_r60_cancellation_checkpoints_later_input_as_terminal(clock, running):
    work, attempt = running
    lifecycle.work_cancel_in_tx(work_id=work.pk, clock=clock)
    late = accept(clock, "github.pull_request.edited", {"repo": "acme/api", "number": 1})
    router(clock).route(late.seq)
    record = RouteRecord.objects.get(event=late)
    assert (record.policy, record.reason, record.work_id) == ("drop", "terminal", work.pk)
    assert not Intent.objects.filter(event=late).exists()


def test_r50_child_takes_parent_scope_and_trigger_from_the_attempt(clock, running):
    work, attempt = running
    created = lifecycle.work_create_child(
        attempt_id=attempt.pk, lease_epoch=1, binding="plain", keys=["child:1"], clock=clock
    )
    child, event = created.work, created.event
    assert (child.parent_id, child.scope, child.predecessor_id) == (work.pk, work.scope, None)
    assert event.type == "core.work.created" and event.parent_id == attempt.trigger_id
    assert event.data == {"work": child.pk, "parent": work.pk, "attempt": attempt.pk}
    assert event.depth == 1 and event.root_id == attempt.trigger_id
    assert CorrelationKey.objects.get(key="child:1").work_id == child.pk


def later_attempt(clock, work, attempt):
    """The first attempt consumes its input and completes, leaving the Work ready with a later
    Event queued; the next attempt starts with that Event as its trigger."""
    consume_all(clock, work, attempt)
    later = accept(clock, "x.later", {"keys": []}, correlation=["pr:acme/api#1"])
    router(clock).route(later.seq)
    work_complete(attempt_id=attempt.pk, lease_epoch=1, clock=clock)
    second = attempt_start(
        work_id=work.pk, binding="triage", executor="python", generation=1, capabilities=[], clock=clock
    )
    return later, second


def test_r50_a_later_attempts_child_is_caused_by_that_attempts_trigger(clock, running):
    """The child's core.work.created Event descends from the trigger of the attempt that
    creates it, not from the Work's first trigger."""
    work, attempt = running
    later, second = later_attempt(clock, work, attempt)
    assert second.trigger_id == later.seq != work.trigger_id
    created = lifecycle.work_create_child(
        attempt_id=second.pk, lease_epoch=second.lease_epoch, binding="plain", clock=clock
    )
    assert created.event.parent_id == later.seq
    assert created.event.data["attempt"] == second.pk


def test_r46_input_consumed_already_cannot_be_consumed_again_by_a_later_attempt(clock, running):
    """Consumed input keeps the attempt that consumed it: a later attempt naming it again is
    refused and nothing changes."""
    work, attempt = running
    consumed = list(WorkInput.objects.filter(work=work, state=InputState.PENDING))
    consume_all(clock, work, attempt)
    _, second = later_attempt(clock, work, attempt)
    with pytest.raises(WorkError, match="not pending"), transaction.atomic():
        consume_inputs_in_tx(
            attempt_id=second.pk,
            lease_epoch=second.lease_epoch,
            input_ids=[row.pk for row in consumed],
            clock=clock,
        )
    assert set(
        WorkInput.objects.filter(pk__in=[r.pk for r in consumed]).values_list("attempt_id", flat=True)
    ) == {attempt.pk}


def test_r46_consuming_input_confirms_the_intents_behind_it_and_nothing_else(clock, running):
    """Consumption marks the named input consumed by the attempt, at the clock's time, and
    confirms the attempt's intents for those Events alone; naming an input twice is naming it
    once."""
    work, attempt = running
    first = WorkInput.objects.get(work=work, state=InputState.PENDING)
    edited, again = (
        accept(clock, "github.pull_request.edited", {"repo": "acme/api", "number": 1}, id=f"ed{n}")
        for n in range(2)
    )
    r = router(clock)
    r.route(edited.seq)
    r.route(again.seq)
    r.close()
    injected = WorkInput.objects.get(event=edited)
    # Intents for the same Event that are not this attempt's pending ones at its epoch: an
    # earlier attempt's, one of an earlier lease epoch, and this epoch's for the other Event
    # superseded already. Consumption leaves them as they are.
    earlier = AttemptFactory(work=work, number=0, state="failed", ended_at=clock())
    others = [
        IntentFactory(attempt=earlier, event=edited),
        IntentFactory(attempt=attempt, lease_epoch=0, event=edited),
    ]
    clock.advance(3)
    with transaction.atomic():
        rows = consume_inputs_in_tx(
            attempt_id=attempt.pk,
            lease_epoch=1,
            input_ids=[injected.pk, first.pk, injected.pk],
            clock=clock,
        )
    assert [(row.pk, row.state, row.attempt_id, row.consumed_at) for row in rows] == [
        (first.pk, "consumed", attempt.pk, clock()),
        (injected.pk, "consumed", attempt.pk, clock()),
    ]
    stored = WorkInput.objects.filter(pk__in=[first.pk, injected.pk])
    assert set(stored.values_list("state", "attempt_id", "consumed_at")) == {
        ("consumed", attempt.pk, clock())
    }
    mine = Intent.objects.filter(work=work, attempt=attempt, lease_epoch=1)
    assert set(mine.values_list("event_id", "state", "confirmed_at")) == {
        (edited.seq, "confirmed", clock()),
        (again.seq, "pending", None),
    }
    assert set(Intent.objects.filter(pk__in=[i.pk for i in others]).values_list("state", flat=True)) == {
        "pending"
    }
    assert WorkInput.objects.get(event=again).state == InputState.PENDING


def test_r46_a_superseded_intent_is_not_confirmed_by_consuming_its_input(clock, running):
    work, attempt = running
    consume_all(clock, work, attempt)
    edited = accept(clock, "github.pull_request.edited", {"repo": "acme/api", "number": 1})
    router(clock).route(edited.seq)
    Intent.objects.filter(event=edited).update(state="superseded")
    with transaction.atomic():
        consume_inputs_in_tx(
            attempt_id=attempt.pk,
            lease_epoch=1,
            input_ids=[WorkInput.objects.get(event=edited).pk],
            clock=clock,
        )
    assert Intent.objects.get(event=edited).state == "superseded"


def test_r46_intents_inspects_the_intents_of_a_work_or_an_attempt_in_event_order(clock, running):
    work, attempt = running
    earlier = AttemptFactory(work=work, number=0, state="failed", ended_at=clock())
    first, second, third = EventFactory(), EventFactory(), EventFactory()
    mine = [IntentFactory(attempt=attempt, event=second), IntentFactory(attempt=attempt, event=first)]
    older = IntentFactory(attempt=earlier, event=third)
    elsewhere = IntentFactory()
    assert [i.pk for i in intents(attempt_id=attempt.pk)] == [mine[1].pk, mine[0].pk]
    assert [i.pk for i in intents(work_id=work.pk)] == [mine[1].pk, mine[0].pk, older.pk]
    assert [i.pk for i in intents(work_id=work.pk, attempt_id=earlier.pk)] == [older.pk]
    assert [i.pk for i in intents(work_id=elsewhere.work_id, attempt_id=earlier.pk)] == []
    assert {i.pk for i in intents()} == {*(i.pk for i in mine), older.pk, elsewhere.pk}


def test_r46_input_of_another_work_is_not_consumed(clock, running):
    work, attempt = running
    other = accept(clock, "github.pull_request.opened", {"repo": "acme/api", "number": 2})
    router(clock).route(other.seq)
    foreign = WorkInput.objects.get(event=other)
    mine = WorkInput.objects.get(work=work, state=InputState.PENDING)
    with (
        pytest.raises(WorkError, match="^some input does not belong to this attempt's Work$"),
        transaction.atomic(),
    ):
        consume_inputs_in_tx(
            attempt_id=attempt.pk, lease_epoch=1, input_ids=[mine.pk, foreign.pk], clock=clock
        )
    assert set(WorkInput.objects.values_list("state", flat=True)) == {InputState.PENDING}


def test_r50_child_with_a_stale_lease_is_refused(clock, running):
    work, attempt = running
    with pytest.raises(StaleLease):
        lifecycle.work_create_child(attempt_id=attempt.pk, lease_epoch=7, binding="plain", clock=clock)
    assert not Work.objects.filter(parent=work).exists()


def test_r61_child_publication_is_atomic_with_its_event(clock, running):
    work, attempt = running
    causal = Causal(clock, Limits(max_depth=0, rate_per_minute=128))
    count = Work.objects.count()
    with pytest.raises(CausalRefused):
        lifecycle.work_create_child(
            attempt_id=attempt.pk,
            lease_epoch=1,
            binding="plain",
            keys=["child:2"],
            clock=clock,
            causal=causal,
        )
    assert Work.objects.count() == count
    assert not CorrelationKey.objects.filter(key="child:2").exists()
    assert not Event.objects.filter(type="core.work.created").exists()


def test_r50_successor_requires_a_terminal_predecessor_and_distinct_keys(clock, running):
    work, attempt = running
    with pytest.raises(WorkError, match="only terminal Work"):
        lifecycle.work_create_successor(
            predecessor_id=work.pk, scope="acme", binding="triage", keys=["next"], clock=clock
        )
    lifecycle.work_cancel_in_tx(work_id=work.pk, clock=clock)
    with pytest.raises(WorkError, match="owned by Work"):
        lifecycle.work_create_successor(
            predecessor_id=work.pk, scope="acme", binding="triage", keys=["pr:acme/api#1"], clock=clock
        )
    created = lifecycle.work_create_successor(
        predecessor_id=work.pk, scope="acme", binding="triage", keys=["pr:acme/api#1/v2"], clock=clock
    )
    assert created.work.parent_id is None and created.work.predecessor_id == work.pk
    assert created.event.data == {"work": created.work.pk, "predecessor": work.pk}
    assert CorrelationKey.objects.get(key="pr:acme/api#1").work_id == work.pk, "old keys stay"
    with pytest.raises(WorkError, match="already has a successor"):
        lifecycle.work_create_successor(
            predecessor_id=work.pk, scope="acme", binding="triage", keys=["x"], clock=clock
        )


@pytest.mark.django_db(transaction=True)
def test_r61_successor_publication_is_atomic_with_its_event(clock, running):
    work, attempt = running
    lifecycle.work_cancel_in_tx(work_id=work.pk, clock=clock)
    refusing = Causal(clock, Limits(max_depth=0, rate_per_minute=128))
    count, events = Work.objects.count(), Event.objects.count()
    with pytest.raises(CausalRefused):
        lifecycle.work_create_successor(
            predecessor_id=work.pk,
            scope="acme",
            binding="triage",
            keys=["pr:acme/api#1/v2"],
            clock=clock,
            causal=refusing,
        )
    assert Work.objects.count() == count and not Work.objects.filter(predecessor=work).exists()
    assert not CorrelationKey.objects.filter(key="pr:acme/api#1/v2").exists()
    assert Event.objects.count() == events
    assert not Event.objects.filter(type="core.work.created").exists()
    # Nothing half-published stands in the way: the successor can still be created, once.
    created = lifecycle.work_create_successor(
        predecessor_id=work.pk, scope="acme", binding="triage", keys=["pr:acme/api#1/v2"], clock=clock
    )
    assert Work.objects.get(predecessor=work).pk == created.work.pk
    assert Event.objects.get(type="core.work.created").seq == created.event.seq
    assert created.work.trigger_id == created.event.seq


@pytest.mark.django_db(transaction=True)
def test_r61_successor_whose_keys_are_taken_publishes_neither_work_nor_event(clock, running):
    work, attempt = running
    lifecycle.work_cancel_in_tx(work_id=work.pk, clock=clock)
    count, events = Work.objects.count(), Event.objects.count()
    with pytest.raises(WorkError, match="owned by Work"):
        lifecycle.work_create_successor(
            predecessor_id=work.pk, scope="acme", binding="triage", keys=["new", "pr:acme/api#1"], clock=clock
        )
    assert (Work.objects.count(), Event.objects.count()) == (count, events)
    assert not CorrelationKey.objects.filter(key="new").exists()


def test_r60_successor_target_scope(clock, running):
    work, attempt = running
    lifecycle.work_cancel_in_tx(work_id=work.pk, clock=clock)
    created = lifecycle.work_create_successor(
        predecessor_id=work.pk, scope="acme/web", binding="triage", keys=["thread:next"], clock=clock
    )
    assert created.work.scope == "acme/web" and created.event.scope == "acme/web"
    follow = accept(clock, "chat.message", {"thread": "next"}, scope="acme/web")
    old = accept(clock, "github.pull_request.edited", {"repo": "acme/api", "number": 1})
    r = router(clock)
    r.route(follow.seq)
    r.route(old.seq)
    assert RouteRecord.objects.get(event=follow).work_id == created.work.pk
    assert RouteRecord.objects.get(event=old).work_id == work.pk
    assert RouteRecord.objects.get(event=old).reason == "terminal"


def _cancel_one(work, now, clock):
    lifecycle.work_cancel_in_tx(work_id=work.pk, clock=clock)


def _cancel_many(work, now, clock):
    with transaction.atomic():
        done = WorkFactory(status="completed", ended_at=T0)  # terminal already: left as it is
        assert lifecycle.works_cancel_in_tx(works=[work, done], now=now) == ([work.pk], 1)
    assert Work.objects.get(pk=done.pk).status == "completed"


def _belongings(work, *, attempt_state="running"):
    """One of each row a cancel ends, live, beside one already ended, of ``work`` (and a wait
    of no attempt, with its subscription)."""
    live = AttemptFactory(work=work, state=attempt_state)
    ended = AttemptFactory(work=work, state="succeeded", ended_at=T0)
    wait = WaitFactory(work=work, attempt=live)
    unattended = WaitFactory(work=work, attempt=None)  # a wait no attempt's end reaches
    return {
        "attempts": (live, ended),
        "waits": (wait, WaitFactory(work=work, attempt=ended, state="woken", ended_at=T0), unattended),
        "timers": (TimerFactory(work=work), TimerFactory(work=work, state="fired")),
        "inputs": (WorkInputFactory(work=work), WorkInputFactory(work=work, state="consumed")),
        "intents": (IntentFactory(attempt=live), IntentFactory(attempt=ended, state="confirmed")),
        "subscriptions": (
            DependencySubscriptionFactory(wait=wait, work=work),
            DependencySubscriptionFactory(work=work, active=False),
            DependencySubscriptionFactory(wait=unattended, work=work),
        ),
    }


def _states(rows):
    """Each row's state as stored now (subscriptions: whether active), with its end time."""
    fields = {"subscriptions": ("active",), "timers": ("state",), "inputs": ("state",), "intents": ("state",)}
    return {
        name: [
            tuple(
                type(row)
                .objects.filter(pk=row.pk)
                .values_list(*fields.get(name, ("state", "ended_at")))
                .get()
            )
            for row in pair
        ]
        for name, pair in rows.items()
    }


@pytest.mark.parametrize("cancel", [_cancel_one, _cancel_many], ids=["one", "many"])
def test_r48_cancel_ends_exactly_the_live_rows_of_the_cancelled_work(clock, cancel):
    """A cancel (of one Work, or of many at once) ends the Work's live attempt, wait, timer,
    input, intent and subscription, and nothing already ended, nor another Work's rows."""
    clock.now = now = T0 + timedelta(minutes=5)  # later than every row was made or ended
    work = WorkFactory(status="running", version=4, retry_at=T0, pending_run=True)
    bystander = WorkFactory(status="running", version=4, retry_at=T0, pending_run=True)
    mine, theirs = _belongings(work), _belongings(bystander)
    untouched = _states(theirs)

    cancel(work, now, clock)

    assert _states(mine) == {
        "attempts": [("cancelled", now), ("succeeded", T0)],
        "waits": [("cancelled", now), ("woken", T0), ("cancelled", now)],
        "timers": [("cancelled",), ("fired",)],
        "inputs": [("dropped",), ("consumed",)],
        "intents": [("superseded",), ("confirmed",)],
        "subscriptions": [(False,), (False,), (False,)],
    }
    assert _states(theirs) == untouched
    cancelled = Work.objects.get(pk=work.pk)
    assert (cancelled.status, cancelled.version, cancelled.updated_at, cancelled.ended_at) == (
        "cancelled",
        5,
        now,
        now,
    )
    assert (cancelled.retry_at, cancelled.pending_run) == (None, False)
    other = Work.objects.get(pk=bystander.pk)
    assert (other.status, other.version, other.retry_at, other.pending_run) == ("running", 4, T0, True)


def test_r48_cancelling_only_terminal_work_at_once_cancels_nothing(clock):
    with transaction.atomic():
        done = WorkFactory(status="completed", ended_at=T0)
        assert lifecycle.works_cancel_in_tx(works=[done], now=clock()) == ([], 0)


def test_r47_unrouted_input_of_a_work_is_what_names_its_key_its_id_or_one_of_its_attempts():
    """The unrouted Events that hold a Work's completion, by Work asked about: those carrying a
    key it owns (in its scope), its id, or the id of one of its attempts; routed ones, and
    those addressed to Work not asked about, are not."""
    first, second, third, other, idle = (WorkFactory() for _ in range(5))
    key = {w.pk: CorrelationKeyFactory(work=w).key for w in (first, second, third, other)}
    attempt = {w.pk: AttemptFactory(work=w).pk for w in (first, second, third, other)}

    def unrouted(**fields):
        return EventFactory(**fields).seq

    held_first = [
        unrouted(correlation=[key[first.pk]]),
        unrouted(work_id=first.pk),
        unrouted(execution_id=attempt[first.pk]),
        unrouted(work_id=first.pk, execution_id=attempt[first.pk]),
    ]
    held_second = [
        unrouted(correlation=[key[second.pk], "nobody's"]),
        unrouted(work_id=other.pk, execution_id=attempt[second.pk]),
    ]
    held_third = [unrouted(execution_id=attempt[third.pk])]
    for work in (first, second, third):
        EventFactory(route_state="routed", correlation=[key[work.pk]])
        EventFactory(route_state="routed", work_id=work.pk)
        EventFactory(route_state="routed", execution_id=attempt[work.pk])
    unrouted(correlation=[key[other.pk]])
    unrouted(work_id=other.pk)
    unrouted(execution_id=attempt[other.pk])
    unrouted(scope="acme/web", correlation=[key[first.pk]])  # the same key in another scope

    assert lifecycle.unrouted_inputs_for([first.pk, second.pk, third.pk, idle.pk]) == {
        first.pk: held_first,
        second.pk: held_second,
        third.pk: held_third,
    }


def _summary(result):
    if isinstance(result, WorkError):
        return (type(result).__name__, str(result))
    return ("Work", result.pk, result.status)


WORK_STATE = (
    "status",
    "version",
    "updated_at",
    "ended_at",
    "failures",
    "losses",
    "pending_run",
    "retry_at",
    "parked_at",
    "last_error",
)


def test_r47_completing_several_attempts_at_once_answers_each_and_refuses_one_without_stopping_the_others(
    clock,
):
    """Each attempt completes or is refused on its own: a stale or unknown attempt, or Work
    with unrouted input (named, at most ten seqs), is refused and left as it was; the others
    end succeeded now, and their Work, reset (failures, losses, backoff, park, last error), is
    ready when input is still pending for it, else completed."""
    clock.now = now = T0 + timedelta(minutes=5)
    troubled = {
        "status": "running",
        "version": 4,
        "failures": 2,
        "losses": 1,
        "pending_run": True,
        "retry_at": T0,
        "parked_at": T0,
        "last_error": "attempt 1 failed: boom",
    }
    stale = AttemptFactory(work=WorkFactory(**troubled), lease_epoch=2)
    held = AttemptFactory(work=WorkFactory(**troubled))
    ready = AttemptFactory(work=WorkFactory(**troubled))
    completed = AttemptFactory(work=WorkFactory(**troubled))
    WorkInputFactory(work=ready.work)
    WorkInputFactory(work=completed.work, state="consumed")
    WorkInputFactory(work=held.work)
    unrouted = [EventFactory(work_id=held.work_id).seq for _ in range(11)]
    missing = completed.pk + 100

    results = lifecycle.works_complete(
        authorities=[(stale.pk, 1), (missing, 1), (held.pk, 1), (ready.pk, 1), (completed.pk, 1)], clock=clock
    )

    assert {attempt: _summary(result) for attempt, result in results.items()} == {
        stale.pk: ("StaleLease", f"attempt {stale.pk} is at lease epoch 2, not 1"),
        missing: ("StaleLease", f"no attempt {missing}"),
        held.pk: (
            "UnroutedInput",
            f"Work {held.work_id} has unrouted input: " + ", ".join(f"#{seq}" for seq in unrouted[:10]),
        ),
        ready.pk: ("Work", ready.work_id, "ready"),
        completed.pk: ("Work", completed.work_id, "completed"),
    }
    untouched = ("running", 4, T0, None, 2, 1, True, T0, T0, "attempt 1 failed: boom")
    reset = (0, 0, False, None, None, "")
    attempts = (stale, held, ready, completed)
    assert [Work.objects.filter(pk=a.work_id).values_list(*WORK_STATE).get() for a in attempts] == [
        untouched,
        untouched,
        ("ready", 5, now, None, *reset),
        ("completed", 5, now, now, *reset),
    ]
    assert [Attempt.objects.filter(pk=a.pk).values_list("state", "ended_at").get() for a in attempts] == [
        ("running", None),
        ("running", None),
        ("succeeded", now),
        ("succeeded", now),
    ]


def test_r47_completing_many_attempts_at_once_takes_as_many_statements_as_completing_one(clock):
    def statements(count):
        attempts = [AttemptFactory(work__status="running") for _ in range(count)]
        with CaptureQueriesContext(connection) as queries:
            results = lifecycle.works_complete(authorities=[(a.pk, 1) for a in attempts], clock=clock)
        assert {r.status for r in results.values()} == {"completed"}
        return len(queries)

    assert statements(3) == statements(1)


def test_r50_a_child_of_work_without_a_trigger_runs_with_a_root_event_addressed_to_it(clock):
    """A child's core.work.created Event carries the data given, is addressed to the child and
    is its trigger (stored, and on the Work returned); without a trigger to descend from it is
    a root. The child runs on its binding without waiting for input."""
    clock.now = now = T0 + timedelta(minutes=5)
    attempt = AttemptFactory(work__status="running")
    created = lifecycle.work_create_child(
        attempt_id=attempt.pk,
        lease_epoch=1,
        binding="plain",
        keys=["child:1"],
        data={"task": "lint"},
        clock=clock,
    )
    child = Work.objects.get(pk=created.work.pk)
    event = Event.objects.get(seq=created.event.seq)
    assert (
        child.parent_id,
        child.scope,
        child.binding,
        child.status,
        child.pending_run,
        child.created_at,
    ) == (
        attempt.work_id,
        "acme",
        "plain",
        "ready",
        True,
        now,
    )
    assert (child.trigger_id, created.work.trigger_id) == (event.seq, event.seq)
    assert (event.type, event.source, event.scope, event.work_id, event.parent_id, event.depth) == (
        "core.work.created",
        "core.worklife",
        "acme",
        child.pk,
        None,
        0,
    )
    assert event.data == {
        "work": child.pk,
        "parent": attempt.work_id,
        "attempt": attempt.pk,
        "data": {"task": "lint"},
    }
    assert CorrelationKey.objects.get(key="child:1").work_id == child.pk


def test_r50_a_child_whose_data_cannot_be_stored_is_refused_saying_why(clock):
    attempt = AttemptFactory(work__status="running")
    with pytest.raises(WorkError, match=r"^data\.data\.text: NUL characters \(\\u0000\) are not allowed$"):
        lifecycle.work_create_child(
            attempt_id=attempt.pk, lease_epoch=1, binding="plain", data={"text": "a\x00b"}, clock=clock
        )
    assert not Work.objects.filter(parent=attempt.work).exists()


def test_r26_a_child_key_another_work_owns_is_refused_naming_its_owner(clock):
    attempt = AttemptFactory(work__status="running")
    CorrelationKeyFactory(work__scope="acme/web", key="shared")  # the same key in another scope
    CorrelationKeyFactory(key="first")
    owner = CorrelationKeyFactory(key="shared").work
    with pytest.raises(WorkError) as refused:
        lifecycle.work_create_child(
            attempt_id=attempt.pk, lease_epoch=1, binding="plain", keys=["mine", "shared"], clock=clock
        )
    assert str(refused.value) == f"key 'shared' in scope acme is owned by Work {owner.pk}"
    assert not Work.objects.filter(parent=attempt.work).exists()
    assert not CorrelationKey.objects.filter(key="mine").exists()


def test_r50_a_successor_takes_new_keys_and_runs_with_an_event_carrying_its_data(clock):
    clock.now = now = T0 + timedelta(minutes=5)
    done = WorkFactory(status="completed", ended_at=T0)
    with pytest.raises(WorkError, match="^a successor needs its own external keys$"):
        lifecycle.work_create_successor(
            predecessor_id=done.pk, scope="acme", binding="triage", keys=[], clock=clock
        )
    assert not Work.objects.filter(predecessor=done).exists()

    created = lifecycle.work_create_successor(
        predecessor_id=done.pk,
        scope="acme/web",
        binding="triage",
        keys=["next:1"],
        data={"why": "reopened"},
        clock=clock,
    )
    successor = Work.objects.get(predecessor=done)
    event = Event.objects.get(seq=created.event.seq)
    assert (
        successor.pk,
        successor.scope,
        successor.binding,
        successor.pending_run,
        successor.created_at,
    ) == (
        created.work.pk,
        "acme/web",
        "triage",
        True,
        now,
    )
    assert (successor.trigger_id, created.work.trigger_id) == (event.seq, event.seq)
    assert (event.work_id, event.scope, event.data) == (
        successor.pk,
        "acme/web",
        {"work": successor.pk, "predecessor": done.pk, "data": {"why": "reopened"}},
    )


def test_r30_the_first_input_of_an_opened_work_becomes_its_trigger_and_stays_it():
    opened, bystander = WorkFactory(), WorkFactory()
    first, second = EventFactory(), EventFactory()
    with transaction.atomic():
        lifecycle.work_trigger_set_in_tx(work_id=opened.pk, event=first)
        lifecycle.work_trigger_set_in_tx(work_id=opened.pk, event=second)
    assert dict(Work.objects.filter(pk__in=[opened.pk, bystander.pk]).values_list("pk", "trigger_id")) == {
        opened.pk: first.seq,
        bystander.pk: None,
    }


REBIND_CASES = [
    # (what the Work is, its fields, whether its retry takes the new binding, its retry_at after)
    ("ready with nothing holding it", {}, False, None),
    ("parked after lost attempts", {"parked_at": T0, "losses": 3, "pending_run": True}, True, None),
    ("backing off", {"failures": 1, "retry_at": T0 + timedelta(minutes=1)}, True, T0 + timedelta(minutes=1)),
    ("running again after a failure", {"status": "running", "failures": 1}, True, None),
    (
        "a refused dispatch looked at again later",
        {"retry_at": T0 + timedelta(seconds=30)},
        True,
        T0 + timedelta(seconds=30),
    ),
    (
        "waiting for a binding that can run it",
        {"awaiting_binding": True, "retry_at": T0 + timedelta(seconds=30)},
        True,
        None,
    ),
]


@pytest.mark.parametrize(
    ("fields", "retry", "retry_at"), [c[1:] for c in REBIND_CASES], ids=[c[0] for c in REBIND_CASES]
)
def test_r30_rebinding_records_the_binding_after_the_latest_attempt_and_moves_pending_input(
    clock, fields, retry, retry_at
):
    """A rebind is recorded after the Work's latest attempt; a parked, backing-off or failed
    Work's retry takes the new binding; a Work waiting for a binding is looked at again at
    once; its pending queued, context and held input moves to the new binding, and nothing
    else does."""
    clock.now = now = T0 + timedelta(minutes=5)
    bystander = WorkFactory()
    AttemptFactory(work=bystander, number=5, state="failed", ended_at=T0)
    AttemptFactory(work=bystander, number=6, state="failed", ended_at=T0)
    work = WorkFactory(version=4, **fields)
    AttemptFactory(work=work, number=2, state="failed", ended_at=T0)
    AttemptFactory(work=work, number=1, state="failed", ended_at=T0)
    moved = [WorkInputFactory(work=work, kind=kind) for kind in ("queue", "context", "held")]
    kept = [
        WorkInputFactory(work=work, kind="inject"),
        WorkInputFactory(work=work, state="consumed"),
        WorkInputFactory(work=bystander),
    ]

    with transaction.atomic():
        rebound = lifecycle.work_rebind_in_tx(work_id=work.pk, binding="plain", now=now)

    assert (rebound.work.pk, rebound.after_attempt, rebound.retry) == (work.pk, 2, retry)
    shape = (
        "rebind_binding",
        "rebind_after_attempt",
        "retry_binding",
        "retry_at",
        "awaiting_binding",
        "version",
        "updated_at",
    )
    stored = Work.objects.filter(pk=work.pk).values_list(*shape).get()
    assert stored == ("plain", 2, "plain" if retry else "", retry_at, False, 5, now)
    assert tuple(getattr(rebound.work, f) for f in shape) == stored
    assert Work.objects.filter(pk=bystander.pk).values_list(*shape).get() == (
        "",
        None,
        "",
        None,
        False,
        1,
        T0,
    )
    assert [
        row.binding for row in WorkInput.objects.filter(pk__in=[r.pk for r in moved + kept]).order_by("pk")
    ] == [
        "plain",
        "plain",
        "plain",
        "triage",
        "triage",
        "triage",
    ]


def test_r49_terminal_work_cannot_be_rebound(clock):
    done = WorkFactory(status="completed", ended_at=T0)
    with (
        pytest.raises(WorkTerminal, match=f"^Work {done.pk} is completed: terminal Work cannot be rebound$"),
        transaction.atomic(),
    ):
        lifecycle.work_rebind_in_tx(work_id=done.pk, binding="plain", now=clock())
    assert Work.objects.filter(pk=done.pk).values_list("rebind_binding", "version").get() == ("", 1)
