"""Retention of route records (issue 38 item 5): a record goes with its Work, or with its
Event when no Work holds it (see ``causal.retention``)."""

from __future__ import annotations

from django.db.models import Q

from causal.retention import Releases
from causal.services import assert_in_tx
from routing.models import RouteRecord

# A route record keeps its Event while it names a Work (the Work's history); one naming none is
# deleted with its Event.
RECORD_RELEASES: Releases = {RouteRecord._meta.get_field("event"): Q(work__isnull=True)}


def route_records_delete_in_tx(*, work_ids: list[int] = (), event_seqs: list[int] = ()) -> int:
    """Delete the route records of the Works ``work_ids`` and of the Events ``event_seqs``."""
    assert_in_tx()
    deleted = 0
    if work_ids:
        deleted += RouteRecord.objects.filter(work_id__in=work_ids).delete()[0]
    if event_seqs:
        deleted += RouteRecord.objects.filter(event_id__in=event_seqs).delete()[0]
    return deleted
