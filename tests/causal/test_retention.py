"""Retention (R57): expired buckets and old diagnostics go; causal metadata, deduplication
evidence and pins stay."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from causal.limits import BUCKETS_NAMESPACE, PINS_NAMESPACE, Causal, CausalRefused, Limits
from causal.models import KV, CausalDiagnostic, Event
from causal.retention import retention_prune
from tests.causal.factories import CausalDiagnosticFactory, EventFactory, KVFactory
from tests.causal.support import bucket_count, envelope

pytestmark = pytest.mark.django_db


@pytest.fixture
def history(clock):
    """Derived Events, buckets and a refusal 40 days ago, then a bucket and a refusal now."""
    causal = Causal(clock, Limits(max_depth=1, rate_per_minute=10))
    root = EventFactory()
    child = causal.derive(parent=root, envelope=envelope("old-child")).event
    with pytest.raises(CausalRefused):
        causal.derive(parent=child, envelope=envelope("old-too-deep"))
    clock.advance(days=40)
    causal.derive(parent=root, envelope=envelope("new-child"))
    with pytest.raises(CausalRefused):
        causal.derive(parent=child, envelope=envelope("new-too-deep"))
    KVFactory(namespace="core.routing.failures", key="1", updated_at=clock.now - timedelta(days=90))
    return {"root": root, "child": child, "causal": causal}


def test_r57_prune_removes_expired_buckets_and_old_diagnostics_only(clock, history):
    root = history["root"]
    report = retention_prune(older_than=timedelta(days=30), clock=clock)
    assert (report.buckets, report.diagnostics, report.dry_run) == (1, 1, False)
    assert report.cutoff == clock.now - timedelta(days=30)
    assert list(KV.objects.filter(namespace=BUCKETS_NAMESPACE).values_list("key", flat=True)) == [
        f"{root.seq}:2026-02-14T12:00"
    ]
    assert CausalDiagnostic.objects.get().envelope_id == "new-too-deep"


def test_r57_prune_keeps_causal_metadata_pins_and_deduplication_evidence(clock, history):
    root, child, causal = history["root"], history["child"], history["causal"]
    retention_prune(older_than=timedelta(days=1), clock=clock)
    kept = Event.objects.get(envelope_id="old-child")
    assert (kept.parent_id, kept.root_id, kept.depth) == (root.seq, root.seq, 1)
    assert KV.objects.filter(namespace=PINS_NAMESPACE, key=str(root.seq)).exists()
    assert KV.objects.filter(namespace="core.routing.failures").exists()  # not ours to prune
    # A replay of the old Event still finds it: deduplicated, spending nothing.
    replay = causal.derive(parent=root, envelope=envelope("old-child"))
    assert not replay.created and replay.event.seq == child.seq
    assert bucket_count(root.seq, "2026-02-14T12:00") == 1
    # The pinned limits still hold after pruning (depth 1: a grandchild is refused).
    with pytest.raises(CausalRefused):
        Causal(clock, Limits(max_depth=5, rate_per_minute=5)).derive(
            parent=child, envelope=envelope("deeper")
        )


def test_r57_dry_run_counts_without_deleting(clock, history):
    report = retention_prune(older_than=timedelta(days=30), clock=clock, dry_run=True)
    assert (report.buckets, report.diagnostics, report.dry_run) == (1, 1, True)
    assert KV.objects.filter(namespace=BUCKETS_NAMESPACE).count() == 2
    assert CausalDiagnostic.objects.count() == 2


def test_r57_the_current_minutes_bucket_is_never_pruned(clock, history):
    with pytest.raises(ValueError, match="older_than"):
        retention_prune(older_than=timedelta(hours=23), clock=clock)
    with pytest.raises(TypeError, match="older_than"):
        retention_prune(older_than=30, clock=clock)
    assert KV.objects.filter(namespace=BUCKETS_NAMESPACE).count() == 2


def test_r57_prune_command(history):
    CausalDiagnosticFactory(at=history["root"].accepted_at - timedelta(days=400))
    out = StringIO()
    call_command("causal", "prune", "--older-than", "30", "--dry-run", stdout=out)
    assert "would delete" in out.getvalue()
    assert CausalDiagnostic.objects.count() == 3
    out = StringIO()
    call_command("causal", "prune", "--older-than", "30", stdout=out)  # real clock: all are older
    assert "deleted 2 token bucket(s) and 3 diagnostic(s)" in out.getvalue()
    assert not CausalDiagnostic.objects.exists()
    assert Event.objects.count() == 3


def test_r57_prune_command_rejects_a_bad_period_naming_the_option():
    with pytest.raises(CommandError, match="--older-than"):
        call_command("causal", "prune", "--older-than", "0")
    with pytest.raises(CommandError, match="--older-than"):
        call_command("causal", "prune", "--older-than", "soon")


def test_r53_root_command_shows_the_pin_tokens_and_refusals(history):
    root = history["root"]
    out = StringIO()
    call_command("causal", "root", str(root.seq), stdout=out)
    text = out.getvalue()
    assert f"root #{root.seq}" in text and "descendants: 2" in text
    assert "limits (pinned 2026-01-05T12:00:00Z" in text and "depth 1, 10 per minute" in text
    assert "depth_exceeded" in text
    with pytest.raises(CommandError, match="not a root"):
        call_command("causal", "root", str(history["child"].seq))
    with pytest.raises(CommandError, match="no Event"):
        call_command("causal", "root", "999999")
