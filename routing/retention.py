"""Retention of route records: a record goes with its Work, or with its
Event when no Work holds it (see ``causal.retention``); and of impact preview runs, by age."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q

from causal.retention import Releases
from causal.services import assert_in_tx
from routing.models import ImpactRun, ImpactRunChange, RateLimitTake, RouteRecord

# A route record keeps its Event while it names a Work (the Work's history); one naming none is
# deleted with its Event.
RECORD_RELEASES: Releases = {RouteRecord._meta.get_field("event"): Q(work__isnull=True)}


def route_records_delete_in_tx(*, work_ids: list[int] = (), event_seqs: list[int] = ()) -> int:
    """Delete the route records of the Works ``work_ids`` and of the Events ``event_seqs`` (and
    the rate limits' takes of those Events, which are not counted in the result)."""
    assert_in_tx()
    deleted = 0
    if work_ids:
        deleted += RouteRecord.objects.filter(work_id__in=work_ids).delete()[0]
    if event_seqs:
        deleted += RouteRecord.objects.filter(event_id__in=event_seqs).delete()[0]
        RateLimitTake.objects.filter(event_seq__in=event_seqs).delete()
    return deleted


def impact_runs_delete_in_tx(*, cutoff: datetime, limit: int) -> tuple[int, int]:
    """Delete at most ``limit`` impact preview runs last written before ``cutoff`` (a run still
    running then was lost with its process), with their changed Events; returns how many runs
    and changes."""
    assert_in_tx()
    ids = list(
        ImpactRun.objects.filter(updated_at__lt=cutoff).order_by("id").values_list("pk", flat=True)[:limit]
    )
    if not ids:
        return 0, 0
    changes = ImpactRunChange.objects.filter(run_id__in=ids).delete()[0]
    runs = ImpactRun.objects.filter(pk__in=ids).delete()[0]
    return runs, changes
