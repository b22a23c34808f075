"""Timers firing through the derived boundary (R56): a timer with a causation parent is derived
and may be refused by the causal limits; without one it is a root; state and Event commit
together."""

from __future__ import annotations

from datetime import timedelta

import pytest

from causal.limits import Causal, Limits
from causal.models import CausalDiagnostic, Event
from tests.causal.factories import EventFactory
from tests.causal.support import SECRET, assert_redacted, bucket_count, envelope
from tests.worklife.factories import TimerFactory, WorkFactory
from worklife.models import TimerState, WorkStatus
from worklife.timers import TimerError, timer_fire

MINUTE = "2026-01-05T12:00"


@pytest.fixture
def parent():
    return EventFactory(type="test.root")


def causal_with(clock, rate: int = 128, depth: int = 32) -> Causal:
    return Causal(clock, Limits(max_depth=depth, rate_per_minute=rate))


@pytest.mark.django_db
def test_r56_a_timer_with_a_parent_fires_as_a_derived_event(clock, parent):
    timer = TimerFactory(parent=parent, data={"reminder": 1})
    outcome = timer_fire(timer_id=timer.pk, clock=clock, causal=causal_with(clock))
    timer.refresh_from_db()
    assert (outcome.state, timer.state) == ("fired", TimerState.FIRED)
    event = outcome.event
    assert timer.fired_event_id == event.seq and outcome.created
    assert (event.parent_id, event.root_id, event.depth) == (parent.seq, parent.seq, 1)
    assert (event.source, event.type, event.envelope_id) == (
        "core.timer",
        "test.timer.due",
        f"timer/{timer.pk}",
    )
    assert (event.work_id, event.scope, event.data) == (timer.work_id, timer.work.scope, {"reminder": 1})
    assert bucket_count(parent.seq, MINUTE) == 1


@pytest.mark.django_db
def test_r56_a_timer_without_a_parent_fires_as_a_root(clock):
    timer = TimerFactory(type="core.wait.timeout")  # trusted core code may use core.* types
    outcome = timer_fire(timer_id=timer.pk, clock=clock, causal=causal_with(clock))
    event = outcome.event
    assert outcome.state == "fired"
    assert (event.parent_id, event.root_id, event.depth, event.type) == (None, None, 0, "core.wait.timeout")
    assert not CausalDiagnostic.objects.exists()


@pytest.mark.django_db
def test_r56_a_timer_refused_by_the_rate_limit_is_marked_refused_with_a_diagnostic(clock, parent):
    causal = causal_with(clock, rate=1)
    causal.derive(parent=parent, envelope=envelope("spend-the-only-token"))
    timer = TimerFactory(parent=parent, data={"token": SECRET})
    outcome = timer_fire(timer_id=timer.pk, clock=clock, causal=causal)
    timer.refresh_from_db()
    assert (outcome.state, timer.state, timer.fired_event_id) == ("refused", TimerState.REFUSED, None)
    assert not Event.objects.filter(envelope_id=f"timer/{timer.pk}").exists()
    assert bucket_count(parent.seq, MINUTE) == 1
    diagnostic = CausalDiagnostic.objects.get()
    assert outcome.diagnostic.pk == diagnostic.pk
    assert (diagnostic.kind, diagnostic.root_seq, diagnostic.work_id) == (
        "rate_exceeded",
        parent.seq,
        timer.work_id,
    )
    assert (diagnostic.source, diagnostic.type) == ("core.timer", "test.timer.due")
    assert_redacted(diagnostic)


@pytest.mark.django_db
def test_r56_a_timer_refused_by_depth_stays_refused_the_next_minute(clock, parent):
    timer = TimerFactory(parent=parent)
    outcome = timer_fire(timer_id=timer.pk, clock=clock, causal=causal_with(clock, depth=0))
    assert outcome.state == "refused"
    clock.advance(minutes=1)
    again = timer_fire(timer_id=timer.pk, clock=clock, causal=causal_with(clock, depth=0))
    assert again.state == "refused" and again.event is None
    assert CausalDiagnostic.objects.count() == 1  # settled: firing it again refuses nothing new


@pytest.mark.django_db
def test_r56_firing_twice_returns_the_same_event(clock, parent):
    timer = TimerFactory(parent=parent)
    first = timer_fire(timer_id=timer.pk, clock=clock, causal=causal_with(clock))
    second = timer_fire(timer_id=timer.pk, clock=clock, causal=causal_with(clock))
    assert second.event.seq == first.event.seq and not second.created
    assert bucket_count(parent.seq, MINUTE) == 1


@pytest.mark.django_db
def test_r56_a_timer_fires_only_when_due(clock):
    timer = TimerFactory(due_at=clock.now + timedelta(seconds=1))
    with pytest.raises(TimerError, match="not due"):
        timer_fire(timer_id=timer.pk, clock=clock, causal=causal_with(clock))
    clock.advance(seconds=1)
    assert timer_fire(timer_id=timer.pk, clock=clock, causal=causal_with(clock)).state == "fired"


@pytest.mark.django_db
def test_r56_unknown_and_cancelled_timers_do_not_fire(clock):
    with pytest.raises(TimerError, match="does not exist"):
        timer_fire(timer_id=999999, clock=clock)
    cancelled = TimerFactory(state=TimerState.CANCELLED)
    with pytest.raises(TimerError, match="cancelled"):
        timer_fire(timer_id=cancelled.pk, clock=clock)
    assert not Event.objects.exists()


@pytest.mark.django_db
def test_r49_a_pending_timer_of_terminal_work_is_cancelled_without_an_event(clock, parent):
    timer = TimerFactory(parent=parent, work=WorkFactory(status=WorkStatus.COMPLETED))
    outcome = timer_fire(timer_id=timer.pk, clock=clock, causal=causal_with(clock))
    timer.refresh_from_db()
    assert (outcome.state, timer.state) == ("cancelled", TimerState.CANCELLED)
    assert not Event.objects.filter(envelope_id=f"timer/{timer.pk}").exists()
    assert bucket_count(parent.seq, MINUTE) == 0


@pytest.mark.django_db(transaction=True)
def test_r56_state_and_event_commit_together_on_both_outcomes(clock, parent):
    fired = TimerFactory(parent=parent)
    refused = TimerFactory(parent=parent)
    causal = causal_with(clock, rate=1)
    assert timer_fire(timer_id=fired.pk, clock=clock, causal=causal).state == "fired"
    assert timer_fire(timer_id=refused.pk, clock=clock, causal=causal).state == "refused"
    fired.refresh_from_db()
    refused.refresh_from_db()
    assert fired.fired_event.envelope_id == f"timer/{fired.pk}"
    assert refused.state == TimerState.REFUSED
    assert CausalDiagnostic.objects.get().kind == "rate_exceeded"


@pytest.mark.django_db
def test_a_timer_is_held_to_acceptances_limits_when_scheduled(clock, settings):
    from tests.worklife.factories import AttemptFactory
    from worklife.errors import WorkError
    from worklife.models import Timer
    from worklife.timers import timer_schedule

    attempt = AttemptFactory(trigger=EventFactory())
    schedule = {"attempt_id": attempt.pk, "lease_epoch": attempt.lease_epoch, "after": 5, "clock": clock}
    refusals = {
        "CORE.wait.timeout": (None, "is empty or reserved"),  # reserved in any case
        "t" * 300: (None, "type: type is 300 characters long; the limit is 255"),  # was cut to 255
        "t.big": ("x" * settings.CONDUIT_MAX_EVENT_BYTES, "data: the Event is "),
        "t.nul": ({"a": "\x00"}, "data.a: NUL characters"),
    }
    for event_type, (data, message) in refusals.items():
        with pytest.raises(WorkError, match=message.replace(".", r"\.")):
            timer_schedule(type=event_type, data=data, **schedule)
    assert not Timer.objects.exists()
    timer = timer_schedule(type="t" * 255, data="x" * 1000, **schedule)
    assert len(timer.type) == 255
