"""Dependency subscriptions made by real attempts (R42): a wait across scopes subscribes and the
Event wakes it, a wait on a scope it may not name is refused, and an attempt ended while it
waits ends its subscription. Python workers and commands run by a real work loop, Events
accepted and routed by the real router."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction

from causal.limits import Causal, Limits, derived_atomic
from causal.models import Event
from routing.models import RouteRecord
from routing.setup.trace import trace
from tests.causal.factories import EventFactory
from tests.routing.routerkit import apply
from tests.worklife.attemptkit import attempt_start
from tests.worklife.callkit import (
    document,
    result,
    send,
    work_of,
)
from tests.worklife.enginekit import status, step_until
from tests.worklife.factories import WorkFactory, WorkInputFactory
from worklife.attempts import attempts_end_in_tx
from worklife.errors import WorkError
from worklife.models import Attempt, DependencySubscription, Wait, Work, WorkInput
from worklife.waits import (
    SCOPE_MAX,
    attempt_wait,
    attempt_wait_for,
    wait_block_in_tx,
    wait_time_out_in_tx,
    wait_wake_in_tx,
    waits_expire,
    waits_retry_blocked,
    wake_bridge_envelope,
    wake_bridge_in_tx,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def configured(clock, test_handlers):
    apply(clock, document())


def test_r42_a_wait_across_scopes_subscribes_and_the_event_wakes_it(clock, loop):
    py = work_of(send(clock, "t.py_waits", key="p"))
    cmd = work_of(send(clock, "t.cmd_waits", key="c"))
    step_until(loop, lambda: status(py) == "waiting" and status(cmd) == "waiting")
    subscriptions = {s.work_id: s for s in DependencySubscription.objects.select_related("wait")}
    assert set(subscriptions) == {py.pk, cmd.pk}
    for work_id, sub in subscriptions.items():
        assert (sub.scope, sub.match, sub.active) == ("ci", {"type": "ci.build.*"}, True)
        assert (sub.wait.work_id, sub.wait.state) == (work_id, "active")

    # Another scope's Event the subscriptions do not match wakes nothing.
    lint = send(clock, "ci.lint", scope="ci", n=1)
    for _ in range(5):
        loop.step()
    assert (status(py), status(cmd)) == ("waiting", "waiting")
    assert RouteRecord.objects.get(event_id=lint.seq).policy == "unmatched"

    payload = {"id": "b2", "source": "ci", "type": "ci.build.done", "scope": "ci", "data": {"n": 2}}
    predicted = trace(payload=payload, clock=clock)
    waits = {w.work_id: w for w in Wait.objects.filter(state="active")}
    for work in (py, cmd):
        assert any(
            f"also wakes Work {work.pk}'s wait {waits[work.pk].name or waits[work.pk].pk} in scope t" in note
            for note in predicted.notes
        ), predicted.notes
    build = send(clock, "ci.build.done", scope="ci", n=2)
    # The handlers' own verdict is kept: the build starts its own Work in scope ci.
    record = RouteRecord.objects.get(event_id=build.seq)
    assert (record.route, Work.objects.get(pk=record.work_id).scope) == ("builds", "ci")
    step_until(loop, lambda: status(py) == "completed" and status(cmd) == "completed")
    assert result(py) == {"came": build.seq, "scope": "ci"}
    reply = result(cmd)
    assert (reply["ok"], reply["value"]["seq"], reply["value"]["scope"]) == (True, build.seq, "ci")
    assert set(Wait.objects.values_list("state", "woken_by")) == {("woken", build.seq)}
    assert not DependencySubscription.objects.filter(active=True).exists()
    bridges = Event.objects.filter(type="core.wait.woken")
    assert sorted(bridges.values_list("work_id", "parent_id", "scope")) == sorted(
        [(py.pk, build.seq, "t"), (cmd.pk, build.seq, "t")]
    )


def test_r42_a_wait_on_a_malformed_or_unknown_scope_is_refused_and_subscribes_nothing(clock, loop):
    py = work_of(send(clock, "t.py_refused", key="r"))
    cmd = work_of(send(clock, "t.cmd_refused", key="u"))
    bad = work_of(send(clock, "t.cmd_bad_scope", key="b"))
    step_until(loop, lambda: {status(py), status(cmd), status(bad)} == {"completed"})
    unknown, malformed, dots = result(py)["refusals"]
    assert unknown.startswith("wait refused: unknown scope 'nowhere'") and "live configuration" in unknown
    assert malformed.startswith("wait refused: 'Not a path!' is not a scope path")
    assert dots.startswith("wait refused: 't/..' is not a scope path")
    reply = result(cmd)
    assert not reply["ok"] and reply["error"].startswith("wait refused: unknown scope 'nowhere'")
    assert result(bad)["error"].startswith("wait refused: scope must be a scope path")
    assert not Wait.objects.exists() and not DependencySubscription.objects.exists()


def test_r42_an_attempt_ended_while_it_waits_ends_its_subscription(clock, loop):
    work = work_of(send(clock, "t.py_waits", key="x"))
    step_until(loop, lambda: status(work) == "waiting")
    (attempt,) = Attempt.objects.filter(work=work)
    with transaction.atomic():
        attempts_end_in_tx(attempts=[attempt], state="failed", now=clock())
    assert Wait.objects.get(work=work).state == "cancelled"
    assert not DependencySubscription.objects.filter(active=True).exists()


# --- a wait's timeout at its boundaries (R41) ----------------------------------------------------


def parked(clock, timeout):
    """A started attempt of a new Work, parked on a wait of ``timeout`` seconds."""
    attempt = started(clock)
    return attempt_wait_for(
        attempt_id=attempt.pk,
        lease_epoch=attempt.lease_epoch,
        match={"type": "x.*"},
        timeout=timeout,
        name="review",
        clock=clock,
    )


@pytest.mark.django_db
def test_r41_a_wait_due_exactly_now_times_out(clock):
    wait = parked(clock, 30)
    clock.advance(29)
    assert waits_expire(clock=clock) == []
    clock.advance(1)  # its timeout_at is now
    assert waits_expire(clock=clock) == [wait.pk]
    assert Wait.objects.get(pk=wait.pk).state == "timed_out"


@pytest.mark.django_db
def test_r41_a_wait_of_no_time_is_allowed_and_times_out_at_once(clock):
    """``timeout=0`` is a non-negative number of seconds: the wait is due as it is made."""
    wait = parked(clock, 0)
    assert wait.timeout_at == clock()
    assert waits_expire(clock=clock) == [wait.pk]
    with pytest.raises(WorkError, match="non-negative"):
        parked(clock, -1)


def started(clock):
    """The first attempt of a new ready Work (lease epoch 1)."""
    work = WorkFactory(status="ready")
    return attempt_start(
        work_id=work.pk, binding="triage", executor="python", generation=1, capabilities=[], clock=clock
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("match", "kept"),
    [
        pytest.param(
            {"type": "x.*", "source": "gh", "keys": ["k:1"], "subject": "s"},
            {"type": "x.*", "source": "gh", "keys": ["k:1"]},
            id="type-source-keys",
        ),
        pytest.param({"type": 3, "source": "", "keys": []}, {}, id="nothing-usable"),
    ],
)
def test_r41_a_wait_keeps_only_the_type_source_and_keys_of_its_match(clock, match, kept):
    attempt = started(clock)
    wait = attempt_wait_for(
        attempt_id=attempt.pk, lease_epoch=1, match=match, timeout=None, name=None, clock=clock
    )
    assert (wait.match, wait.timeout_at, wait.name) == (kept, None, "")
    assert not DependencySubscription.objects.exists()


@pytest.mark.django_db
def test_r41_a_wait_times_out_after_its_timeout_and_keeps_a_short_name(clock):
    attempt = started(clock)
    wait = attempt_wait_for(
        attempt_id=attempt.pk, lease_epoch=1, match={}, timeout=1.5, name="n" * 200, clock=clock, scope=None
    )
    assert wait.timeout_at == clock() + timedelta(seconds=1.5) and wait.name == "n" * 128
    assert not DependencySubscription.objects.exists()


@pytest.mark.django_db
def test_r42_a_wait_on_a_scope_of_the_longest_path_subscribes_to_it(clock):
    attempt = started(clock)
    longest = "s" * SCOPE_MAX
    wait = attempt_wait_for(
        attempt_id=attempt.pk,
        lease_epoch=1,
        match={"type": "x.*"},
        timeout=None,
        name="w",
        clock=clock,
        scope=longest,
    )
    assert DependencySubscription.objects.get(wait=wait).scope == longest


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"timeout": True}, "timeout must be a non-negative number of seconds, got True"),
        ({"timeout": "5"}, "timeout must be a non-negative number of seconds, got '5'"),
        ({"timeout": -0.5}, "timeout must be a non-negative number of seconds, got -0.5"),
        ({"match": {"keys": "k:1"}}, "keys must be a list of strings"),
        ({"match": {"keys": ["k:1", 2]}}, "keys must be a list of strings"),
        ({"scope": 5}, f"scope must be a scope path (a string of at most {SCOPE_MAX} characters)"),
        ({"scope": "s" * (SCOPE_MAX + 1)}, "scope must be a scope path"),
    ],
)
def test_r41_a_wait_with_a_bad_timeout_keys_or_scope_is_refused_and_nothing_is_stored(
    clock, arguments, message
):
    attempt = started(clock)
    call = {"match": {"type": "x.*"}, "timeout": None, "scope": "", **arguments}
    with pytest.raises(WorkError) as refused:
        attempt_wait_for(attempt_id=attempt.pk, lease_epoch=1, name="w", clock=clock, **call)
    assert str(refused.value).startswith(message)
    assert not Wait.objects.exists()
    assert Attempt.objects.get(pk=attempt.pk).state == "running"


# --- ending, blocking and bridging a wait, beside another Work's (R41, R42) ----------------------


def two_parked(clock):
    """Two Works, each with its attempt parked on a wait subscribed to scope ``acme/web``."""
    waits = []
    for _ in range(2):
        attempt = started(clock)
        waits.append(
            attempt_wait_for(
                attempt_id=attempt.pk,
                lease_epoch=1,
                match={"type": "x.*"},
                timeout=None,
                name="w",
                clock=clock,
                scope="acme/web",
            )
        )
    return waits


def states(wait):
    wait.refresh_from_db()
    work = Work.objects.get(pk=wait.work_id)
    return (
        wait.state,
        Attempt.objects.get(pk=wait.attempt_id).state,
        work.status,
        DependencySubscription.objects.get(wait=wait).active,
    )


@pytest.mark.django_db
def test_r41_waking_a_wait_ends_it_and_resumes_its_attempt_alone(clock):
    mine, other = two_parked(clock)
    won, refused = EventFactory(), EventFactory()
    versions = {w.work_id: Work.objects.get(pk=w.work_id).version for w in (mine, other)}
    clock.advance(5)
    with transaction.atomic():
        wait_block_in_tx(wait_id=mine.pk, reason="r" * 600, event_seq=refused.seq)
        assert wait_wake_in_tx(wait_id=mine.pk, event_seq=won.seq, now=clock())
        assert not wait_wake_in_tx(wait_id=mine.pk, event_seq=won.seq, now=clock())
    assert states(mine) == ("woken", "running", "running", False)
    assert (mine.woken_by_id, mine.blocked_reason, mine.ended_at) == (won.seq, "", clock())
    work = Work.objects.get(pk=mine.work_id)
    assert (work.version, work.updated_at) == (versions[mine.work_id] + 1, clock())
    # The other Work's wait, attempt, status and subscription are untouched.
    assert states(other) == ("active", "waiting", "waiting", True)
    assert Work.objects.get(pk=other.work_id).version == versions[other.work_id]


@pytest.mark.django_db
def test_r41_a_wait_whose_attempt_ended_leaves_its_work_ready_when_it_times_out(clock):
    mine, _ = two_parked(clock)
    started(clock)  # another Work's attempt runs
    Attempt.objects.filter(pk=mine.attempt_id).update(state="failed")
    with transaction.atomic():
        assert wait_time_out_in_tx(wait_id=mine.pk, now=clock())
    mine.refresh_from_db()
    assert (mine.state, Work.objects.get(pk=mine.work_id).status) == ("timed_out", "ready")


@pytest.mark.django_db
def test_r49_a_wake_does_not_revive_work_that_is_no_longer_waiting(clock):
    mine, _ = two_parked(clock)
    Work.objects.filter(pk=mine.work_id).update(status="cancelled")
    version = Work.objects.get(pk=mine.work_id).version
    with transaction.atomic():
        assert wait_wake_in_tx(wait_id=mine.pk, event_seq=EventFactory().seq, now=clock())
    work = Work.objects.get(pk=mine.work_id)
    assert (work.status, work.version) == ("cancelled", version)


@pytest.mark.django_db
def test_r41_the_timeout_sweep_takes_only_active_waits_within_its_limit(clock):
    ended, due = parked(clock, 10), parked(clock, 20)
    clock.advance(15)
    assert waits_expire(clock=clock) == [ended.pk]
    clock.advance(15)
    assert waits_expire(clock=clock, limit=1) == [due.pk]


@pytest.mark.django_db
def test_r41_blocking_a_wait_keeps_the_first_refused_event_and_the_latest_reason(clock):
    mine, other = two_parked(clock)
    first, second = EventFactory(), EventFactory()
    with transaction.atomic():
        wait_block_in_tx(wait_id=mine.pk, reason="r" * 600, event_seq=first.seq)
        wait_block_in_tx(wait_id=mine.pk, reason="again", event_seq=second.seq)
    mine.refresh_from_db()
    assert (mine.blocked_reason, mine.blocked_event_id) == ("again", first.seq)
    other.refresh_from_db()
    assert (other.blocked_reason, other.blocked_event_id) == ("", None)
    with transaction.atomic():
        wait_block_in_tx(wait_id=other.pk, reason="r" * 600, event_seq=second.seq)
        assert wait_time_out_in_tx(wait_id=other.pk, now=clock())
        wait_block_in_tx(wait_id=other.pk, reason="ended", event_seq=first.seq)
    other.refresh_from_db()
    assert (other.blocked_reason, other.blocked_event_id) == ("r" * 500, second.seq)
    # A wait that ended unblocked stays unblocked.
    ended, _ = two_parked(clock)
    with transaction.atomic():
        assert wait_time_out_in_tx(wait_id=ended.pk, now=clock())
        wait_block_in_tx(wait_id=ended.pk, reason="late", event_seq=first.seq)
    ended.refresh_from_db()
    assert (ended.blocked_reason, ended.blocked_event_id) == ("", None)


def test_r41_the_wake_bridge_names_the_work_the_wait_and_the_winning_event():
    envelope = wake_bridge_envelope(wait_id=3, work_id=7, scope="acme", event_seq=42)
    assert (envelope.id, envelope.type, envelope.scope, envelope.work_id) == (
        "wait-woken/3",
        "core.wait.woken",
        "acme",
        7,
    )
    assert envelope.data == {"work": 7, "wait": 3, "event": 42}


@pytest.mark.django_db
def test_r41_a_wait_parks_its_attempt_with_its_match_and_timeout(clock):
    attempt = started(clock)
    due = clock() + timedelta(minutes=5)
    wait = attempt_wait(
        attempt_id=attempt.pk, lease_epoch=1, match={"type": "x.*"}, clock=clock, timeout_at=due
    )
    wait.refresh_from_db()
    assert (wait.name, wait.match, wait.timeout_at, wait.attempt_id) == ("", {"type": "x.*"}, due, attempt.pk)
    assert not DependencySubscription.objects.exists()
    assert Attempt.objects.get(pk=attempt.pk).state == "waiting"
    assert Work.objects.get(pk=attempt.work_id).status == "waiting"


@pytest.mark.django_db
def test_r41_the_wake_bridge_is_derived_from_the_event_that_won_the_wait(clock):
    mine, _ = two_parked(clock)
    won = EventFactory()
    with derived_atomic():
        wake_bridge_in_tx(
            causal=Causal(clock), wait_id=mine.pk, work_id=mine.work_id, scope="acme", event_seq=won.seq
        )
    bridge = Event.objects.get(type="core.wait.woken")
    assert (bridge.envelope_id, bridge.parent_id, bridge.work_id, bridge.scope) == (
        f"wait-woken/{mine.pk}",
        won.seq,
        mine.work_id,
        "acme",
    )
    assert bridge.data == {"work": mine.work_id, "wait": mine.pk, "event": won.seq}


def blocked_pair(clock):
    """Two parked Works whose waits the causal limits blocked on one Event (a dependency
    subscription's wake and a wait's), each keeping it as context input beside other context
    input, a third Work's wait that is not blocked, and a fourth's that ended blocked."""
    waits = two_parked(clock)
    spare, ended = two_parked(clock)
    refused = EventFactory()
    inputs = []
    for wait in (*waits, ended):
        inputs.append(WorkInputFactory(work=wait.work, event=refused, kind="context"))
        WorkInputFactory(work=wait.work, kind="context")
        with transaction.atomic():
            wait_block_in_tx(wait_id=wait.pk, reason="refused", event_seq=refused.seq)
    with transaction.atomic():
        wait_time_out_in_tx(wait_id=ended.pk, now=clock())
    return waits, inputs[:2], spare


@pytest.mark.django_db
def test_r41_blocked_wakes_are_tried_again_once_the_limits_allow_them(clock):
    (first, second), (kept, other), spare = blocked_pair(clock)
    assert waits_retry_blocked(causal=Causal(clock), clock=clock, limit=1) == [first.pk]
    assert states(first)[:3] == ("woken", "running", "running")
    assert (first.woken_by_id, first.blocked_reason) == (kept.event_id, "")
    assert WorkInput.objects.get(pk=kept.pk).kind == "queue"
    # Its other context input, and the other Work's input of the same Event, stay context.
    assert WorkInput.objects.filter(work=first.work_id, kind="context").count() == 1
    assert WorkInput.objects.get(pk=other.pk).kind == "context"
    bridge = Event.objects.get(type="core.wait.woken")
    assert (bridge.parent_id, bridge.envelope_id, bridge.work_id) == (
        kept.event_id,
        f"wait-woken/{first.pk}",
        first.work_id,
    )
    assert waits_retry_blocked(causal=Causal(clock), clock=clock) == [second.pk]
    assert states(spare) == ("active", "waiting", "waiting", True)
    spare.refresh_from_db()
    assert (spare.blocked_reason, spare.blocked_event_id) == ("", None)
    assert waits_retry_blocked(causal=Causal(clock), clock=clock) == []
    assert Event.objects.filter(type="core.wait.woken").count() == 2  # none for the ended wait


@pytest.mark.django_db
def test_r41_a_consumed_input_keeps_its_kind_when_its_wake_is_retried(clock):
    (first, _), (kept, _), _ = blocked_pair(clock)
    WorkInput.objects.filter(pk=kept.pk).update(state="consumed")
    assert waits_retry_blocked(causal=Causal(clock), clock=clock, limit=1) == [first.pk]
    assert WorkInput.objects.get(pk=kept.pk).kind == "context"


@pytest.mark.django_db
def test_r41_a_wake_the_limits_still_refuse_stays_blocked_with_their_reason(clock):
    (first, _), (kept, _), spare = blocked_pair(clock)
    strict = Causal(clock, Limits(max_depth=0, rate_per_minute=128))
    assert waits_retry_blocked(causal=strict, clock=clock) == []
    first.refresh_from_db()
    assert first.state == "active" and first.blocked_event_id == kept.event_id
    assert first.blocked_reason.startswith("causal limits refuse the wake (depth_exceeded): ")
    assert WorkInput.objects.get(pk=kept.pk).kind == "context"
    assert not Event.objects.filter(type="core.wait.woken").exists()
    spare.refresh_from_db()
    assert spare.blocked_reason == ""
