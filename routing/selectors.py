"""Reads of configuration generations and route records, and the console's joined views
of Events with their route, with explicit joins (no N+1)."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db.models import QuerySet, Subquery

from causal.models import Event
from causal.selectors import (
    PAGE_SIZE,
    EventFilter,
    KeysetPage,
    events_filtered,
    keyset_page,
    unrouted_event_count,
)
from routing.config import live_generation
from routing.models import ApiToken, Generation, GenerationKind, RouteRecord, Scope
from worklife.selectors import work_status_counts

# --- console --------------------------------------------------------------------------------


def events_with_route_page(
    filters: EventFilter, *, before: int | None = None, limit: int = PAGE_SIZE
) -> KeysetPage:
    """One page of Events, newest first, each with its RouteRecord (when it has one) joined."""
    queryset = events_filtered(filters).select_related("route_record")
    return keyset_page(queryset, key="seq", cursor=before, limit=limit)


def event_with_route(seq: int) -> Event:
    """The Event with this ``seq``, its parent, root, RouteRecord and the record's Work, or
    ``Event.DoesNotExist``."""
    return Event.objects.select_related("parent", "root", "route_record", "route_record__work").get(seq=seq)


def route_record_for_event(seq: int) -> RouteRecord | None:
    """The RouteRecord deciding the Event ``seq``, or ``None`` while it is unrouted."""
    return RouteRecord.objects.select_related("event", "work").filter(event_id=seq).first()


def work_route_history_page(work_id: int, *, before: int | None = None, limit: int = PAGE_SIZE) -> KeysetPage:
    """The Work's route history: its RouteRecords with their Events, newest first, below the
    Event seq ``before`` when given."""
    queryset = RouteRecord.objects.filter(work_id=work_id).select_related("event")
    return keyset_page(queryset, key="event_id", cursor=before, limit=limit)


def live_scope_paths() -> list[str]:
    """The scope paths of the live generation, sorted (one query)."""
    live = Generation.objects.filter(kind=GenerationKind.APPLIED).order_by("-number").values("pk")[:1]
    return list(
        Scope.objects.filter(generation_id=Subquery(live)).order_by("path").values_list("path", flat=True)
    )


def generations_page(*, before: int | None = None, limit: int = PAGE_SIZE) -> KeysetPage:
    """Configuration generations, applied and candidates, newest first (by id). The
    documents themselves are not read: a list never loads every document."""
    queryset = Generation.objects.defer("document")
    return keyset_page(queryset, key="id", cursor=before, limit=limit)


def generation_get(generation_id: int) -> Generation:
    """One generation with its document, or ``Generation.DoesNotExist``."""
    return Generation.objects.get(pk=generation_id)


@dataclass(frozen=True, slots=True)
class ConsoleSummary:
    """What the console's home page shows."""

    unrouted_events: int
    work_by_status: dict[str, int]
    live_generation: Generation | None


def console_summary() -> ConsoleSummary:
    """Counts of unrouted Events and of Work by status, and the live generation."""
    return ConsoleSummary(
        unrouted_events=unrouted_event_count(),
        work_by_status=work_status_counts(),
        live_generation=live_generation(),
    )


# --- api tokens -----------------------------------------------------------------------------


def api_tokens_list(*, username: str | None = None, include_revoked: bool = False) -> QuerySet[ApiToken]:
    """API tokens with their users, oldest first: live ones only unless ``include_revoked``,
    of one user when ``username`` is given."""
    tokens = ApiToken.objects.select_related("user").order_by("created_at", "id")
    if username is not None:
        tokens = tokens.filter(**{f"user__{get_user_model().USERNAME_FIELD}": username})
    if not include_revoked:
        tokens = tokens.filter(revoked_at__isnull=True)
    return tokens
