"""Retention for the causal limits (R57): prune only what nothing depends on.

Pruned, when older than the retention period (at least one day):

- token buckets (``core.causal.buckets``): a bucket only counts its own UTC minute, so one
  whose minute ended is dead weight;
- causal diagnostics: operator history, kept for the retention period.

Kept for ever by ``causal prune``; Events and pins go only with the site-wide retention
(``manage.py prune``, :func:`events_prunable_in_tx` below), when nothing refers to them:

- Events, with their parent, root and depth (causal metadata) and their ``(source, id)``
  (deduplication evidence: a replay must still find the Event it repeats);
- pins (``core.causal.pins``): a root's descendants keep its pinned limits while any is kept (R53);
- every other KV namespace (not the causal limits' to prune).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import models, transaction
from django.db.models import Exists, OuterRef, Q

from causal.clock import Clock
from causal.limits import BUCKETS_NAMESPACE, PINS_NAMESPACE
from causal.models import KV, CausalDiagnostic, Event, EventKey, RouteState
from causal.services import assert_in_tx

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


# --- Events ------------------------------------------------------------------------------------
#
# An Event may go only when it is routed (never unrouted: the router still owes it a decision;
# never failed or skipped: a dead letter is kept for the operator to act on), was accepted before
# the cutoff, and no row of any model refers to it. The references are found from the models'
# own foreign keys (``Event._meta.related_objects``), so causal needs no knowledge of the apps
# above it: Work's input, triggers, intents, waits and timers, another Event's parent or root
# (a kept Event's ancestors are kept, and a root with them: its pin still judges their
# descendants) all keep it. An app above passes ``releases``: rows of its own that do not keep an
# Event and that it deletes with it in the same transaction (routing's route record of an Event no
# Work holds). Its explicit keys go with it (cascade), and so does its root's pin when the Event is
# a root: with the root gone its whole tree is gone, and nothing can derive from it any more.
#
# Deleting an Event ends its deduplication evidence: an Event repeating its ``(source, id)`` after
# the retention period is accepted again as a new Event.

# A foreign key to Event, and which of its rows do not keep the Event they refer to.
Releases = dict[models.ForeignKey, Q]


def _keeps_event(releases: Releases):
    """Exists() conditions, one per foreign key to Event, for a row that keeps the Event."""
    for rel in Event._meta.related_objects:
        field = rel.field
        if field.model is EventKey or rel.on_delete is not models.PROTECT:
            continue  # cascades (keys) and SET_NULL (``waiting_on``) never keep an Event
        rows = field.model._base_manager.filter(**{field.name: OuterRef("pk")})
        if field in releases:
            rows = rows.exclude(releases[field])
        yield Exists(rows)


def events_prunable_in_tx(*, cutoff: datetime, limit: int, releases: Releases | None = None) -> list[int]:
    """The seqs of at most ``limit`` routed Events accepted before ``cutoff`` that nothing keeps
    (see above), oldest first. Read in the caller's transaction, which deletes them."""
    assert_in_tx()
    candidates = Event.objects.filter(route_state=RouteState.ROUTED, accepted_at__lt=cutoff)
    for keeps in _keeps_event(releases or {}):
        candidates = candidates.exclude(keeps)
    return list(candidates.order_by("seq").values_list("seq", flat=True)[:limit])


def events_delete_in_tx(*, seqs: list[int]) -> int:
    """Delete the Events ``seqs`` (from :func:`events_prunable_in_tx`, in the same transaction)
    with their keys and, for roots, their pins. A row of another app still referring to one
    raises (``ProtectedError``): the caller deletes its released rows first."""
    assert_in_tx()
    if not seqs:
        return 0
    EventKey.objects.filter(event_id__in=seqs).delete()
    roots = Event.objects.filter(seq__in=seqs, root__isnull=True).values_list("seq", flat=True)
    KV.objects.filter(namespace=PINS_NAMESPACE, key__in=[str(seq) for seq in roots]).delete()
    deleted, _ = Event.objects.filter(seq__in=seqs).delete()
    return deleted
