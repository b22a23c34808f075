"""Reads of configuration generations and route records, and the console's joined views
of Events with their route, with explicit joins (no N+1)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Q, QuerySet, Subquery, TextField, Value
from django.db.models.functions import Cast, Coalesce, StrIndex
from django.db.models.lookups import GreaterThan

from causal.models import Event, RouteState
from causal.selectors import (
    COUNT_CAP,
    PAGE_SIZE,
    KeysetPage,
    ListTotal,
    count_capped,
    distinct_values,
    event_chain,
    keyset_page,
    unrouted_event_count,
)
from infra.converters import MAX_ID
from infra.queries import starts_with
from routing.config.selectors import live_generation

# Light: the failures module, not the router (reading routes loads neither it nor the decision).
from routing.engine.failures import RouteFailure, failures_read
from routing.models import (
    CONTROL_POLICY,
    ApiToken,
    Disposition,
    Generation,
    GenerationKind,
    RouteRecord,
    Scope,
)
from worklife.selectors import work_counts

# --- console --------------------------------------------------------------------------------


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


def work_route_history_total(work_id: int, *, cap: int = COUNT_CAP) -> ListTotal:
    """How many RouteRecords name the Work, counted up to ``cap`` (one query)."""
    return count_capped(RouteRecord.objects.filter(work_id=work_id), cap=cap)


def live_scope_paths() -> list[str]:
    """The scope paths of the live generation, sorted (one query)."""
    live = Generation.objects.filter(kind=GenerationKind.APPLIED).order_by("-number").values("pk")[:1]
    return list(
        Scope.objects.filter(generation_id=Subquery(live)).order_by("path").values_list("path", flat=True)
    )


def generations_page(
    *, before: int | None = None, limit: int = PAGE_SIZE, oldest: bool = False
) -> KeysetPage:
    """Configuration generations, applied and candidates, newest first (by id) below
    ``before``, or oldest first above it (``oldest``). The documents themselves are not read:
    a list never loads every document."""
    queryset = Generation.objects.defer("document")
    return keyset_page(queryset, key="id", cursor=before, limit=limit, descending=not oldest)


def generations_total(*, cap: int = COUNT_CAP) -> ListTotal:
    """How many configuration generations there are, counted up to ``cap`` (one query)."""
    return count_capped(Generation.objects.all(), cap=cap)


def generation_shown(*, number: int | None = None, candidate: int | None = None) -> Generation:
    """The applied generation ``number`` or the candidate ``candidate`` (by the names people
    read: "Generation 2", "Candidate 3"), or ``Generation.DoesNotExist``."""
    if number is not None:
        return Generation.objects.get(kind=GenerationKind.APPLIED, number=number)
    return Generation.objects.get(kind=GenerationKind.CANDIDATE, pk=candidate)


@dataclass(frozen=True, slots=True)
class ConsoleSummary:
    """What the console's home page shows."""

    unrouted_events: int
    work_by_status: dict[str, int]
    # What the work_loops are doing: Work running an attempt, and ready Work parked after
    # too many failures (an operator retries or cancels it).
    work_running: int
    work_parked: int
    live_generation: Generation | None


def console_summary(*, now: datetime | None = None) -> ConsoleSummary:
    """Counts of unrouted Events, of Work by state (parked and backing off apart from ready)
    and the live generation."""
    counts = work_counts(now=now)
    return ConsoleSummary(
        unrouted_events=unrouted_event_count(),
        work_by_status=counts.by_state,
        work_running=counts.running,
        work_parked=counts.parked,
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


# --- routes ---------------------------------------------------------------------------------
# How an Event was routed (its RouteRecord) or why it is not yet (its reason, the Event it waits
# behind, its counted failure): what ``GET /api/events/{seq}/route``, ``events get|chain|list``
# and the Event page show (R29). Every reader costs a fixed number of queries.

# The most Events one list reads (``events list --limit``).
MAX_LIST_LIMIT = 1000


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


class EventListInvalid(ValueError):
    """A filter of the Events list that cannot be used; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


# What a search (``query``) is compared with: the longest envelope id or subject stored.
QUERY_MAX_LENGTH = 512


def known_policies() -> tuple[str, ...]:
    """The route policies a RouteRecord records (``RouteRecord.policy``), for the filter's list."""
    # The router's effects only for the pages that offer the list.
    from routing.engine.decide import Effect

    return (
        Effect.START,
        Effect.QUEUE,
        Effect.INJECT,
        Effect.INTERRUPT,
        Effect.HELD,
        Effect.WAKE,
        Effect.DROP,
        Effect.UNMATCHED,
        Disposition.SKIPPED.value,
        Disposition.FAILED.value,
        CONTROL_POLICY,
    )


# Routed Events whose policy delivered them nowhere (``Effect.UNMATCHED``, ``Effect.DROP``: not
# imported, so that reading routes does not load the decision's modules): their outcome is
# named after the policy, not "routed" (the console shows them apart).
UNDELIVERED_OUTCOMES = {"unmatched": "unmatched", "drop": "dropped"}


# A time ago: "-10m", "-2h", "-3d" (also seconds and weeks), a sign, a number and a unit.
_AGO = re.compile(r"-\s*(\d{1,6})\s*([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
TIME_FORMATS = (
    "an ISO 8601 time like 2026-01-05T12:00:00Z, a time ago like -10m, -2h or -3d, today or yesterday"
)


def parse_time(text: str, *, now: datetime | None = None) -> datetime:
    """A moment as people type it: an ISO 8601 date or time (``2026-01-05``,
    ``2026-01-05T12:00:00Z``; without an offset it is read as UTC), a time before ``now``
    (``-10m``, ``-2h``, ``-3d``; ``s`` and ``w`` too) or ``today``/``yesterday`` (their start,
    midnight UTC). ``ValueError`` naming every accepted form otherwise. The one parser of the
    CLI's ``--since``/``--until``, the API's and the console's filters."""
    word = text.strip().lower()
    now = now or datetime.now(UTC)
    ago = _AGO.fullmatch(word)
    if ago:
        try:
            return now - timedelta(**{_UNITS[ago[2]]: int(ago[1])})
        except OverflowError:  # -999999w: before the year 1
            raise ValueError(f"{text[:60]!r} is further back than times go") from None
    if word in ("today", "yesterday"):
        midnight = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        return midnight - timedelta(days=1) if word == "yesterday" else midnight
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"expected {TIME_FORMATS}, got {text[:60]!r}") from None
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    # In UTC: an offset like -19:38 is ISO 8601's, not every database's (PostgreSQL's stop at 15:59).
    try:
        return value.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00:00+01:00: before the year 1 in UTC
        raise ValueError(f"{text[:60]!r} is further back than times go") from None


@dataclass(frozen=True, slots=True)
class EventListFilter:
    """What ``events list`` and the console's Events list read. Empty strings and ``None``
    mean "any".

    ``query`` finds an Event by its envelope id, its subject or (digits, ``#`` optional) its
    seq, exactly; ``scope`` is a scope path, with every scope under it when ``subtree``;
    ``type`` is a glob (``*`` any run of characters, ``?`` one character, case-sensitive, as
    routes match types); ``policy`` is the policy its RouteRecord records (``unmatched``,
    ``drop``, ``queue``…); ``work_id`` selects Events routed on that Work or naming it as
    their explicit target; ``since`` (inclusive) and ``until`` (exclusive) bound the
    acceptance time. Newest first unless ``oldest``; ``after`` is the seq the previous page
    ended with (keyset paging in the listing order).
    """

    scope: str = ""
    type: str = ""
    state: str = ""
    work_id: int | None = None
    since: datetime | None = None
    until: datetime | None = None
    after: int | None = None
    limit: int = PAGE_SIZE
    oldest: bool = False
    query: str = ""
    subtree: bool = False
    policy: str = ""
    data: str = ""

    def __post_init__(self) -> None:
        for name, most in (
            ("scope", 255),
            ("type", 255),
            ("query", QUERY_MAX_LENGTH),
            ("policy", 32),
            ("data", QUERY_MAX_LENGTH),
        ):
            value = getattr(self, name)
            if len(value) > most:
                raise EventListInvalid(name, f"at most {most} characters")
            # No stored value has one; PostgreSQL refuses a NUL in a query outright.
            if "\x00" in value:
                raise EventListInvalid(name, "a NUL character cannot match anything")
        if self.subtree and not self.scope:
            raise EventListInvalid("subtree", "needs a scope whose subtree to list")
        if self.state and self.state not in RouteState.values:
            raise EventListInvalid(
                "state", f"unknown state {self.state!r} (one of {', '.join(RouteState.values)})"
            )
        for name in ("work_id", "after"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise EventListInvalid(name, f"expected a positive integer, got {value!r}")
        for name in ("since", "until"):
            value = getattr(self, name)
            if value is not None and (value.tzinfo is None or value.utcoffset() is None):
                raise EventListInvalid(name, f"expected an aware datetime, got naive {value.isoformat()}")
        if self.since is not None and self.until is not None and self.since >= self.until:
            raise EventListInvalid("until", "must be later than since")
        if (
            isinstance(self.limit, bool)
            or not isinstance(self.limit, int)
            or not 1 <= self.limit <= MAX_LIST_LIMIT
        ):
            raise EventListInvalid("limit", f"expected 1 to {MAX_LIST_LIMIT}, got {self.limit!r}")


@dataclass(frozen=True, slots=True)
class EventRoutePage:
    """One page of ``events list``: Events with their routes, in the listing order.
    ``next_after`` is the seq to pass as ``after`` for the next page (``None`` on the last)."""

    items: list[EventRoute]
    next_after: int | None

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


def _events_with_records() -> QuerySet[Event]:
    return Event.objects.select_related("route_record", "route_record__work")


def event_route(seq: int) -> EventRoute:
    """The Event ``seq`` with its route (at most two queries), or ``Event.DoesNotExist``."""
    return event_routes([_events_with_records().get(seq=seq)])[0]


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


def events_listed(filters: EventListFilter) -> QuerySet[Event]:
    """The Events ``filters`` select (paging aside), each with its RouteRecord and the
    record's Work joined, unordered."""
    queryset = _events_with_records()
    if filters.query:
        text = filters.query.strip()
        # Ids and subjects by their start ("pr-4" finds pr-42), an exact one among them.
        found = starts_with("envelope_id", text) | starts_with("subject", text)
        digits = text.removeprefix("#")
        if digits.isascii() and digits.isdigit() and 0 < int(digits) <= MAX_ID:
            found |= Q(seq=int(digits))
        queryset = queryset.filter(found)
    if filters.scope and filters.subtree:
        queryset = queryset.filter(
            Q(scope=filters.scope) | starts_with("scope", filters.scope.rstrip("/") + "/")
        )
    elif filters.scope:
        queryset = queryset.filter(scope=filters.scope)
    if filters.type and filters.type != "*":
        head, star, tail = filters.type.partition("*")
        if star and not tail and head and not _GLOB_CHARS.search(head):
            # A prefix glob (github.*), the common case: by the index, no regular expression.
            queryset = queryset.filter(starts_with("type", head))
        elif _GLOB_CHARS.search(filters.type):
            queryset = queryset.filter(type__regex=glob_regex(filters.type))
        else:
            queryset = queryset.filter(type=filters.type)
    if filters.state:
        queryset = queryset.filter(route_state=filters.state)
    if filters.policy:
        queryset = queryset.filter(route_record__policy=filters.policy)
    if filters.work_id is not None:
        queryset = queryset.filter(Q(work_id=filters.work_id) | Q(route_record__work_id=filters.work_id))
    if filters.data:
        queryset = queryset.filter(data_contains(filters.data))
    if filters.since is not None:
        queryset = queryset.filter(accepted_at__gte=filters.since)
    if filters.until is not None:
        queryset = queryset.filter(accepted_at__lt=filters.until)
    return queryset


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
        _events_with_records().filter(seq__in=wanted), key=lambda e: e.seq, reverse=not filters.oldest
    )
    return EventRoutePage(items=event_routes(events), next_after=seqs.next_cursor)


def events_route_total(filters: EventListFilter, *, cap: int = COUNT_CAP) -> ListTotal:
    """How many Events match ``filters`` (paging aside), counted up to ``cap``: one query."""
    return count_capped(events_listed(filters), cap=cap)


def known_event_types(*, limit: int = 200) -> list[str]:
    """The Event types accepted so far, sorted, at most ``limit`` (one query, by the index)."""
    return distinct_values(Event, "type", limit=limit)


def known_event_scopes(*, limit: int = 200) -> list[str]:
    """The scopes of the live configuration and of Events accepted so far, sorted (two
    queries, by the indexes)."""
    return sorted(set(live_scope_paths()) | set(distinct_values(Event, "scope", limit=limit)))[:limit]


# How many of the newest Events a search in data reads at most: their data is not indexed, so the
# search is a scan, bounded by this many rows whatever the history's length.
DATA_SEARCH_WINDOW = 10_000


def data_contains(text: str) -> Q:
    """Events among the newest :data:`DATA_SEARCH_WINDOW` whose data, as JSON text, contains
    ``text`` (case-sensitively; a key, a value or a fragment of one). A scan of that window by
    the primary key: ``strpos(data::text, …)`` on PostgreSQL (a trigram index on the cast would
    serve it there), ``instr(data, …)`` over the stored JSON text on SQLite. ``text`` is looked
    for as JSON writes it inside a string (quotes and backslashes escaped; non-ASCII escaped as
    SQLite's JSON text holds it)."""
    needle = json.dumps(text, ensure_ascii=connection.vendor == "sqlite")[1:-1]
    # The seq of the window's oldest Event (0 while there are fewer): an offset on the seq index.
    oldest = Event.objects.order_by("-seq").values("seq")[DATA_SEARCH_WINDOW - 1 : DATA_SEARCH_WINDOW]
    window = Q(seq__gte=Coalesce(Subquery(oldest), Value(0)))
    return window & Q(GreaterThan(StrIndex(Cast("data", TextField()), Value(needle)), 0))


_GLOB_CHARS = re.compile(r"[*?]")


def glob_regex(pattern: str) -> str:
    """A regular expression that PostgreSQL and Python (SQLite's REGEXP) both read the same
    way, matching a whole value against the glob ``pattern`` (``*`` and ``?``)."""
    parts = [
        ".*" if token == "*" else "." if token == "?" else re.escape(token) for token in _glob_tokens(pattern)
    ]
    # (?s): '.' matches any character, newlines included, in both dialects.
    return r"(?s)\A" + "".join(parts) + r"\Z"


def _glob_tokens(pattern: str) -> list[str]:
    return [token for token in re.split(r"([*?])", pattern) if token]


def _stored_time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
