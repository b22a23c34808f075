"""Emit from inside an attempt (R51, R61): the fenced attempt's trigger is the parent; forged
ancestry, stale leases, reserved families and cross-Work identity are refused with diagnostics;
an emit call's message becomes an envelope only within the acceptance limits."""

from __future__ import annotations

from datetime import timedelta

import pytest

from causal.limits import Causal, CausalRefused, Limits, derived_atomic
from causal.models import CausalDiagnostic, DiagnosticKind, Event
from tests.causal.factories import EventFactory
from tests.causal.support import SECRET, assert_redacted, bucket_count, envelope
from tests.worklife.factories import AttemptFactory, WorkFactory
from worklife.emit import emit, emit_envelope, emit_in_tx, json_depth
from worklife.errors import WorkError
from worklife.models import AttemptState

MINUTE = "2026-01-05T12:00"


@pytest.fixture
def causal(clock) -> Causal:
    return Causal(clock, Limits(max_depth=32, rate_per_minute=128))


@pytest.fixture
def trigger():
    return EventFactory(type="github.pull_request.opened", data={"token": SECRET})


@pytest.fixture
def attempt(trigger):
    return AttemptFactory(work=WorkFactory(trigger=trigger), trigger=trigger, lease_epoch=3)


def refusal_of(causal: Causal, **kwargs) -> CausalRefused:
    with pytest.raises(CausalRefused) as refused:
        emit(causal=causal, **kwargs)
    return refused.value


@pytest.mark.django_db
def test_r51_emit_derives_from_the_attempts_trigger(causal, attempt, trigger):
    accepted = emit(attempt_id=attempt.pk, lease_epoch=3, envelope=envelope("reply"), causal=causal)
    event = accepted.event
    assert accepted.created
    assert (event.parent_id, event.root_id, event.depth) == (trigger.seq, trigger.seq, 1)
    assert event.accepted_by == "core.emit"
    assert bucket_count(trigger.seq, MINUTE) == 1


@pytest.mark.django_db
def test_r51_emit_accepts_a_supplied_parent_equal_to_the_trigger(causal, attempt, trigger):
    event = emit(
        attempt_id=attempt.pk, lease_epoch=3, envelope=envelope("same"), parent_seq=trigger.seq, causal=causal
    ).event
    assert event.parent_id == trigger.seq


@pytest.mark.django_db
def test_r61_forged_ancestry_a_conflicting_parent_is_rejected(causal, attempt, trigger):
    other = EventFactory()
    refused = refusal_of(
        causal, attempt_id=attempt.pk, lease_epoch=3, envelope=envelope("forged"), parent_seq=other.seq
    )
    assert refused.kind == DiagnosticKind.FORGED_PARENT
    assert not Event.objects.filter(envelope_id="forged").exists()
    assert bucket_count(trigger.seq, MINUTE) == 0 and bucket_count(other.seq, MINUTE) == 0
    diagnostic = CausalDiagnostic.objects.get()
    assert (diagnostic.kind, diagnostic.parent_seq, diagnostic.root_seq) == (
        "forged_parent",
        other.seq,
        trigger.seq,
    )
    assert (diagnostic.attempt_id, diagnostic.work_id) == (attempt.pk, attempt.work_id)
    assert_redacted(diagnostic)


@pytest.mark.django_db
def test_r61_stale_lease_an_epoch_that_moved_on_is_rejected(causal, attempt):
    refused = refusal_of(causal, attempt_id=attempt.pk, lease_epoch=2, envelope=envelope("stale"))
    assert refused.kind == DiagnosticKind.STALE_LEASE
    assert "epoch 2" in refused.detail and "epoch 3" in refused.detail
    assert not Event.objects.filter(envelope_id="stale").exists()
    assert_redacted(CausalDiagnostic.objects.get(kind="stale_lease"))


@pytest.mark.django_db
@pytest.mark.parametrize("state", [AttemptState.SUCCEEDED, AttemptState.FAILED, AttemptState.CANCELLED])
def test_r61_stale_lease_an_ended_attempt_cannot_emit(causal, trigger, state):
    ended = AttemptFactory(trigger=trigger, lease_epoch=1, state=state)
    refused = refusal_of(causal, attempt_id=ended.pk, lease_epoch=1, envelope=envelope("late"))
    assert refused.kind == DiagnosticKind.STALE_LEASE
    assert not Event.objects.filter(envelope_id="late").exists()


@pytest.mark.django_db
def test_r51_a_parked_attempt_is_active_and_may_emit(causal, trigger):
    parked = AttemptFactory(trigger=trigger, state=AttemptState.WAITING)
    assert emit(attempt_id=parked.pk, lease_epoch=1, envelope=envelope("parked"), causal=causal).created


@pytest.mark.django_db
def test_r61_stale_lease_an_expired_lease_cannot_emit(causal, trigger, clock):
    expired = AttemptFactory(trigger=trigger, lease_until=clock.now - timedelta(seconds=1))
    refused = refusal_of(causal, attempt_id=expired.pk, lease_epoch=1, envelope=envelope("expired"))
    assert refused.kind == DiagnosticKind.STALE_LEASE and "expired" in refused.detail
    current = AttemptFactory(trigger=trigger, lease_until=clock.now + timedelta(seconds=30))
    assert emit(attempt_id=current.pk, lease_epoch=1, envelope=envelope("current"), causal=causal).created


@pytest.mark.django_db
def test_r61_stale_lease_an_unknown_attempt_cannot_emit(causal):
    refused = refusal_of(causal, attempt_id=424242, lease_epoch=1, envelope=envelope("ghost"))
    assert refused.kind == DiagnosticKind.STALE_LEASE
    assert CausalDiagnostic.objects.get().attempt_id == 424242


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("field", "value"),
    [("type", "core.work.created"), ("source", "core.manual"), ("type", "core"), ("source", "core.timer")],
)
def test_r51_reserved_core_families_are_rejected(causal, attempt, field, value):
    refused = refusal_of(
        causal, attempt_id=attempt.pk, lease_epoch=3, envelope=envelope("reserved", **{field: value})
    )
    assert refused.kind == DiagnosticKind.RESERVED_TYPE
    assert not Event.objects.filter(envelope_id="reserved").exists()


@pytest.mark.django_db
def test_r51_a_core_lookalike_type_is_not_reserved(causal, attempt):
    assert emit(
        attempt_id=attempt.pk, lease_epoch=3, envelope=envelope("x", type="corelike.event"), causal=causal
    ).created


@pytest.mark.django_db
def test_r51_cross_work_identity_is_rejected(causal, attempt):
    other_work = WorkFactory()
    other_attempt = AttemptFactory(work=other_work)
    for name, fields in (
        ("other-work", {"work_id": other_work.pk}),
        ("other-attempt", {"execution_id": other_attempt.pk}),
    ):
        refused = refusal_of(causal, attempt_id=attempt.pk, lease_epoch=3, envelope=envelope(name, **fields))
        assert refused.kind == DiagnosticKind.CROSS_WORK
    assert not Event.objects.filter(envelope_id__in=["other-work", "other-attempt"]).exists()
    own = envelope("own", work_id=attempt.work_id, execution_id=attempt.pk)
    assert emit(attempt_id=attempt.pk, lease_epoch=3, envelope=own, causal=causal).created


@pytest.mark.django_db
def test_r51_an_attempt_without_a_trigger_has_no_parent_to_emit_from(causal):
    orphan = AttemptFactory(trigger=None)
    refused = refusal_of(causal, attempt_id=orphan.pk, lease_epoch=1, envelope=envelope("orphan"))
    assert refused.kind == DiagnosticKind.MISSING_PARENT


@pytest.mark.django_db
def test_r52_emit_goes_through_the_causal_limits(clock, attempt, trigger):
    causal = Causal(clock, Limits(max_depth=32, rate_per_minute=2))
    emit(attempt_id=attempt.pk, lease_epoch=3, envelope=envelope("one"), causal=causal)
    emit(attempt_id=attempt.pk, lease_epoch=3, envelope=envelope("two"), causal=causal)
    refused = refusal_of(causal, attempt_id=attempt.pk, lease_epoch=3, envelope=envelope("three"))
    assert refused.kind == DiagnosticKind.RATE_EXCEEDED
    replay = emit(attempt_id=attempt.pk, lease_epoch=3, envelope=envelope("one"), causal=causal)
    assert not replay.created  # a replay spends nothing and is not refused
    assert bucket_count(trigger.seq, MINUTE) == 2


@pytest.mark.django_db
def test_r55_every_emit_refusal_diagnostic_is_redacted(causal, attempt):
    refusal_of(causal, attempt_id=attempt.pk, lease_epoch=9, envelope=envelope("a"))
    refusal_of(causal, attempt_id=attempt.pk, lease_epoch=3, envelope=envelope("b", type="core.x"))
    refusal_of(
        causal, attempt_id=attempt.pk, lease_epoch=3, envelope=envelope("c", work_id=attempt.work_id + 1)
    )
    refusal_of(
        causal,
        attempt_id=attempt.pk,
        lease_epoch=3,
        envelope=envelope("d"),
        parent_seq=attempt.trigger_id + 1000,
    )
    assert CausalDiagnostic.objects.count() == 4
    for diagnostic in CausalDiagnostic.objects.all():
        assert_redacted(diagnostic)


@pytest.mark.django_db(transaction=True)
def test_r54_emit_in_tx_rolls_back_with_the_callers_effects(causal, attempt, trigger):
    with pytest.raises(LookupError), derived_atomic():
        emit_in_tx(attempt_id=attempt.pk, lease_epoch=3, envelope=envelope("inner"), causal=causal)
        raise LookupError("the caller's effect failed")
    assert not Event.objects.filter(envelope_id="inner").exists()
    assert bucket_count(trigger.seq, MINUTE) == 0


@pytest.mark.django_db
def test_r51_emit_checks_its_arguments(causal, attempt):
    with pytest.raises(TypeError, match="lease_epoch"):
        emit(attempt_id=attempt.pk, lease_epoch="3", envelope=envelope("x"), causal=causal)
    with pytest.raises(TypeError, match="envelope"):
        emit(attempt_id=attempt.pk, lease_epoch=3, envelope={"id": "x"}, causal=causal)
    assert not CausalDiagnostic.objects.exists()


@pytest.mark.django_db
def test_i9_1_an_attempt_cannot_emit_data_nested_past_the_acceptance_limit(clock, settings):
    settings.CONDUIT_MAX_JSON_DEPTH = 3
    work = WorkFactory(scope="t")
    assert json_depth({"a": [{"b": 1}]}) == 3 and json_depth(7) == 0
    assert emit_envelope(work=work, attempt_id=1, message={"type": "t.x", "data": {"a": [{"b": 1}]}}).data
    with pytest.raises(WorkError, match="deeper than 3 levels"):
        emit_envelope(work=work, attempt_id=1, message={"type": "t.x", "data": {"a": [{"b": [1]}]}})
