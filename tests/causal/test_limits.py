"""Derived acceptance under the causal limits (R51–R55): depth, rate, pins, replay, refusals."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction

from causal.limits import (
    BUCKETS_NAMESPACE,
    PINS_NAMESPACE,
    Causal,
    CausalRefused,
    Limits,
    Pin,
    bucket_key,
    derived_atomic,
    minute_start,
    pin_from_value,
    pin_key,
)
from causal.models import KV, CausalDiagnostic, DiagnosticKind, Event
from tests.causal.factories import EventFactory, KVFactory
from tests.causal.support import (
    SECRET,
    assert_redacted,
    bucket_count,
    envelope,
    run_worker,
    start_worker,
    worker_env,
)

MINUTE = "2026-01-05T12:00"


@pytest.fixture
def causal(clock) -> Causal:
    return Causal(clock, Limits(max_depth=32, rate_per_minute=128))


@pytest.fixture
def root():
    return EventFactory(type="test.root", data={"token": SECRET})


def derive_chain(causal: Causal, parent: Event, length: int, prefix: str = "chain") -> Event:
    for i in range(length):
        parent = causal.derive(parent=parent, envelope=envelope(f"{prefix}-{i}")).event
    return parent


# --- depth (R52) -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_r52_root_depth_is_zero_and_a_child_is_one_deeper(causal, root):
    assert root.depth == 0 and root.root_seq == root.seq
    child = causal.derive(parent=root, envelope=envelope("child")).event
    grandchild = causal.derive(parent=child, envelope=envelope("grandchild")).event
    assert (child.depth, child.parent_id, child.root_id) == (1, root.seq, root.seq)
    assert (grandchild.depth, grandchild.parent_id, grandchild.root_id) == (2, child.seq, root.seq)
    assert (grandchild.parent.type, grandchild.parent.envelope_id) == ("test.derived", "child")


@pytest.mark.django_db
def test_r52_depth_32_accepted_and_33_refused(causal, root):
    deepest = derive_chain(causal, root, 32)
    assert deepest.depth == 32
    with pytest.raises(CausalRefused) as refused:
        causal.derive(parent=deepest, envelope=envelope("too-deep"))
    assert refused.value.kind == DiagnosticKind.DEPTH_EXCEEDED
    assert (refused.value.limit, refused.value.count) == (32, 33)
    assert not Event.objects.filter(envelope_id="too-deep").exists()
    assert bucket_count(root.seq, MINUTE) == 32  # the refusal spent no token
    diagnostic = CausalDiagnostic.objects.get()
    assert (diagnostic.kind, diagnostic.root_seq, diagnostic.parent_seq) == (
        "depth_exceeded",
        root.seq,
        deepest.seq,
    )
    assert (diagnostic.limit, diagnostic.count) == (32, 33)


@pytest.mark.django_db
def test_r52_default_limits_come_from_settings(settings, clock):
    settings.CONDUIT_CAUSAL_MAX_DEPTH = 3
    settings.CONDUIT_CAUSAL_RATE_PER_MINUTE = 7
    assert Causal(clock).limits == Limits(max_depth=3, rate_per_minute=7)


@pytest.mark.django_db
def test_r52_the_shipped_defaults_are_depth_32_and_128_a_minute(clock):
    assert Causal(clock).limits == Limits(max_depth=32, rate_per_minute=128)


# --- rate (R52, R55) ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_r52_128_derived_a_minute_per_root_and_the_129th_refused(causal, root):
    for i in range(128):
        causal.derive(parent=root, envelope=envelope(f"sibling-{i}"))
    with pytest.raises(CausalRefused) as refused:
        causal.derive(parent=root, envelope=envelope("sibling-128"))
    assert refused.value.kind == DiagnosticKind.RATE_EXCEEDED
    assert (refused.value.limit, refused.value.count) == (128, 128)
    assert Event.objects.filter(root_id=root.seq).count() == 128
    assert bucket_count(root.seq, MINUTE) == 128
    diagnostic = CausalDiagnostic.objects.get()
    assert diagnostic.minute == datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
    assert (diagnostic.kind, diagnostic.root_seq, diagnostic.limit, diagnostic.count) == (
        "rate_exceeded",
        root.seq,
        128,
        128,
    )


@pytest.mark.django_db
def test_r52_the_rate_counts_all_descendants_of_a_root_and_roots_apart(clock, root):
    causal = Causal(clock, Limits(max_depth=32, rate_per_minute=3))
    child = causal.derive(parent=root, envelope=envelope("a")).event
    grandchild = causal.derive(parent=child, envelope=envelope("b")).event
    causal.derive(parent=grandchild, envelope=envelope("c"))
    with pytest.raises(CausalRefused):
        causal.derive(parent=child, envelope=envelope("d"))
    other = EventFactory()
    assert causal.derive(parent=other, envelope=envelope("e")).created  # its own bucket


@pytest.mark.django_db
def test_r55_minute_boundary_at_59_999_and_60_000(clock, root):
    causal = Causal(clock, Limits(max_depth=32, rate_per_minute=128))
    clock.set(datetime(2026, 1, 5, 12, 0, 0, tzinfo=UTC))
    for i in range(128):
        causal.derive(parent=root, envelope=envelope(f"m0-{i}"))
    clock.set(datetime(2026, 1, 5, 12, 0, 59, 999000, tzinfo=UTC))
    with pytest.raises(CausalRefused) as refused:
        causal.derive(parent=root, envelope=envelope("at-59.999"))
    assert refused.value.kind == DiagnosticKind.RATE_EXCEEDED
    clock.set(datetime(2026, 1, 5, 12, 1, 0, 0, tzinfo=UTC))
    accepted = causal.derive(parent=root, envelope=envelope("at-60.000"))
    assert accepted.created and accepted.event.accepted_at == clock.now
    assert bucket_count(root.seq, "2026-01-05T12:00") == 128
    assert bucket_count(root.seq, "2026-01-05T12:01") == 1


@pytest.mark.django_db
def test_r55_the_next_minute_restores_rate_capacity_but_not_depth(clock, root):
    causal = Causal(clock, Limits(max_depth=2, rate_per_minute=2))
    deepest = derive_chain(causal, root, 2)
    with pytest.raises(CausalRefused) as rate:
        causal.derive(parent=root, envelope=envelope("third-this-minute"))
    with pytest.raises(CausalRefused) as depth:
        causal.derive(parent=deepest, envelope=envelope("too-deep"))
    assert (rate.value.kind, depth.value.kind) == ("rate_exceeded", "depth_exceeded")
    clock.advance(minutes=1)
    assert causal.derive(parent=root, envelope=envelope("third-this-minute")).created
    with pytest.raises(CausalRefused) as again:
        causal.derive(parent=deepest, envelope=envelope("too-deep"))
    assert again.value.kind == DiagnosticKind.DEPTH_EXCEEDED


def test_r52_minute_buckets_are_fixed_utc_minutes():
    from zoneinfo import ZoneInfo

    local = datetime(2026, 1, 5, 13, 30, 59, 999999, tzinfo=ZoneInfo("Europe/Paris"))
    assert minute_start(local) == datetime(2026, 1, 5, 12, 30, tzinfo=UTC)
    assert bucket_key(7, local) == "7:2026-01-05T12:30"
    with pytest.raises(ValueError, match="aware"):
        minute_start(datetime(2026, 1, 5, 12, 30))


# --- replay (R52) ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_r61_replay_a_deduplicated_derived_event_spends_no_token(causal, root):
    first = causal.derive(parent=root, envelope=envelope("once"))
    again = causal.derive(parent=root, envelope=envelope("once"))
    assert first.created and not again.created
    assert again.event.seq == first.event.seq
    assert bucket_count(root.seq, MINUTE) == 1
    assert Event.objects.filter(envelope_id="once").count() == 1


@pytest.mark.django_db
def test_r61_replay_is_returned_as_is_even_when_the_bucket_is_full(clock, root):
    causal = Causal(clock, Limits(max_depth=32, rate_per_minute=1))
    first = causal.derive(parent=root, envelope=envelope("only"))
    again = causal.derive(parent=root, envelope=envelope("only"))
    assert again.event.seq == first.event.seq and not again.created
    assert not CausalDiagnostic.objects.exists()
    assert bucket_count(root.seq, MINUTE) == 1


# --- pins (R53) ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_r53_limits_are_pinned_on_the_first_derived_acceptance(causal, root, clock):
    assert not KV.objects.filter(namespace=PINS_NAMESPACE).exists()
    causal.derive(parent=root, envelope=envelope("first"))
    pin = KV.objects.get(namespace=PINS_NAMESPACE, key=str(root.seq))
    assert pin.value == {"max_depth": 32, "rate_per_minute": 128, "pinned_at": clock.now.isoformat()}
    clock.advance(minutes=5)
    causal.derive(parent=root, envelope=envelope("second"))
    assert KV.objects.get(namespace=PINS_NAMESPACE, key=str(root.seq)).value == pin.value


@pytest.mark.django_db
def test_r53_descendants_keep_pinned_limits_when_a_new_causal_has_other_limits(clock, root):
    Causal(clock, Limits(max_depth=32, rate_per_minute=128)).derive(parent=root, envelope=envelope("pinning"))
    restarted = Causal(clock, Limits(max_depth=1, rate_per_minute=2))
    child = restarted.derive(parent=root, envelope=envelope("child")).event
    grandchild = restarted.derive(parent=child, envelope=envelope("grandchild")).event  # depth 2 > 1
    assert grandchild.depth == 2
    for i in range(5):  # more than 2 this minute
        restarted.derive(parent=root, envelope=envelope(f"more-{i}"))
    assert bucket_count(root.seq, MINUTE) == 8
    # A root first derived from under the new limits is pinned with them.
    other = EventFactory()
    restarted.derive(parent=other, envelope=envelope("o1"))
    restarted.derive(parent=other, envelope=envelope("o2"))
    with pytest.raises(CausalRefused) as refused:
        restarted.derive(parent=other, envelope=envelope("o3"))
    assert refused.value.limit == 2


@pytest.mark.django_db
def test_r53_descendants_keep_pinned_limits_across_a_settings_change(settings, clock, root):
    Causal(clock).derive(parent=root, envelope=envelope("pinning"))
    settings.CONDUIT_CAUSAL_MAX_DEPTH = 1
    settings.CONDUIT_CAUSAL_RATE_PER_MINUTE = 1
    restarted = Causal(clock)
    assert restarted.limits == Limits(max_depth=1, rate_per_minute=1)
    child = restarted.derive(parent=root, envelope=envelope("child")).event
    assert restarted.derive(parent=child, envelope=envelope("grandchild")).event.depth == 2
    pin = KV.objects.get(namespace=PINS_NAMESPACE, key=pin_key(root.seq))
    assert pin_from_value(root.seq, pin.value).limits == Limits(max_depth=32, rate_per_minute=128)


@pytest.mark.django_db
def test_r53_a_refused_first_derivation_pins_nothing(clock, root):
    with pytest.raises(CausalRefused):
        Causal(clock, Limits(max_depth=32, rate_per_minute=0)).derive(parent=root, envelope=envelope("no"))
    assert not KV.objects.filter(namespace__in=[PINS_NAMESPACE, BUCKETS_NAMESPACE]).exists()
    # The next Causal, with capacity, pins its own limits.
    Causal(clock, Limits(max_depth=5, rate_per_minute=5)).derive(parent=root, envelope=envelope("yes"))
    assert KV.objects.get(namespace=PINS_NAMESPACE, key=str(root.seq)).value["max_depth"] == 5


# --- missing parents and diagnostics (R55) ---------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "parent", [None, Event(), Event(seq=987654321)], ids=["no parent", "unsaved parent", "unknown parent"]
)
def test_r55_a_missing_parent_is_refused_with_a_diagnostic(causal, parent):
    with pytest.raises(CausalRefused) as refused:
        causal.derive(parent=parent, envelope=envelope("orphan"))
    assert refused.value.kind == DiagnosticKind.MISSING_PARENT
    assert not Event.objects.exists()
    assert not KV.objects.exists()
    diagnostic = CausalDiagnostic.objects.get()
    assert diagnostic.kind == "missing_parent"
    assert diagnostic.parent_seq == (987654321 if parent is not None and parent.pk else None)
    assert refused.value.diagnostic.pk == diagnostic.pk


@pytest.mark.django_db
def test_r55_every_refusal_writes_a_redacted_diagnostic(clock, root):
    causal = Causal(clock, Limits(max_depth=1, rate_per_minute=1))
    child = causal.derive(parent=root, envelope=envelope("child")).event
    refusals = []
    for parent, name in ((None, "missing"), (child, "too-deep"), (root, "too-many")):
        with pytest.raises(CausalRefused) as refused:
            causal.derive(parent=parent, envelope=envelope(name, extensions={"note": SECRET}))
        assert SECRET not in str(refused.value)
        refusals.append(refused.value)
    assert [r.kind for r in refusals] == ["missing_parent", "depth_exceeded", "rate_exceeded"]
    assert CausalDiagnostic.objects.count() == 3
    for diagnostic in CausalDiagnostic.objects.all():
        assert_redacted(diagnostic)
        assert diagnostic.at == clock.now
        assert (diagnostic.source, diagnostic.type) == ("tests.agent", "test.derived")
        assert diagnostic.detail


# --- atomicity and the refusal boundary (R54, R55) -------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_r54_an_error_after_derive_in_tx_leaves_no_event_and_no_token(causal, root):
    causal.derive(parent=root, envelope=envelope("before"))
    with pytest.raises(ZeroDivisionError), derived_atomic():
        accepted = causal.derive_in_tx(parent=root, envelope=envelope("rolled-back"))
        assert accepted.created
        assert bucket_count(root.seq, MINUTE) == 2  # spent inside the transaction...
        1 / 0  # noqa: B018 - the caller's own effect fails after the derivation
    assert not Event.objects.filter(envelope_id="rolled-back").exists()
    assert bucket_count(root.seq, MINUTE) == 1  # ...and given back with it


@pytest.mark.django_db(transaction=True)
def test_r54_a_rolled_back_first_derivation_leaves_no_pin(causal, root):
    with pytest.raises(RuntimeError, match="caller"), derived_atomic():
        causal.derive_in_tx(parent=root, envelope=envelope("first"))
        raise RuntimeError("the caller fails")
    assert not KV.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_r54_effects_commit_with_the_derived_event(causal, root, clock):
    from causal.services import kv_put_in_tx

    with derived_atomic():
        event = causal.derive_in_tx(parent=root, envelope=envelope("with-effect")).event
        kv_put_in_tx(namespace="tests.effects", key=str(event.seq), value={"ok": True}, clock=clock)
    assert KV.objects.filter(namespace="tests.effects", key=str(event.seq)).exists()
    assert Event.objects.filter(seq=event.seq).exists()


@pytest.mark.django_db(transaction=True)
def test_r55_the_diagnostic_survives_the_callers_rollback(clock, root):
    causal = Causal(clock, Limits(max_depth=32, rate_per_minute=0))
    with pytest.raises(CausalRefused), derived_atomic():
        causal.derive_in_tx(parent=root, envelope=envelope("refused"))
    diagnostic = CausalDiagnostic.objects.get()
    assert diagnostic.kind == "rate_exceeded"
    assert_redacted(diagnostic)


@pytest.mark.django_db(transaction=True)
def test_r55_a_caught_refusal_leaves_the_callers_transaction_usable(clock, root):
    causal = Causal(clock, Limits(max_depth=1, rate_per_minute=5))
    child = causal.derive(parent=root, envelope=envelope("child")).event
    with derived_atomic():
        with pytest.raises(CausalRefused):
            causal.derive_in_tx(parent=child, envelope=envelope("too-deep"))
        sibling = causal.derive_in_tx(parent=root, envelope=envelope("sibling")).event
    assert Event.objects.filter(seq=sibling.seq).exists()
    assert bucket_count(root.seq, MINUTE) == 2
    assert CausalDiagnostic.objects.get().kind == "depth_exceeded"  # written once


@pytest.mark.django_db(transaction=True)
def test_r54_derive_in_tx_must_run_in_a_transaction_and_a_refusal_boundary(causal, root):
    with pytest.raises(RuntimeError, match="transaction.atomic"):
        causal.derive_in_tx(parent=root, envelope=envelope("no-tx"))
    with pytest.raises(RuntimeError, match="derived_atomic"), transaction.atomic():
        causal.derive_in_tx(parent=root, envelope=envelope("no-boundary"))
    assert not Event.objects.filter(envelope_id__in=["no-tx", "no-boundary"]).exists()


# --- dry run, input checks -------------------------------------------------------------------


@pytest.mark.django_db
def test_r41_would_refuse_is_a_dry_run_that_writes_nothing(clock, root):
    causal = Causal(clock, Limits(max_depth=1, rate_per_minute=1))
    assert causal.would_refuse(parent=root) is None
    assert not KV.objects.exists()
    child = causal.derive(parent=root, envelope=envelope("child")).event
    assert causal.would_refuse(parent=child).kind == "depth_exceeded"
    assert causal.would_refuse(parent=root).kind == "rate_exceeded"
    assert causal.would_refuse(parent=None).kind == "missing_parent"
    assert not CausalDiagnostic.objects.exists()
    clock.advance(seconds=60)
    assert causal.would_refuse(parent=root) is None


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_depth": -1, "rate_per_minute": 1}, "max_depth"),
        ({"max_depth": 1, "rate_per_minute": 1.5}, "rate_per_minute"),
        ({"max_depth": True, "rate_per_minute": 1}, "max_depth"),
    ],
)
def test_r52_limits_reject_bad_values_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        Limits(**kwargs)


def test_r52_a_bad_setting_is_named(settings, clock):
    settings.CONDUIT_CAUSAL_RATE_PER_MINUTE = "lots"
    with pytest.raises(ImproperlyConfigured, match="CONDUIT_CAUSAL_RATE_PER_MINUTE"):
        Causal(clock)


@pytest.mark.django_db
def test_r51_a_naive_clock_is_refused_with_nothing_stored(root):
    causal = Causal(lambda: datetime(2026, 1, 5, 12, 0), Limits(32, 128))
    with pytest.raises(ValueError, match="aware"):
        causal.derive(parent=root, envelope=envelope("naive"))
    assert not Event.objects.filter(envelope_id="naive").exists()
    assert not CausalDiagnostic.objects.exists()


@pytest.mark.django_db
def test_r51_derive_takes_an_envelope(causal, root):
    with pytest.raises(TypeError, match="Envelope"):
        causal.derive(parent=root, envelope={"id": "x"})


@pytest.mark.django_db
def test_r52_accepted_at_is_the_trusted_clock(causal, root, clock):
    clock.advance(timedelta(seconds=12.5).total_seconds())
    event = causal.derive(parent=root, envelope=envelope("timed")).event
    assert event.accepted_at == clock.now
    assert event.accepted_by == "core.causal"


# --- refusals counted, not written a row each ----------------------------------------------------


@pytest.mark.django_db
def test_refusals_are_counted_on_one_record_per_root_kind_and_minute(clock, root):
    from causal.selectors import roots_refused_since

    refusing = Causal(clock, Limits(max_depth=1, rate_per_minute=0))
    clock.set(datetime(2026, 1, 5, 12, 0, 10, tzinfo=UTC))
    refused = []
    for i in range(300):
        with pytest.raises(CausalRefused) as refusal:
            refusing.derive(parent=root, envelope=envelope(f"r{i}"))
        refused.append(refusal.value)
        clock.advance(0.1)  # 30 s: still the same minute
    (record,) = CausalDiagnostic.objects.all()
    assert (record.kind, record.root_seq, record.occurrences) == ("rate_exceeded", root.seq, 300)
    assert (record.envelope_id, record.at, record.last_at) == (
        "r0",
        datetime(2026, 1, 5, 12, 0, 10, tzinfo=UTC),
        datetime(2026, 1, 5, 12, 0, 39, 900000, tzinfo=UTC),
    )
    assert {r.diagnostic.pk for r in refused} == {record.pk}
    # Another minute, another root, another kind: a record each.
    clock.set(datetime(2026, 1, 5, 12, 1, 0, tzinfo=UTC))
    for name in ("next-minute", "again"):
        with pytest.raises(CausalRefused):
            refusing.derive(parent=root, envelope=envelope(name))
    other = EventFactory()
    child = Causal(clock, Limits(max_depth=1, rate_per_minute=10)).derive(
        parent=other, envelope=envelope("c")
    )
    for name in ("too-deep", "deeper"):
        with pytest.raises(CausalRefused):
            refusing.derive(parent=child.event, envelope=envelope(name))
    counted = CausalDiagnostic.objects.order_by("id").values_list("kind", "root_seq", "occurrences")
    assert list(counted) == [
        ("rate_exceeded", root.seq, 300),
        ("rate_exceeded", root.seq, 2),
        ("depth_exceeded", other.seq, 2),
    ]
    # What doctor reads counts the refusals, not the records.
    by_root = {r["root_seq"]: r for r in roots_refused_since(datetime(2026, 1, 5, 11, 0, tzinfo=UTC))}
    assert (by_root[root.seq]["refusals"], by_root[root.seq]["kinds"]) == (302, {"rate_exceeded": 302})
    assert (by_root[other.seq]["refusals"], by_root[other.seq]["kinds"]) == (2, {"depth_exceeded": 2})


# Concurrent sibling quotas and restart-pinned limits (R53, R54, R61): several threads, several
# processes, and a "restarted" process with other settings, all on the real database.
MINUTE = "2026-01-05T12:00"


def derive_concurrently(
    causal: Causal, parents: list[Event], threads: int, per_thread: int
) -> dict[str, int]:
    """``threads`` threads, released together, each deriving ``per_thread`` children of
    ``parents`` (round robin); returns how many were accepted and refused."""
    barrier = threading.Barrier(threads)
    outcomes: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def work(t: int) -> None:
        try:
            barrier.wait()
            for i in range(per_thread):
                parent = parents[(t + i) % len(parents)]
                try:
                    causal.derive(parent=parent, envelope=envelope(f"t{t}-{i}"))
                    outcome = "accepted"
                except CausalRefused:
                    outcome = "refused"
                with lock:
                    outcomes.append(outcome)
        except BaseException as error:  # noqa: BLE001 - reported to the test thread below
            errors.append(error)
        finally:
            connection.close()

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=300)
    assert not errors, errors
    return {"accepted": outcomes.count("accepted"), "refused": outcomes.count("refused")}


@pytest.mark.django_db(transaction=True)
def test_r61_concurrent_sibling_quota_threads_accept_exactly_128(clock):
    root = EventFactory()
    causal = Causal(clock, Limits(max_depth=32, rate_per_minute=128))
    child = causal.derive(parent=root, envelope=envelope("child")).event
    counts = derive_concurrently(causal, [root, child], threads=6, per_thread=25)
    assert counts == {"accepted": 127, "refused": 23}
    assert Event.objects.filter(root_id=root.seq).count() == 128
    assert bucket_count(root.seq, MINUTE) == 128
    # Counted on one row (one root, kind and minute), by concurrent writers.
    (diagnostic,) = CausalDiagnostic.objects.filter(kind="rate_exceeded", root_seq=root.seq)
    assert diagnostic.occurrences == 23


@pytest.mark.django_db(transaction=True)
def test_r61_concurrent_first_derivations_pin_once(clock):
    root = EventFactory()
    causal = Causal(clock, Limits(max_depth=32, rate_per_minute=128))
    counts = derive_concurrently(causal, [root], threads=4, per_thread=3)
    assert counts == {"accepted": 12, "refused": 0}
    assert KV.objects.filter(namespace=PINS_NAMESPACE).count() == 1
    assert bucket_count(root.seq, MINUTE) == 12


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_r61_concurrent_sibling_quota_processes_accept_exactly_128(clock):
    root = EventFactory()
    Causal(clock, Limits(max_depth=32, rate_per_minute=128)).derive(parent=root, envelope=envelope("pin"))
    start_at = time.time() + 3  # after every worker's start-up, so that they overlap
    workers = [
        start_worker(
            *("--at", clock.now.isoformat(), "--parent", str(root.seq), "--count", "50"),
            *("--prefix", f"p{n}", "--start-at", str(start_at)),
        )
        for n in range(3)
    ]
    results = [worker.result() for worker in workers]
    assert sum(r["accepted"] for r in results) == 127
    assert sum(r["refused"] for r in results) == 23
    assert sum(r["replayed"] for r in results) == 0
    assert Event.objects.filter(root_id=root.seq).count() == 128
    assert bucket_count(root.seq, MINUTE) == 128
    (diagnostic,) = CausalDiagnostic.objects.filter(kind="rate_exceeded")
    assert diagnostic.occurrences == 23


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_r53_restarted_process_with_other_settings_keeps_the_pinned_limits(clock):
    root = EventFactory()
    Causal(clock, Limits(max_depth=32, rate_per_minute=128)).derive(parent=root, envelope=envelope("pin"))
    pin_before = KV.objects.get(namespace=PINS_NAMESPACE, key=str(root.seq)).value
    restarted = worker_env(CONDUIT_CAUSAL_MAX_DEPTH="1", CONDUIT_CAUSAL_RATE_PER_MINUTE="2")
    at = clock.now.isoformat()
    chain = run_worker("--at", at, "--parent", str(root.seq), "--count", "5", "--chain", env=restarted)
    assert chain["configured"] == [1, 2]
    assert (chain["accepted"], chain["refused"], chain["replayed"]) == (5, 0, 0)
    assert chain["depths"] == [1, 2, 3, 4, 5]  # deeper than 1, more than 2 this minute
    assert KV.objects.get(namespace=PINS_NAMESPACE, key=str(root.seq)).value == pin_before
    # A root first derived from in the restarted process is pinned with its settings.
    fresh = run_worker(
        *("--at", at, "--new-root", "fresh-root", "--count", "3", "--prefix", "fresh"), env=restarted
    )
    assert (fresh["accepted"], fresh["refused"], fresh["replayed"]) == (2, 1, 0)
    assert KV.objects.get(namespace=PINS_NAMESPACE, key=str(fresh["root_seq"])).value["rate_per_minute"] == 2


# --- what a refusal, a dry run and a derivation record, field by field -------------------------


@pytest.mark.django_db
def test_a_refusals_diagnostic_names_its_parent_work_and_envelope(clock, root):
    causal = Causal(clock, Limits(max_depth=32, rate_per_minute=0))
    with pytest.raises(CausalRefused) as refused:
        causal.derive(parent=root, envelope=envelope("from-work", work_id=4242))
    detail = f"root #{root.seq} already has 0 of 0 derived Events in the minute 2026-01-05T12:00Z"
    assert (refused.value.detail, str(refused.value)) == (detail, detail)
    assert (refused.value.root_seq, refused.value.parent_seq) == (root.seq, root.seq)
    diagnostic = CausalDiagnostic.objects.get()
    assert (diagnostic.parent_seq, diagnostic.work_id, diagnostic.attempt_id) == (root.seq, 4242, None)
    assert (diagnostic.source, diagnostic.type, diagnostic.envelope_id) == (
        "tests.agent",
        "test.derived",
        "from-work",
    )
    assert diagnostic.detail == detail


@pytest.mark.django_db
def test_a_refusal_without_an_envelope_records_empty_names_and_the_callers_work(clock):
    from causal.limits import Refusal, refuse

    with pytest.raises(RuntimeError, match=r"^refuse\(\) must run inside causal.limits.derived_atomic\(\)"):
        refuse(Refusal(kind="missing_parent", detail="no parent"), clock=clock)
    with derived_atomic():
        refused = refuse(
            Refusal(kind="missing_parent", detail="no parent"), clock=clock, work_id=7, attempt_id=9
        )
    stored = CausalDiagnostic.objects.get(pk=refused.diagnostic.pk)
    assert (stored.source, stored.type, stored.envelope_id) == ("", "", "")
    with derived_atomic():
        anonymous = refuse(Refusal(kind="missing_parent", detail="no parent"), clock=clock)
    assert (anonymous.diagnostic.work_id, anonymous.diagnostic.attempt_id) == (None, None)
    assert (stored.work_id, stored.attempt_id, stored.detail) == (7, 9, "no parent")
    # A work id given by the caller wins over the envelope's (next minute: a record of its own).
    clock.advance(minutes=1)
    with derived_atomic():
        refused = refuse(
            Refusal(kind="missing_parent", detail="no parent"),
            clock=clock,
            envelope=envelope("e", work_id=1),
            work_id=2,
        )
    assert CausalDiagnostic.objects.get(pk=refused.diagnostic.pk).work_id == 2


@pytest.mark.django_db
def test_a_refusals_diagnostic_cuts_long_names_to_their_columns(clock):
    long = envelope("i" * 600, source="s" * 600, type="t" * 300)
    with pytest.raises(CausalRefused) as refused:
        Causal(clock, Limits(max_depth=1, rate_per_minute=1)).derive(parent=None, envelope=long)
    diagnostic = CausalDiagnostic.objects.get(pk=refused.value.diagnostic.pk)
    assert (len(diagnostic.source), len(diagnostic.type), len(diagnostic.envelope_id)) == (512, 255, 512)
    assert diagnostic.detail == "a derived Event needs a parent"


@pytest.mark.django_db
def test_refusals_of_two_roots_in_one_minute_are_counted_apart(clock, root):
    refusing = Causal(clock, Limits(max_depth=32, rate_per_minute=0))
    other = EventFactory()
    for parent, name in ((root, "a"), (other, "b"), (root, "c")):
        with pytest.raises(CausalRefused):
            refusing.derive(parent=parent, envelope=envelope(name))
    counted = CausalDiagnostic.objects.order_by("id").values_list("root_seq", "occurrences")
    assert list(counted) == [(root.seq, 2), (other.seq, 1)]


def test_a_new_thread_starts_outside_any_refusal_boundary():
    from causal.limits import in_refusal_boundary

    seen = []
    thread = threading.Thread(target=lambda: seen.append(in_refusal_boundary()))
    thread.start()
    thread.join()
    assert seen == [False]


def test_a_pin_decodes_its_root_limits_and_time():
    value = {"max_depth": 3, "rate_per_minute": 4, "pinned_at": "2026-01-05T12:00:00+00:00"}
    assert pin_from_value(7, value) == Pin(
        root_seq=7,
        limits=Limits(max_depth=3, rate_per_minute=4),
        pinned_at=datetime(2026, 1, 5, 12, tzinfo=UTC),
    )


@pytest.mark.django_db
def test_the_bucket_records_its_root_minute_and_limit_and_counts_its_versions(clock, root):
    causal = Causal(clock, Limits(max_depth=32, rate_per_minute=128))
    causal.derive(parent=root, envelope=envelope("one"))
    clock.advance(seconds=5)
    causal.derive(parent=root, envelope=envelope("two"))
    bucket = KV.objects.get(namespace=BUCKETS_NAMESPACE, key=f"{root.seq}:{MINUTE}")
    assert bucket.value == {
        "root_seq": root.seq,
        "minute": "2026-01-05T12:00:00+00:00",
        "limit": 128,
        "count": 2,
    }
    assert (bucket.version, bucket.updated_at) == (2, clock.now)
    pin = KV.objects.get(namespace=PINS_NAMESPACE, key=str(root.seq))
    assert (pin.version, pin.updated_at) == (1, datetime(2026, 1, 5, 12, tzinfo=UTC))


@pytest.mark.django_db
def test_a_bucket_row_without_a_count_counts_as_empty(clock, root):
    KVFactory(namespace=BUCKETS_NAMESPACE, key=f"{root.seq}:{MINUTE}", value={})
    Causal(clock, Limits(max_depth=32, rate_per_minute=1)).derive(parent=root, envelope=envelope("first"))
    assert bucket_count(root.seq, MINUTE) == 1


@pytest.mark.django_db
def test_derived_events_record_who_accepted_them(causal, root):
    assert causal.derive(
        parent=root, envelope=envelope("a"), accepted_by="worklife.emit"
    ).event.accepted_by == ("worklife.emit")
    with derived_atomic():
        named = causal.derive_in_tx(parent=root, envelope=envelope("b"), accepted_by="worklife.timer").event
        unnamed = causal.derive_in_tx(parent=root, envelope=envelope("c")).event
    assert Event.objects.get(seq=named.seq).accepted_by == "worklife.timer"
    assert Event.objects.get(seq=unnamed.seq).accepted_by == "core.causal"


@pytest.mark.django_db
def test_a_deduplicated_derivation_says_it_created_nothing(causal, root):
    causal.derive(parent=root, envelope=envelope("once"))
    again = causal.derive(parent=root, envelope=envelope("once"))
    assert again.created is False


@pytest.mark.django_db
def test_derive_in_tx_outside_a_boundary_and_with_a_bad_envelope_say_what_is_wrong(causal, root):
    with pytest.raises(
        RuntimeError, match=r"^Causal\.derive_in_tx\(\) must run inside causal\.limits\.derived_atomic"
    ):
        with transaction.atomic():
            causal.derive_in_tx(parent=root, envelope=envelope("no-boundary"))
    with pytest.raises(RuntimeError, match=r"so that a refusal's diagnostic survives the rollback$"):
        with transaction.atomic():
            causal.derive_in_tx(parent=root, envelope=envelope("no-boundary"))
    with pytest.raises(TypeError, match="got dict$"):
        causal.derive(parent=root, envelope={"id": "x"})


# --- the dry run's fields (R41) ---------------------------------------------------------------


@pytest.mark.django_db
def test_would_refuse_names_root_parent_limit_count_and_minute(clock, root):
    causal = Causal(clock, Limits(max_depth=1, rate_per_minute=3))
    child = causal.derive(parent=root, envelope=envelope("child")).event
    depth = causal.would_refuse(parent=child)
    assert (depth.kind, depth.root_seq, depth.parent_seq, depth.limit, depth.count) == (
        "depth_exceeded",
        root.seq,
        child.seq,
        1,
        2,
    )
    assert causal.would_refuse(parent=root, pending=1) is None
    rate = causal.would_refuse(parent=root, pending=2)  # 1 spent + 2 planned = 3
    assert (rate.kind, rate.root_seq, rate.parent_seq, rate.limit, rate.count) == (
        "rate_exceeded",
        root.seq,
        root.seq,
        3,
        3,
    )
    assert rate.minute == datetime(2026, 1, 5, 12, tzinfo=UTC)


@pytest.mark.django_db
def test_would_refuse_child_judges_by_the_pinned_limits_and_plans_nothing_by_default(clock, root):
    Causal(clock, Limits(max_depth=5, rate_per_minute=2)).derive(parent=root, envelope=envelope("pinning"))
    stricter = Causal(clock, Limits(max_depth=0, rate_per_minute=1))
    assert stricter.would_refuse_child(parent_seq=root.seq, root_seq=root.seq, depth=0) is None
    refusal = stricter.would_refuse_child(parent_seq=root.seq, root_seq=root.seq, depth=0, pending=1)
    assert (refusal.kind, refusal.root_seq, refusal.limit, refusal.count) == ("rate_exceeded", root.seq, 2, 2)


@pytest.mark.django_db
def test_would_refuse_child_of_a_hypothetical_root_names_it_as_the_root(clock):
    causal = Causal(clock, Limits(max_depth=0, rate_per_minute=1))
    depth = causal.would_refuse_child(parent_seq=55, root_seq=None, depth=0)
    assert (depth.kind, depth.root_seq, depth.parent_seq) == ("depth_exceeded", 55, 55)
    rate = Causal(clock, Limits(max_depth=3, rate_per_minute=0)).would_refuse_child(
        parent_seq=55, root_seq=None, depth=0
    )
    assert (rate.kind, rate.root_seq, rate.count) == ("rate_exceeded", 55, 0)


# --- a KV row or an Event appearing between the check and the write ---------------------------
# The other writer is simulated on the test's own connection: a wrapper around the check's
# insert writes the conflicting row for real just before it, so the insert meets a real
# IntegrityError (or the acceptance a real duplicate).


def racing_insert(monkeypatch, race, times: int = 1) -> list[int]:
    """Make ``race()`` run just before each of the first ``times`` KV inserts of the check."""
    import causal.limits

    calls: list[int] = []
    insert = causal.limits._kv_insert

    def raced(rows, now):
        calls.append(len(rows))
        if len(calls) <= times:
            race()
        insert(rows, now)

    monkeypatch.setattr(causal.limits, "_kv_insert", raced)
    return calls


def a_bucket_appears(root: Event, count: int = 5):
    return lambda: KVFactory(namespace=BUCKETS_NAMESPACE, key=f"{root.seq}:{MINUTE}", value={"count": count})


@pytest.mark.django_db
def test_derive_meeting_a_kv_row_written_meanwhile_checks_again_on_fresh_reads(causal, root, monkeypatch):
    calls = racing_insert(monkeypatch, a_bucket_appears(root))
    accepted = causal.derive(parent=root, envelope=envelope("raced"))
    assert accepted.created and calls == [2, 2]  # the pin and the token, twice
    assert bucket_count(root.seq, MINUTE) == 1
    assert KV.objects.filter(namespace=PINS_NAMESPACE).count() == 1


@pytest.mark.django_db
def test_derive_meeting_a_kv_row_written_meanwhile_twice_gives_up_with_the_integrity_error(
    causal, root, monkeypatch
):
    from django.db import IntegrityError

    calls = racing_insert(monkeypatch, a_bucket_appears(root), times=2)
    with pytest.raises(IntegrityError):
        causal.derive(parent=root, envelope=envelope("raced"))
    assert calls == [2, 2]
    assert not Event.objects.filter(envelope_id="raced").exists()


@pytest.mark.django_db
def test_derive_in_tx_meeting_a_kv_row_written_meanwhile_retries_only_its_own_savepoint(
    causal, root, clock, monkeypatch
):
    from causal.services import kv_put_in_tx

    calls = racing_insert(monkeypatch, a_bucket_appears(root))
    with derived_atomic():
        kv_put_in_tx(namespace="tests.effects", key="before", value={"ok": True}, clock=clock)
        accepted = causal.derive_in_tx(parent=root, envelope=envelope("raced"))
    assert accepted.created and calls == [2, 2]
    # The failed attempt's writes went with its savepoint, the caller's effect stayed.
    assert bucket_count(root.seq, MINUTE) == 1
    assert KV.objects.filter(namespace="tests.effects", key="before").exists()


def an_event_is_accepted(clock, name: str):
    from causal.services import event_accept_in_tx

    return lambda: event_accept_in_tx(envelope=envelope(name), clock=clock)


@pytest.mark.django_db
def test_derive_meeting_an_event_accepted_meanwhile_returns_it_and_gives_the_token_back(
    causal, root, clock, monkeypatch
):
    racing_insert(monkeypatch, an_event_is_accepted(clock, "raced"))
    accepted = causal.derive(parent=root, envelope=envelope("raced"))
    assert accepted.created is False and accepted.event.envelope_id == "raced"
    assert not KV.objects.filter(namespace__in=[PINS_NAMESPACE, BUCKETS_NAMESPACE]).exists()


@pytest.mark.django_db
def test_derive_in_tx_meeting_an_event_accepted_meanwhile_keeps_the_callers_effects(
    causal, root, clock, monkeypatch
):
    from causal.services import kv_put_in_tx

    racing_insert(monkeypatch, an_event_is_accepted(clock, "raced"))
    with derived_atomic():
        kv_put_in_tx(namespace="tests.effects", key="before", value={"ok": True}, clock=clock)
        accepted = causal.derive_in_tx(parent=root, envelope=envelope("raced"))
    assert accepted.created is False and accepted.event.envelope_id == "raced"
    assert not KV.objects.filter(namespace__in=[PINS_NAMESPACE, BUCKETS_NAMESPACE]).exists()
    assert KV.objects.filter(namespace="tests.effects", key="before").exists()


@pytest.mark.django_db
def test_a_refusal_recorded_in_the_callers_transaction_is_counted_once_and_commits_with_it(clock, root):
    from causal.limits import refusal_record_in_tx
    from causal.services import kv_put_in_tx

    causal = Causal(clock, Limits(max_depth=32, rate_per_minute=0))
    with derived_atomic():
        with pytest.raises(CausalRefused):  # left to the boundary to write
            causal.derive_in_tx(parent=None, envelope=envelope("orphan"))
        with pytest.raises(CausalRefused) as refused:
            causal.derive_in_tx(parent=root, envelope=envelope("timer"))
        recorded = refusal_record_in_tx(refused.value)
        assert recorded is refused.value.diagnostic and recorded.pk is not None
        kv_put_in_tx(namespace="tests.effects", key="marked-refused", value={"ok": True}, clock=clock)
    diagnostic = CausalDiagnostic.objects.get(kind="rate_exceeded")
    assert (diagnostic.pk, diagnostic.occurrences) == (recorded.pk, 1)
    assert CausalDiagnostic.objects.get(kind="missing_parent").occurrences == 1
    # Rolled back with the caller's consequence, it is not written after the boundary either.
    with pytest.raises(RuntimeError, match="caller"), derived_atomic():
        with pytest.raises(CausalRefused) as again:
            causal.derive_in_tx(parent=root, envelope=envelope("timer-2"))
        refusal_record_in_tx(again.value)
        raise RuntimeError("the caller fails")
    assert CausalDiagnostic.objects.get(kind="rate_exceeded").occurrences == 1


@pytest.mark.django_db
def test_a_refusal_is_counted_in_the_metrics_by_its_kind(settings, clock, root):
    from prometheus_client import REGISTRY

    settings.CONDUIT_METRICS = True

    def counted() -> float:
        return REGISTRY.get_sample_value("conduit_causal_refusals_total", {"kind": "rate_exceeded"}) or 0.0

    before = counted()
    with pytest.raises(CausalRefused):
        Causal(clock, Limits(max_depth=32, rate_per_minute=0)).derive(
            parent=root, envelope=envelope("counted")
        )
    assert counted() == before + 1


def test_a_missing_limit_setting_is_named(settings, clock):
    del settings.CONDUIT_CAUSAL_MAX_DEPTH
    with pytest.raises(
        ImproperlyConfigured, match="CONDUIT_CAUSAL_MAX_DEPTH must be a non-negative integer, got None"
    ):
        Causal(clock)


class _NoOffset(tzinfo):
    """A time zone that cannot tell its offset: a datetime in it is naive for Python."""

    def utcoffset(self, dt):
        return None

    def tzname(self, dt):
        return "unknown"

    def dst(self, dt):
        return None


@pytest.mark.django_db
def test_a_clock_whose_time_zone_has_no_offset_is_refused_as_naive(root):
    causal = Causal(lambda: datetime(2026, 1, 5, 12, 0, tzinfo=_NoOffset()), Limits(32, 128))
    with pytest.raises(ValueError, match="aware"):
        causal.derive(parent=root, envelope=envelope("no-offset"))


@pytest.mark.django_db
def test_pins_and_buckets_are_written_in_utc_whatever_the_process_time_zone(monkeypatch, root):
    paris = datetime(2026, 1, 5, 13, 0, tzinfo=ZoneInfo("Europe/Paris"))
    monkeypatch.setenv("TZ", "Europe/Paris")
    time.tzset()
    try:
        Causal(lambda: paris, Limits(32, 128)).derive(parent=root, envelope=envelope("local"))
    finally:
        monkeypatch.undo()
        time.tzset()
    assert KV.objects.get(namespace=PINS_NAMESPACE, key=str(root.seq)).value["pinned_at"] == (
        "2026-01-05T12:00:00+00:00"
    )
    bucket = KV.objects.get(namespace=BUCKETS_NAMESPACE, key=f"{root.seq}:{MINUTE}")
    assert bucket.value["minute"] == "2026-01-05T12:00:00+00:00"


@pytest.mark.django_db
def test_derive_in_tx_meeting_a_kv_row_written_meanwhile_twice_gives_up_with_the_integrity_error(
    causal, root, monkeypatch
):
    from django.db import IntegrityError

    calls = racing_insert(monkeypatch, a_bucket_appears(root), times=2)
    with pytest.raises(IntegrityError), derived_atomic():
        causal.derive_in_tx(parent=root, envelope=envelope("raced"))
    assert calls == [2, 2]
    assert not Event.objects.filter(envelope_id="raced").exists()
