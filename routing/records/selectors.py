"""Reads of route records and of Events with their routes, with explicit joins (no N+1)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from causal.models import Event, RouteState
from causal.selectors import (
    COUNT_CAP,
    PAGE_SIZE,
    KeysetPage,
    ListTotal,
    count_capped,
    event_chain,
    keyset_page,
)

# Light: the failures module, not the router (reading routes loads neither it nor the decision).
from routing.engine.failures import RouteFailure, failures_read
from routing.models import RouteRecord
from routing.records.filters import EventListFilter, events_listed, events_with_records

# --- route records --------------------------------------------------------------------------------


def event_with_route(seq: int) -> Event:
    """The Event with this ``seq``, its parent, root, RouteRecord and the record's Work, or
    ``Event.DoesNotExist``."""
    return Event.objects.select_related("parent", "root", "route_record", "route_record__work").get(seq=seq)


def work_route_history_page(work_id: int, *, before: int | None = None, limit: int = PAGE_SIZE) -> KeysetPage:
    """The Work's route history: its RouteRecords with their Events, newest first, below the
    Event seq ``before`` when given."""
    queryset = RouteRecord.objects.filter(work_id=work_id).select_related("event")
    return keyset_page(queryset, key="event_id", cursor=before, limit=limit)


def work_route_history_total(work_id: int, *, cap: int = COUNT_CAP) -> ListTotal:
    """How many RouteRecords name the Work, counted up to ``cap`` (one query)."""
    return count_capped(RouteRecord.objects.filter(work_id=work_id), cap=cap)


# --- routes ---------------------------------------------------------------------------------
# How an Event was routed (its RouteRecord) or why it is not yet (its reason, the Event it waits
# behind, its counted failure): what ``GET /api/events/{seq}/route``, ``events get|chain|list``
# and the Event page show (R29). Every reader costs a fixed number of queries.


@dataclass(frozen=True, slots=True)
class EventRoute:
    """An Event with its route: the RouteRecord of a settled Event, or for an unrouted one
    the failure counted on it (``None`` when none is)."""

    event: Event
    record: RouteRecord | None
    failure: RouteFailure | None = None

    @property
    def state(self) -> str:
        """The Event's route state: ``unrouted``, ``routed``, ``skipped`` or ``failed``."""
        return self.event.route_state

    @property
    def settled(self) -> bool:
        return self.event.route_state != RouteState.UNROUTED

    @property
    def outcome(self) -> str:
        """What became of the Event: its route state, except that a routed Event its policy
        delivered nowhere is ``unmatched`` or ``dropped``."""
        return event_outcome(self.event, self.record)


def event_outcome(event: Event, record: RouteRecord | None) -> str:
    """The Event's outcome: its route state, or ``unmatched``/``dropped`` for a routed Event
    whose RouteRecord's policy delivered it nowhere."""
    if event.route_state == RouteState.ROUTED and record is not None:
        return UNDELIVERED_OUTCOMES.get(record.policy, RouteState.ROUTED.value)
    return event.route_state


# Routed Events whose policy delivered them nowhere (``Effect.UNMATCHED``, ``Effect.DROP``: not
# imported, so that reading routes does not load the decision's modules): their outcome is
# named after the policy, not "routed" (the console shows them apart).
UNDELIVERED_OUTCOMES = {"unmatched": "unmatched", "drop": "dropped"}


@dataclass(frozen=True, slots=True)
class EventRoutePage:
    """One page of ``events list``: Events with their routes, in the listing order.
    ``next_after`` is the seq to pass as ``after`` for the next page (``None`` on the last);
    ``cursor`` the one this page was read after (``None``: the first page)."""

    items: list[EventRoute]
    next_after: int | None
    cursor: int | None = None

    @property
    def is_first(self) -> bool:
        """Whether this is the list's first page (the pager offers no way back to it)."""
        return self.cursor is None

    def __iter__(self):
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


def event_routes(events: Sequence[Event]) -> list[EventRoute]:
    """Pair Events with their routes: the RouteRecord of a settled Event (which the caller's
    query must have joined: ``select_related("route_record")``) and the failure counted on
    an unrouted one. One query at most (the failures)."""
    failures = failures_read(e.seq for e in events if not e.is_settled)
    return [
        EventRoute(
            event=e,
            # An unrouted Event has no record (I1): not touching the relation costs no query.
            record=getattr(e, "route_record", None) if e.is_settled else None,
            failure=failures.get(e.seq),
        )
        for e in events
    ]


def event_route(seq: int) -> EventRoute:
    """The Event ``seq`` with its route (at most two queries), or ``Event.DoesNotExist``."""
    return event_routes([events_with_records().get(seq=seq)])[0]


def event_chain_routes(seq: int) -> list[EventRoute]:
    """The causal chain of Event ``seq``, root first and ending with it, each Event with its
    route. At most four queries whatever the depth; ``Event.DoesNotExist`` for an unknown seq."""
    chain = event_chain(seq)
    records = {
        r.event_id: r
        for r in RouteRecord.objects.select_related("work").filter(event_id__in=[e.seq for e in chain])
    }
    failures = failures_read(e.seq for e in chain if e.route_state == RouteState.UNROUTED)
    return [EventRoute(event=e, record=records.get(e.seq), failure=failures.get(e.seq)) for e in chain]


def events_route_page(filters: EventListFilter) -> EventRoutePage:
    """One page of Events matching ``filters``, each with its route (at most three queries).

    The page's seqs are found first, reading the seqs alone (an index holds them), then its
    rows by seq: where a filter's index serves the search, ordering its matches costs a sort
    of integers, not of whole Events with their records.
    """
    seqs = keyset_page(
        events_listed(filters).select_related(None).only("seq"),
        key="seq",
        cursor=filters.after,
        limit=filters.limit,
        descending=not filters.oldest,
    )
    wanted = [event.seq for event in seqs]
    events = sorted(
        events_with_records().filter(seq__in=wanted), key=lambda e: e.seq, reverse=not filters.oldest
    )
    return EventRoutePage(items=event_routes(events), next_after=seqs.next_cursor, cursor=filters.after)


def events_route_total(filters: EventListFilter, *, cap: int = COUNT_CAP) -> ListTotal:
    """How many Events match ``filters`` (paging aside), counted up to ``cap``: one query."""
    return count_capped(events_listed(filters), cap=cap)
