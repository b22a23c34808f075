"""Retention of Work: terminal Work ended before the cutoff goes, with its
attempts, input, intents, waits, timers, dependency subscriptions and correlation keys.

Only completed or cancelled Work, and only once no other Work refers to it (a child's parent, a
successor's predecessor): a family goes from the leaves up, over several batches. Its correlation
keys go with it, so an Event naming such a key later starts new Work instead of meeting a
terminal one. The rows of apps above (routing's route records) are theirs to delete first, in the
same transaction.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import Exists, OuterRef, Q

from causal.services import assert_in_tx
from worklife.models import (
    TERMINAL_STATUSES,
    Attempt,
    CorrelationKey,
    DependencySubscription,
    Intent,
    Timer,
    Wait,
    Work,
    WorkInput,
)


def works_prunable_in_tx(*, cutoff: datetime, limit: int) -> list[int]:
    """The ids of at most ``limit`` terminal Works that ended before ``cutoff`` and that no other
    Work refers to, oldest first. Read in the caller's transaction, which deletes them."""
    assert_in_tx()
    ended = Q(ended_at__lt=cutoff) | Q(ended_at__isnull=True, updated_at__lt=cutoff)
    referred = Exists(Work.objects.filter(Q(parent=OuterRef("pk")) | Q(predecessor=OuterRef("pk"))))
    works = Work.objects.filter(ended, status__in=TERMINAL_STATUSES).exclude(referred)
    return list(works.order_by("id").values_list("id", flat=True)[:limit])


def works_delete_in_tx(*, work_ids: list[int]) -> dict[str, int]:
    """Delete the Works ``work_ids`` (from :func:`works_prunable_in_tx`) and every row of theirs,
    dependants first. Returns the rows deleted per kind."""
    assert_in_tx()
    counts: dict[str, int] = {}
    if not work_ids:
        return counts
    for name, model in (
        ("subscriptions", DependencySubscription),
        ("intents", Intent),
        ("inputs", WorkInput),
        ("waits", Wait),
        ("timers", Timer),
        ("attempts", Attempt),
        ("keys", CorrelationKey),
        ("work", Work),
    ):
        rows = (
            model.objects.filter(pk__in=work_ids)
            if model is Work
            else model.objects.filter(work_id__in=work_ids)
        )
        counts[name], _ = rows.delete()
    return counts
