"""One settlement path: what trace predicts is what routing then records.

Each test is a divergence seen between trace and routing before trace and the route commit
shared the settlement step: the trace is taken before routing, the record read after.
"""

from __future__ import annotations

import pytest

from causal.models import CausalDiagnostic, Event, RouteState
from routing.acceptance.envelopes import EventConflict
from routing.acceptance.services import event_accept
from routing.models import RouteRecord
from routing.setup.trace import TraceRefused, trace, trace_event, trace_offered
from tests.routing import sample_handlers
from tests.routing.routerkit import accept, apply, pr, router
from tests.worklife.attemptkit import attempt_start
from worklife.models import Wait, Work, WorkInput
from worklife.waits import attempt_wait

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def handlers(test_handlers):
    """Every test here routes with the test handlers registered (tests/conftest.py)."""


@pytest.fixture
def live(clock):
    return apply(clock)


def accept_payload(clock, payload):
    fields = {k: v for k, v in payload.items() if k not in ("source", "type", "data", "scope", "id")}
    return accept(
        clock,
        payload["type"],
        payload.get("data"),
        source=payload["source"],
        scope=payload["scope"],
        id=payload.get("id"),
        **fields,
    )


def assert_agrees(predicted, event):
    """The trace's state, effect, route, binding, Work and reason equal what routing left."""
    event.refresh_from_db()
    assert predicted.state == event.route_state
    if event.route_state == RouteState.UNROUTED:
        assert predicted.waiting_on == event.waiting_on_id
        assert predicted.retry_at == event.retry_at
        if predicted.unrouted_reason is not None:
            assert predicted.unrouted_reason == event.unrouted_reason
        return
    record = RouteRecord.objects.get(event=event)
    assert (predicted.effect, predicted.route, predicted.binding, predicted.reason) == (
        record.policy,
        record.route,
        record.binding,
        record.reason,
    )
    assert list(predicted.refusals) == record.refusals
    if predicted.work_id is not None:
        assert predicted.work_id == record.work_id


def _waiting(clock, match, number=1):
    first = accept(clock, "github.pull_request.opened", {"repo": "acme/api", "number": number})
    router(clock).route(first.seq)
    work_id = RouteRecord.objects.get(event=first).work_id
    attempt = attempt_start(
        work_id=work_id,
        binding="triage",
        executor="python",
        generation=1,
        capabilities=["inject"],
        clock=clock,
    )
    attempt_wait(attempt_id=attempt.pk, lease_epoch=1, match=match, clock=clock, name="review")
    return work_id


def test_r41_a_wake_the_causal_limits_would_refuse_is_predicted_as_context(clock, live, settings):
    """Reproduced: a waiting Work and CONDUIT_CAUSAL_MAX_DEPTH=0; trace said ``wake``, routing
    recorded ``queue`` (context). Trace now asks the causal limits first."""
    work_id = _waiting(clock, {"type": "github.pull_request.review*"})
    settings.CONDUIT_CAUSAL_MAX_DEPTH = 0
    payload = pr(1, "review_submitted", id="w1")
    predicted = trace(payload=payload, clock=clock)
    assert (predicted.effect, predicted.reason, predicted.work_id) == ("queue", "context", work_id)
    assert any("refused" in note and "depth" in note for note in predicted.notes)
    assert not CausalDiagnostic.objects.exists()  # a trace writes no diagnostic
    event = accept_payload(clock, payload)
    router(clock).route(event.seq)
    assert_agrees(predicted, event)
    assert "depth" in Wait.objects.get(work_id=work_id, state="active").blocked_reason
    assert CausalDiagnostic.objects.filter(kind="depth_exceeded", parent_seq=event.seq).exists()
    # Kept as the waiting Work's context, not as input for its next attempt.
    assert WorkInput.objects.get(event_id=event.seq).kind == "context"


def test_r41_an_allowed_wake_is_predicted_and_derives_the_bridge(clock, live):
    work_id = _waiting(clock, {"type": "github.pull_request.review*"})
    payload = pr(1, "review_submitted", id="w2")
    predicted = trace(payload=payload, clock=clock)
    assert (predicted.effect, predicted.work_id) == ("wake", work_id)
    event = accept_payload(clock, payload)
    router(clock).route(event.seq)
    assert_agrees(predicted, event)
    assert Event.objects.get(type="core.wait.woken").parent_id == event.seq


def test_r41_an_earlier_unrouted_event_wins_the_wait_first(clock, live):
    """Trace ignored an earlier accepted Event that wins the wait first: now it settles the
    earlier input of the same target first, as routing does."""
    work_id = _waiting(clock, {"type": "github.pull_request.review*"})
    earlier = accept(clock, "github.pull_request.review_submitted", {"repo": "acme/api", "number": 1})
    payload = pr(1, "review_requested", id="w3")
    predicted = trace(payload=payload, clock=clock)
    assert predicted.effect != "wake"
    event = accept_payload(clock, payload)
    router(clock).route(event.seq)
    assert RouteRecord.objects.get(event=earlier).policy == "wake"
    assert_agrees(predicted, event)
    assert Work.objects.get(pk=work_id).status == "running"


def test_r14_a_backing_off_event_is_traced_without_asking_its_handler(clock, live):
    """Trace called the handler of an Event routing skips because it backs off."""
    sample_handlers.BROKEN.add("b1")
    event = accept(clock, "x.job", {}, id="b1")
    r = router(clock)
    r.route(event.seq)
    event.refresh_from_db()
    assert event.route_state == RouteState.UNROUTED and event.retry_at is not None
    calls = len(sample_handlers.CALLS)
    predicted = trace_event(seq=event.seq, clock=clock)
    assert len(sample_handlers.CALLS) == calls  # not asked
    assert (predicted.effect, predicted.reason, predicted.attempts) == ("error", "handler_failed", 1)
    assert predicted.unrouted_reason is None  # routing leaves the stored reason as it is
    reason = event.unrouted_reason
    r.route(event.seq)
    assert len(sample_handlers.CALLS) == calls
    assert_agrees(predicted, event)
    assert event.unrouted_reason == reason


def test_r13_a_counted_failure_and_its_backoff_are_predicted(clock, live):
    sample_handlers.BROKEN.add("b2")
    event = accept(clock, "x.job", {}, id="b2")
    predicted = trace_event(seq=event.seq, clock=clock)
    assert (predicted.state, predicted.effect, predicted.attempts) == ("unrouted", "error", 1)
    router(clock).route(event.seq)
    assert_agrees(predicted, event)
    assert predicted.unrouted_reason == event.unrouted_reason


def test_r16_a_panic_is_predicted_as_failed_as_the_record_says(clock, live):
    """Trace said ``error`` where the record says ``failed``."""
    payload = {"source": "s", "type": "x.job", "scope": "acme", "data": {"behaviour": "panic"}, "id": "p1"}
    predicted = trace(payload=payload, clock=clock)
    assert (predicted.state, predicted.effect, predicted.reason) == ("failed", "failed", "handler_panic")
    event = accept_payload(clock, payload)
    router(clock).route(event.seq)
    assert_agrees(predicted, event)


def test_r16_giving_up_after_the_count_and_window_is_predicted(clock, live):
    sample_handlers.BROKEN.add("g1")
    event = accept(clock, "x.job", {}, id="g1")
    r = router(clock, max_route_failures=2, route_failure_window=__import__("datetime").timedelta(0))
    r.route(event.seq)
    clock.advance(60)
    predicted = trace_event(seq=event.seq, clock=clock, options=r.options)
    assert (predicted.state, predicted.effect, predicted.attempts) == ("failed", "failed", 2)
    r.route(event.seq)
    assert_agrees(predicted, event)


def test_r42_a_subscription_wake_goes_through_the_bridge_and_the_limits(clock, live, settings):
    """Subscription wakes bypassed the bridge and the causal limits."""
    from tests.worklife.factories import DependencySubscriptionFactory

    waiting_id = _waiting(clock, {"type": "github.pull_request.review*"})
    wait = Wait.objects.get(work_id=waiting_id, state="active")
    DependencySubscriptionFactory(wait=wait, work_id=waiting_id, scope="acme/web", match={"type": "chat.*"})
    settings.CONDUIT_CAUSAL_MAX_DEPTH = 0
    payload = {
        "source": "chat",
        "type": "chat.message",
        "scope": "acme/web",
        "data": {"thread": "d"},
        "id": "s1",
    }
    predicted = trace(payload=payload, clock=clock)
    assert not any("also wakes" in note for note in predicted.notes)
    assert any(f"wake of Work {waiting_id}'s wait review is refused" in note for note in predicted.notes)
    event = accept_payload(clock, payload)
    router(clock).route(event.seq)
    assert_agrees(predicted, event)
    wait.refresh_from_db()
    assert wait.state == "active" and "depth" in wait.blocked_reason
    assert Work.objects.get(pk=waiting_id).status == "waiting"
    assert CausalDiagnostic.objects.filter(kind="depth_exceeded", parent_seq=event.seq).exists()


@pytest.mark.parametrize("through", ["its-wait", "a-subscription", "a-subscription-then-its-wait"])
def test_r41_a_wake_refused_in_a_window_blocks_the_wait_for_the_windows_later_events(
    clock, live, settings, through
):
    """The window's first matching Event is refused the wake (depth limit 0); its later matching
    Events see the wait blocked, as the next window would: they are kept as context (the Work
    held), not refused again."""
    from tests.worklife.factories import DependencySubscriptionFactory

    waiting_id = _waiting(clock, {"type": "github.pull_request.review*"})
    if through.startswith("a-subscription"):
        wait = Wait.objects.get(work_id=waiting_id, state="active")
        DependencySubscriptionFactory(
            wait=wait, work_id=waiting_id, scope="acme/web", match={"type": "chat.*"}
        )
        payloads = [
            {
                "source": "chat",
                "type": "chat.message",
                "scope": "acme/web",
                "data": {"thread": t},
                "id": f"b{t}",
            }
            for t in ("x", "y")
        ]
        if through.endswith("its-wait"):
            payloads[1] = pr(1, "review_submitted", id="b2")
    else:
        payloads = [pr(1, "review_submitted", id=f"b{n}") for n in (1, 2)]
    settings.CONDUIT_CAUSAL_MAX_DEPTH = 0
    first, later = (accept_payload(clock, payload) for payload in payloads)
    router(clock).route_pending()  # one window
    assert CausalDiagnostic.objects.filter(kind="depth_exceeded", parent_seq=first.seq).exists()
    assert not CausalDiagnostic.objects.filter(parent_seq=later.seq).exists()
    assert RouteRecord.objects.get(event=later).disposition == "routed"
    assert "depth" in Wait.objects.get(work_id=waiting_id, state="active").blocked_reason
    if through == "its-wait":
        # Both kept as the Work's context: the first saying its wake is refused, the later one
        # that the wait is blocked.
        predicted = trace(payload=pr(1, "review_submitted", id="b3"), clock=clock)
        assert any("wait review is blocked by the causal limits" in note for note in predicted.notes)
        assert list(RouteRecord.objects.filter(event__in=[first, later]).values_list("policy", "reason")) == [
            ("queue", "context"),
            ("queue", "context"),
        ]


def test_r42_a_subscription_wake_refused_in_a_window_leaves_the_other_subscriptions_wakeable(
    clock, live, settings
):
    """In one window, the first Event's subscription wake is refused (the Event is as deep as the
    causal limits allow: its bridge would be deeper); that blocks its own wait only. The later
    Event still wakes another Work's subscription, as it would in a window of its own."""
    from tests.worklife.factories import DependencySubscriptionFactory

    blocked_id = _waiting(clock, {"type": "github.pull_request.review*"}, number=1)
    woken_id = _waiting(clock, {"type": "github.pull_request.review*"}, number=2)
    for work_id, source in ((blocked_id, "alpha"), (woken_id, "beta")):
        wait = Wait.objects.get(work_id=work_id, state="active")
        DependencySubscriptionFactory(
            wait=wait, work_id=work_id, scope="acme/web", match={"type": "chat.*", "source": source}
        )
    settings.CONDUIT_CAUSAL_MAX_DEPTH = 2
    deep, shallow = (
        accept(clock, "chat.message", {"thread": source}, source=source, scope="acme/web")
        for source in ("alpha", "beta")
    )
    Event.objects.filter(pk=deep.seq).update(depth=2)  # two derivations below its root
    router(clock).route_pending()  # one window
    assert CausalDiagnostic.objects.filter(kind="depth_exceeded", parent_seq=deep.seq).exists()
    assert "depth" in Wait.objects.get(work_id=blocked_id, state="active").blocked_reason
    assert Work.objects.get(pk=blocked_id).status == "waiting"
    assert Work.objects.get(pk=woken_id).status == "running"
    bridge = Event.objects.get(type="core.wait.woken")
    assert (bridge.parent_id, bridge.work_id) == (shallow.seq, woken_id)


def test_r41_a_trace_behind_an_unrouted_event_whose_wake_is_refused_says_the_wait_is_blocked(
    clock, live, settings
):
    """The trace routes the earlier unrouted Event first, as routing will: its wake refused, the
    wait is blocked, and the traced Event is held as the Work's context, saying why."""
    work_id = _waiting(clock, {"type": "github.pull_request.review*"})
    settings.CONDUIT_CAUSAL_MAX_DEPTH = 0
    first = accept_payload(clock, pr(1, "review_submitted", id="t1"))  # not routed yet
    predicted = trace(payload=pr(1, "review_submitted", id="t2"), clock=clock)
    assert (predicted.effect, predicted.reason, predicted.work_id) == ("queue", "context", work_id)
    assert any(
        "wait review is blocked by the causal limits" in note and "depth" in note for note in predicted.notes
    ), predicted.notes
    assert Wait.objects.get(work_id=work_id, state="active").blocked_reason == ""  # a trace writes nothing
    second = accept_payload(clock, pr(1, "review_submitted", id="t2"))
    router(clock).route_pending()
    assert_agrees(predicted, second)
    assert RouteRecord.objects.get(event=first).reason == "context"


def test_r41_an_event_dropped_for_a_work_whose_wait_is_blocked_is_not_said_to_hold_it(clock, live, settings):
    """Only input kept as a waiting Work's context is held by its blocked wait: an Event a drop
    route takes for that Work is dropped, and its trace says nothing of the Work being held."""
    from worklife.models import CorrelationKey

    work_id = _waiting(clock, {"type": "github.pull_request.review*"})
    settings.CONDUIT_CAUSAL_MAX_DEPTH = 0
    accept_payload(clock, pr(1, "review_submitted", id="bw1"))
    router(clock).route_pending()  # its wake refused: the wait is blocked
    assert Wait.objects.get(work_id=work_id, state="active").blocked_reason
    key = CorrelationKey.objects.filter(work_id=work_id).values_list("key", flat=True).first()
    payload = {"source": "s", "type": "noise.ping", "scope": "acme", "id": "bw2", "correlation": [key]}
    predicted = trace(payload=payload, clock=clock)
    assert (predicted.effect, predicted.work_id) == ("drop", work_id)
    assert not any("held" in note for note in predicted.notes), predicted.notes
    event = accept_payload(clock, payload)
    router(clock).route(event.seq)
    assert_agrees(predicted, event)


def test_r42_an_allowed_subscription_wake_derives_its_bridge(clock, live):
    from tests.worklife.factories import DependencySubscriptionFactory

    waiting_id = _waiting(clock, {"type": "github.pull_request.review*"})
    wait = Wait.objects.get(work_id=waiting_id, state="active")
    DependencySubscriptionFactory(wait=wait, work_id=waiting_id, scope="acme/web", match={"type": "chat.*"})
    payload = {
        "source": "chat",
        "type": "chat.message",
        "scope": "acme/web",
        "data": {"thread": "e"},
        "id": "s2",
    }
    predicted = trace(payload=payload, clock=clock)
    assert any(f"also wakes Work {waiting_id}" in note for note in predicted.notes)
    event = accept_payload(clock, payload)
    router(clock).route(event.seq)
    assert_agrees(predicted, event)
    bridge = Event.objects.get(type="core.wait.woken")
    assert (bridge.parent_id, bridge.work_id) == (event.seq, waiting_id)
    assert Work.objects.get(pk=waiting_id).status == "running"


def test_r41_the_rate_limit_counts_the_bridges_one_event_plans(clock, live, settings):
    """Two bridges from one root in one minute against a rate of one: the second is refused,
    in the trace and in routing alike."""
    from tests.worklife.factories import DependencySubscriptionFactory

    waiting_id = _waiting(clock, {"type": "github.pull_request.review*"})
    other_id = _waiting(clock, {"type": "never"}, number=2)
    other_wait = Wait.objects.get(work_id=other_id, state="active")
    DependencySubscriptionFactory(wait=other_wait, work_id=other_id, scope="acme", match={"type": "github.*"})
    settings.CONDUIT_CAUSAL_RATE_PER_MINUTE = 1
    payload = pr(1, "review_submitted", id="r1")
    predicted = trace(payload=payload, clock=clock)
    assert (predicted.effect, predicted.work_id) == ("wake", waiting_id)
    assert any("rate_exceeded" in note for note in predicted.notes)
    event = accept_payload(clock, payload)
    router(clock).route(event.seq)
    assert_agrees(predicted, event)
    other_wait.refresh_from_db()
    assert other_wait.state == "active" and "rate_exceeded" in other_wait.blocked_reason
    assert Event.objects.filter(type="core.wait.woken").count() == 1


def test_an_event_already_accepted_is_traced_as_a_duplicate(clock, live):
    """Trace showed ``queue on Work 1`` for an Event whose (source, id) was already accepted."""
    payload = pr(1, id="dup-1")
    first = accept_payload(clock, payload)
    router(clock).route(first.seq)
    calls = len(sample_handlers.CALLS)
    predicted = trace(payload=payload, clock=clock)
    assert (predicted.state, predicted.effect, predicted.event, predicted.work_id) == (
        "duplicate",
        "duplicate",
        first.seq,
        None,
    )
    # No route is asked: each is bypassed, saying why (R40).
    assert {v.verdict for v in predicted.verdicts} == {"bypassed"} and len(sample_handlers.CALLS) == calls
    assert "already accepted as Event" in predicted.verdicts[0].reason
    count = Event.objects.count()
    again = accept_payload(clock, payload)
    assert again.seq == first.seq and Event.objects.count() == count


def test_waiting_behind_earlier_input_is_predicted(clock, live):
    sample_handlers.BROKEN.add("h1")
    blocker = accept(clock, "x.job", {"keys": ["k:1"]}, id="h1", correlation=["k:1"])
    router(clock).route(blocker.seq)
    payload = {"source": "s", "type": "x.job", "scope": "acme", "data": {"keys": ["k:1"]}, "id": "h2"}
    predicted = trace(payload=payload, clock=clock)
    assert (predicted.state, predicted.effect, predicted.waiting_on) == ("unrouted", "waiting", blocker.seq)
    event = accept_payload(clock, payload)
    router(clock).route(event.seq)
    assert_agrees(predicted, event)


def test_trace_event_of_a_settled_event_is_its_record(clock, live):
    event = accept(clock, "github.pull_request.opened", {"repo": "acme/api", "number": 3})
    router(clock).route(event.seq)
    predicted = trace_event(seq=event.seq, clock=clock)
    assert predicted.notes and "already routed" in predicted.notes[0]
    assert_agrees(predicted, event)


def test_trace_this_event_traces_the_accepted_event_not_a_new_one(clock, live):
    """The console's "Trace this Event" offers the Event's own envelope: it is traced as that
    accepted Event (what routing will do with it), while a plain trace says a duplicate."""
    from routing.setup.trace import trace_offered

    payload = pr(4, id="own-1")
    event = accept_payload(clock, payload)
    assert trace(payload=payload, clock=clock).state == "duplicate"
    offered = trace_offered(payload=payload, clock=clock)
    assert (offered.state, offered.effect, offered.event) == ("routed", "start", event.seq)
    assert f"accepted Event #{event.seq}" in offered.notes[0]
    router(clock).route(event.seq)
    assert_agrees(offered, event)


def test_trace_this_event_traces_a_routed_event_as_new_with_what_routing_recorded(clock, live):
    """It said ``unmatched`` with no verdicts ("already routed" in a note): a routed Event is
    traced as if accepted now, every route's verdict shown, its record said first."""
    payload = pr(5, id="own-5")
    event = accept_payload(clock, payload)
    router(clock).route(event.seq)
    record = RouteRecord.objects.get(event=event)

    offered = trace_offered(payload=payload, clock=clock, filter=["pr", "chat"])

    assert (offered.event, offered.effect, offered.work_id) == (event.seq, "queue", record.work_id)
    assert [(v.route, v.verdict) for v in offered.verdicts] == [("pr", "match"), ("chat", "not_reached")]
    recorded = offered.recorded
    assert (recorded.seq, recorded.state, recorded.at) == (event.seq, "routed", record.decided_at)
    assert recorded.outcome == f"start on Work {record.work_id} via pr/triage"
    assert RouteRecord.objects.count() == 1 and Event.objects.count() == 1  # nothing written


def test_r5_a_repeat_with_another_body_is_refused_as_acceptance_refuses_it(clock, live):
    """Trace said ``duplicate`` where acceptance answers 409 (the second body is not stored)."""
    first = accept_payload(clock, {**pr(number=7), "id": "same"})
    other = {**pr(number=8), "id": "same"}
    with pytest.raises(EventConflict) as acceptance:
        event_accept(payload={"specversion": "1.0", **other}, clock=clock)
    for traced in (trace, trace_offered):
        with pytest.raises(TraceRefused) as refused:
            traced(payload=other, clock=clock)
        assert refused.value.field == "id"
        assert (
            refused.value.message == f"acceptance would refuse this Event (409): {acceptance.value.message}"
        )
        assert f"(#{first.seq})" in refused.value.message
    assert Event.objects.count() == 1
