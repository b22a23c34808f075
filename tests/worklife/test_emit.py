"""Emit from inside an attempt (R51, R61): the fenced attempt's trigger is the parent; forged
ancestry, stale leases, reserved families and cross-Work identity are refused with diagnostics;
an emit call's message becomes an envelope only within the acceptance limits."""

from __future__ import annotations

from datetime import timedelta
from functools import partial

import pytest

from causal.limits import Causal, CausalRefused, Limits, derived_atomic
from causal.models import CausalDiagnostic, DiagnosticKind, Event
from tests.causal.factories import EventFactory
from tests.causal.support import SECRET, assert_redacted, bucket_count, envelope
from tests.worklife.factories import AttemptFactory, WorkFactory
from worklife import emit as emits
from worklife.emit import emit_envelope
from worklife.errors import WorkError
from worklife.models import AttemptState

MINUTE = "2026-01-05T12:00"
# The envelopes of these tests come from tests.agent (tests.causal.support.envelope): their
# attempts' binding speaks for it (emit_sources).
SPEAKS = ("tests.agent",)
emit = partial(emits.emit, speaks_for=SPEAKS)
emit_in_tx = partial(emits.emit_in_tx, speaks_for=SPEAKS)


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
def test_an_attempt_cannot_emit_data_nested_past_the_acceptance_limit(clock, settings):
    # As acceptance counts: the Event is the first level, its data the second.
    settings.CONDUIT_MAX_JSON_DEPTH = 4
    work = WorkFactory(scope="t")
    message = {"type": "t.x", "data": {"a": [{"b": 1}]}}
    assert emit_envelope(work=work, attempt_id=1, message=message, ordinal=1).data
    with pytest.raises(WorkError, match=r"data: the JSON nests arrays and objects more than 4 levels deep"):
        emit_envelope(
            work=work, attempt_id=1, message={"type": "t.x", "data": {"a": [{"b": [1]}]}}, ordinal=1
        )


# --- a Work emits as itself ----------------------------------------------------------------------


@pytest.mark.django_db
def test_emit_refuses_a_source_neither_the_works_own_nor_spoken_for(causal, attempt):
    own = f"conduit.work/{attempt.work_id}"
    refusals = {
        "another-work": f"conduit.work/{attempt.work_id + 1}",
        "own-in-capitals": own.upper(),
        "a-real-sender": "github.com/acme/web",
    }
    for name, source in refusals.items():
        refused = refusal_of(
            causal, attempt_id=attempt.pk, lease_epoch=3, envelope=envelope(name, source=source)
        )
        assert refused.kind == DiagnosticKind.CROSS_WORK, name
    assert not Event.objects.filter(envelope_id__in=refusals).exists()
    assert emits.emit(
        attempt_id=attempt.pk, lease_epoch=3, envelope=envelope("own", source=own), causal=causal
    )
    spoken = emits.emit(
        attempt_id=attempt.pk,
        lease_epoch=3,
        envelope=envelope("spoken", source="github.com/acme/web"),
        causal=causal,
        speaks_for=("github.com/acme/web",),
    )
    assert spoken.event.source == "github.com/acme/web"


@pytest.mark.django_db
def test_emit_refuses_an_id_conduit_writes_itself(causal, attempt):
    for event_id in ("reroute/gh-1", "Timer/7", "wait-woken/3", f"emit/{attempt.work_id + 1}/id/x"):
        refused = refusal_of(causal, attempt_id=attempt.pk, lease_epoch=3, envelope=envelope(event_id))
        assert refused.kind == DiagnosticKind.RESERVED_ID, event_id
    own = f"emit/{attempt.work_id}/id/x"
    assert emit(attempt_id=attempt.pk, lease_epoch=3, envelope=envelope(own), causal=causal).created


@pytest.mark.django_db
def test_an_emits_id_is_conduits_and_the_same_for_the_same_hint(clock):
    work = WorkFactory(scope="t")
    first = emit_envelope(work=work, attempt_id=8, message={"type": "t.x"}, ordinal=1)
    second = emit_envelope(work=work, attempt_id=8, message={"type": "t.x"}, ordinal=2)
    assert (first.source, first.id, second.id) == (
        f"conduit.work/{work.pk}",
        f"emit/{work.pk}/8/1",
        f"emit/{work.pk}/8/2",
    )
    hinted = {"type": "t.x", "event_id": "reroute/gh-1", "source": "acme.bot"}
    once = emit_envelope(work=work, attempt_id=8, message=hinted, ordinal=3)
    again = emit_envelope(work=work, attempt_id=9, message=hinted, ordinal=1)  # a later attempt
    assert once.id == again.id == f"emit/{work.pk}/id/reroute/gh-1"
    assert once.source == "acme.bot"  # emit_in_tx decides whether the binding speaks for it


def run_emits(clock, calls: dict, *, emit_sources: list[str]) -> tuple[int, dict]:
    """Run one Work whose Python target makes ``calls`` (``targets.emits_as``) through the
    work loop, with real worker processes; returns the Work's id and the target's result."""
    import json

    from tests.routing.routerkit import accept, apply, router
    from tests.worklife.enginekit import runner, step_until
    from worklife.models import Attempt

    settings = {"target": "tests.worklife.targets:emits_as", "params": {"calls": list(calls.items())}}
    if emit_sources:
        settings["emit_sources"] = emit_sources
    binding = {"executor": "python", "settings": settings}
    route = {
        "slot": "agent",
        "handler": "match",
        "params": {"type": "e.agent", "keys": ["k:{data.key}"]},
        "binding": "agent",
        "policy": "queue",
    }
    document = {"version": 1, "scopes": [{"path": "e", "bindings": {"agent": binding}, "routes": [route]}]}
    apply(clock, json.dumps(document))
    accept(clock, "e.agent", {"key": "one"}, scope="e", source="github.com/acme/web", id="gh-delivery-1")
    router(clock).route_pending()
    loop = runner(clock)
    try:
        step_until(loop, lambda: Attempt.objects.filter(state__in=["succeeded", "failed"]).exists())
    finally:
        loop.shutdown(grace=0)
    attempt = Attempt.objects.get()
    assert attempt.state == "succeeded", attempt.error
    return attempt.work_id, attempt.result


@pytest.mark.django_db(transaction=True)
def test_a_work_emits_as_itself_never_as_another_work_or_a_sender(clock, test_handlers):
    from routing.acceptance.services import event_accept

    calls = {
        "plain": {"type": "t.note"},
        "plain-again": {"type": "t.note"},
        "hinted": {"type": "t.note", "event_id": "reroute/gh-delivery-1"},
        "hinted-again": {"type": "t.note", "event_id": "reroute/gh-delivery-1", "data": {"n": 2}},
        "another-work": {"type": "t.note", "source": "conduit.work/999999", "event_id": "x"},
        "a-sender": {"type": "github.push", "source": "github.com/acme/web", "event_id": "gh-delivery-777"},
        "spoken-for": {"type": "t.note", "source": "acme.bot", "event_id": "gh-delivery-777"},
        "core": {"type": "Core.Work.Created"},
    }
    work_id, result = run_emits(clock, calls, emit_sources=["acme.bot"])
    emitted = {
        name: Event.objects.get(seq=answer["seq"]) for name, answer in result.items() if "seq" in answer
    }
    identities = {name: (event.source, event.envelope_id) for name, event in emitted.items()}
    own = f"conduit.work/{work_id}"
    assert identities["plain"][0] == identities["plain-again"][0] == own
    assert identities["plain"][1].startswith(f"emit/{work_id}/") and identities["plain"][1].endswith("/1")
    assert identities["plain-again"][1].endswith("/2")
    assert identities["hinted"] == (own, f"emit/{work_id}/id/reroute/gh-delivery-1")
    assert emitted["hinted-again"].seq == emitted["hinted"].seq  # a duplicate, not a second Event
    assert identities["spoken-for"] == ("acme.bot", f"emit/{work_id}/id/gh-delivery-777")
    for name in ("another-work", "a-sender", "core"):
        assert result[name]["refused"].startswith("emit refused: "), (name, result[name])
    assert "conduit.work/999999" in result["another-work"]["refused"]
    assert "emit_sources" in result["a-sender"]["refused"]
    refusals = CausalDiagnostic.objects.values_list("kind", "occurrences")
    assert sorted(refusals) == [("cross_work", 2), ("reserved_type", 1)]
    # Nothing was taken from the real sender or from an operator's reroute of its delivery.
    assert not Event.objects.filter(envelope_id__startswith="reroute/").exists()
    delivery = {
        "specversion": "1.0",
        "id": "gh-delivery-777",
        "source": "github.com/acme/web",
        "type": "github.push",
        "scope": "e",
    }
    assert event_accept(payload=delivery, clock=clock).created


# --- an emitted Event is held to acceptance's limits ----------------------------------------------


@pytest.mark.django_db
def test_an_emit_past_a_field_limit_is_refused_naming_the_field_never_cut(clock, settings):
    work = WorkFactory(scope="t")
    limit = settings.CONDUIT_MAX_EVENT_BYTES
    refusals = {
        "data": ({"type": "t.x", "data": "d" * 5_000_000}, "data: the Event is 50001"),
        "subject": ({"type": "t.x", "subject": "s" * 100_000}, "subject: subject is 100000 characters long"),
        "event_id": ({"type": "t.x", "event_id": "i" * 100_000}, "event_id: event_id is 100000 characters"),
        "source": ({"type": "t.x", "source": "s" * 1000}, "source: source is 1000 characters long"),
        "type": ({"type": "t" * 256}, "type: type is 256 characters long; the limit is 255"),
        "nul": ({"type": "t.x", "data": {"a": ["\x00"]}}, r"data.a[0]: NUL characters"),
        "no-type": ({"data": 1}, "type: type must be a string, not null"),
    }
    for name, (message, expected) in refusals.items():
        with pytest.raises(WorkError) as refused:
            emit_envelope(work=work, attempt_id=1, message=message, ordinal=1)
        assert str(refused.value).startswith(expected), (name, str(refused.value))
    assert f"the limit is {limit} bytes (CONDUIT_MAX_EVENT_BYTES)" in _refusal(work, refusals["data"][0])
    # Up to the limits, nothing is cut.
    fits = emit_envelope(
        work=work,
        attempt_id=1,
        message={"type": "t" * 255, "subject": "s" * 512, "event_id": "i" * 400, "data": "d" * 200_000},
        ordinal=1,
    )
    assert (len(fits.type), len(fits.subject), len(fits.data)) == (255, 512, 200_000)
    assert fits.id == f"emit/{work.pk}/id/" + "i" * 400


def _refusal(work, message) -> str:
    with pytest.raises(WorkError) as refused:
        emit_envelope(work=work, attempt_id=1, message=message, ordinal=1)
    return str(refused.value)


@pytest.mark.django_db(transaction=True)
def test_the_attempt_is_told_which_field_of_its_emit_is_past_the_limits(clock, test_handlers):
    calls = {
        "data": {"type": "t.big", "data_chars": 1_000_000},
        "subject": {"type": "t.x", "subject_chars": 100_000},
        "event_id": {"type": "t.x", "event_id_chars": 100_000},
        "source": {"type": "t.x", "source_chars": 1000},
        "fits": {"type": "t.x", "data_chars": 200_000, "subject_chars": 512},
    }
    _work_id, result = run_emits(clock, calls, emit_sources=[])
    for field in ("data", "subject", "event_id", "source"):
        assert result[field]["refused"].startswith(f"emit refused: {field}: "), result[field]
    fitted = Event.objects.get(seq=result["fits"]["seq"])
    assert (len(fitted.data), len(fitted.subject)) == (200_000, 512)
    assert Event.objects.filter(type__startswith="t.").count() == 1
    assert not CausalDiagnostic.objects.exists()  # refused before the causal limits


# --- a Work refused in a loop -----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_work_refused_in_a_loop_writes_a_record_not_a_row_a_refusal(clock, test_handlers):
    import json

    from tests.routing.routerkit import accept, apply, router
    from tests.worklife.enginekit import runner, step_until
    from worklife.models import Attempt

    settings = {"target": "tests.worklife.targets:emits_many", "params": {"count": 100}}
    route = {
        "slot": "loop",
        "handler": "match",
        "params": {"type": "e.loop"},
        "binding": "loop",
        "policy": "queue",
    }
    bindings = {"loop": {"executor": "python", "settings": settings}}
    apply(
        clock, json.dumps({"version": 1, "scopes": [{"path": "e", "bindings": bindings, "routes": [route]}]})
    )
    trigger = accept(clock, "e.loop", {}, scope="e")
    router(clock).route_pending()
    loop = runner(clock, causal=Causal(clock, Limits(max_depth=32, rate_per_minute=5)))
    try:
        step_until(
            loop, lambda: Attempt.objects.filter(state__in=["succeeded", "failed"]).exists(), timeout=60
        )
    finally:
        loop.shutdown(grace=0)
    attempt = Attempt.objects.get()
    assert attempt.result == {"accepted": 5, "refused": 95}, attempt.error
    (record,) = CausalDiagnostic.objects.all()
    assert (record.kind, record.root_seq, record.occurrences) == ("rate_exceeded", trigger.seq, 95)
    assert (record.work_id, record.attempt_id) == (attempt.work_id, attempt.pk)
