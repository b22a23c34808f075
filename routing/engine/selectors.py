"""The router's public reads for the controls and pages above it: the binding a Work runs on
next (R30), as the router reads it, and the dead letters (the route records of failed and
skipped Events)."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import QuerySet

from causal.selectors import COUNT_CAP, PAGE_SIZE, KeysetPage, ListTotal, count_capped, keyset_page
from routing.engine.decide import addressed_binding
from routing.engine.world import read_work_views
from routing.models import Disposition, RouteRecord

# --- the binding a Work runs on next ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NextBinding:
    """A Work as the router reads it, with the binding its next attempt runs on."""

    work_id: int
    scope: str
    status: str
    terminal: bool
    binding: str


def work_next_binding(work_id: int) -> NextBinding | None:
    """The binding the Work ``work_id`` runs on next, as the router decides it (its queued
    input's, else its retry state's, else the newer of its last rebind and its latest
    attempt's); ``None`` for an unknown id."""
    view = read_work_views([work_id]).get(work_id)
    if view is None:
        return None
    return NextBinding(
        work_id=view.id,
        scope=view.scope,
        status=view.status,
        terminal=view.terminal,
        binding=addressed_binding(view),
    )


# --- dead letters ---------------------------------------------------------------------------------

DEAD_DISPOSITIONS = (Disposition.FAILED.value, Disposition.SKIPPED.value)


@dataclass(frozen=True, slots=True)
class DeadLetterFilter:
    """What the dead-letters list is filtered by; empty strings mean "any"."""

    scope: str = ""
    route: str = ""
    code: str = ""  # the record's reason: a route error code, or "skipped by <user>"
    disposition: str = ""  # failed | skipped

    def __post_init__(self) -> None:
        if self.disposition and self.disposition not in DEAD_DISPOSITIONS:
            raise ValueError(f"disposition: expected failed or skipped, not {self.disposition!r}")


def dead_letters_filtered(filters: DeadLetterFilter) -> QuerySet[RouteRecord]:
    """The dead letters (RouteRecords of failed and skipped Events) matching ``filters``,
    unordered."""
    records = RouteRecord.objects.filter(
        disposition__in=[filters.disposition] if filters.disposition else DEAD_DISPOSITIONS
    )
    if filters.scope:
        records = records.filter(scope=filters.scope)
    if filters.route:
        records = records.filter(route=filters.route)
    if filters.code:
        records = records.filter(reason=filters.code)
    return records


def dead_letters_page(
    filters: DeadLetterFilter, *, before: int | None = None, limit: int = PAGE_SIZE, oldest: bool = False
) -> KeysetPage:
    """One page of dead letters, newest first below the Event seq ``before`` when given, or
    oldest first above it (``oldest``); each record with its Event and Work joined. One query."""
    records = dead_letters_filtered(filters).select_related("event", "work")
    return keyset_page(records, key="event_id", cursor=before, limit=limit, descending=not oldest)


def dead_letters_total(filters: DeadLetterFilter, *, cap: int = COUNT_CAP) -> ListTotal:
    """How many dead letters match ``filters``, counted up to ``cap`` (one query)."""
    return count_capped(dead_letters_filtered(filters), cap=cap)
