"""Retention for the causal limits (R57): prune only what nothing depends on.

Pruned, when older than the retention period (at least one day):

- token buckets (``core.causal.buckets``): a bucket only counts its own UTC minute, so one
  whose minute ended is dead weight;
- causal diagnostics: operator history, kept for the retention period.

Kept for ever:

- Events, with their parent, root and depth (causal metadata) and their ``(source, id)``
  (deduplication evidence: a replay must still find the Event it repeats);
- pins (``core.causal.pins``): a root's descendants keep its pinned limits for ever (R53);
- every other KV namespace (not the causal limits' to prune).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import transaction

from causal.clock import Clock
from causal.limits import BUCKETS_NAMESPACE
from causal.models import KV, CausalDiagnostic

# Nothing younger is ever pruned: a bucket of the current minute must never go.
MIN_RETENTION = timedelta(days=1)


@dataclass(frozen=True, slots=True)
class PruneReport:
    """What a prune removed (or, with ``dry_run``, would remove) before ``cutoff``."""

    cutoff: datetime
    buckets: int
    diagnostics: int
    dry_run: bool


def retention_prune(*, older_than: timedelta, clock: Clock, dry_run: bool = False) -> PruneReport:
    """Delete expired token buckets and diagnostics older than ``older_than`` (at least a day).

    Events, pins and other namespaces are kept (see the module docstring). One transaction.
    ``dry_run`` counts without deleting.
    """
    if not isinstance(older_than, timedelta):
        raise TypeError(f"older_than must be a timedelta, got {type(older_than).__name__}")
    if older_than < MIN_RETENTION:
        raise ValueError(f"older_than must be at least {MIN_RETENTION.days} day, got {older_than}")
    now = clock()
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError(f"the clock must return an aware datetime, got naive {now!r}")
    cutoff = now.astimezone(UTC) - older_than
    # A bucket is last written inside its own minute, so updated_at < cutoff means its
    # minute ended before the cutoff.
    buckets = KV.objects.filter(namespace=BUCKETS_NAMESPACE, updated_at__lt=cutoff)
    diagnostics = CausalDiagnostic.objects.filter(at__lt=cutoff)
    with transaction.atomic():
        if dry_run:
            return PruneReport(
                cutoff=cutoff, buckets=buckets.count(), diagnostics=diagnostics.count(), dry_run=True
            )
        # Neither model has dependants or signals, so each is one DELETE statement.
        bucket_count, _ = buckets.delete()
        diagnostic_count, _ = diagnostics.delete()
    return PruneReport(cutoff=cutoff, buckets=bucket_count, diagnostics=diagnostic_count, dry_run=False)
