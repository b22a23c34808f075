"""Reads of Work and what belongs to it, with explicit joins (no N+1)."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Q, QuerySet

from causal.models import Event, RouteState
from causal.selectors import PAGE_SIZE, KeysetPage, keyset_page
from worklife.models import Attempt, CorrelationKey, Work, WorkInput, WorkStatus

# --- console --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkFilter:
    """What the Work list is filtered by; empty strings mean "any"."""

    scope: str = ""
    status: str = ""

    def __post_init__(self) -> None:
        if self.status and self.status not in WorkStatus.values:
            raise ValueError(f"status: unknown status {self.status!r}")


def work_filtered(filters: WorkFilter) -> QuerySet[Work]:
    """Work matching ``filters`` (exact scope, status), unordered."""
    queryset = Work.objects.all()
    if filters.scope:
        queryset = queryset.filter(scope=filters.scope)
    if filters.status:
        queryset = queryset.filter(status=filters.status)
    return queryset


def work_page(filters: WorkFilter, *, before: int | None = None, limit: int = PAGE_SIZE) -> KeysetPage:
    """One page of Work, newest (highest id) first, below ``before`` when given."""
    return keyset_page(work_filtered(filters), key="id", cursor=before, limit=limit)


def work_get(work_id: int) -> Work:
    """The Work with its parent, predecessor, successor and trigger, or ``Work.DoesNotExist``."""
    return Work.objects.select_related("parent", "predecessor", "successor", "trigger").get(pk=work_id)


def work_status_counts() -> dict[str, int]:
    """How many Work records are in each status (every status present, zero when none)."""
    counts = {status: 0 for status in WorkStatus.values}
    for row in Work.objects.values("status").annotate(n=Count("id")).order_by():
        counts[row["status"]] = row["n"]
    return counts


def work_keys(work_id: int, *, limit: int = 100) -> KeysetPage:
    """The correlation keys the Work owns, in the order they were attached."""
    queryset = CorrelationKey.objects.filter(work_id=work_id)
    return keyset_page(queryset, key="id", limit=limit, descending=False)


def work_attempts(work_id: int, *, limit: int = PAGE_SIZE) -> KeysetPage:
    """The Work's attempts, newest first."""
    return keyset_page(Attempt.objects.filter(work_id=work_id), key="number", limit=limit)


def work_inputs_page(work_id: int, *, after: int | None = None, limit: int = PAGE_SIZE) -> KeysetPage:
    """The Work's input in acceptance order (WorkInput rows joined with their Events and
    attempts), after the Event seq ``after`` when given."""
    queryset = WorkInput.objects.filter(work_id=work_id).select_related("event", "attempt")
    return keyset_page(queryset, key="seq", cursor=after, limit=limit, descending=False)


def work_unrouted_events(work: Work, *, limit: int = PAGE_SIZE) -> KeysetPage:
    """Unrouted Events that target this Work explicitly (its id, or a key it owns), in
    acceptance order: they hold the Work's later input and its Complete (R19)."""
    owned = CorrelationKey.objects.filter(work_id=work.pk).values("key")
    queryset = (
        Event.objects.filter(route_state=RouteState.UNROUTED)
        .filter(Q(work_id=work.pk) | Q(keys__scope=work.scope, keys__key__in=owned))
        .distinct()
    )
    return keyset_page(queryset, key="seq", limit=limit, descending=False)
