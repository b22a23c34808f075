"""The Events list's filters (``events list``, ``GET /api/events``, the console's Events page):
what each filter means, how it is checked, and the query it makes."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime

from django.db import connection
from django.db.models import Q, QuerySet, Subquery, TextField, Value
from django.db.models.functions import Cast, Coalesce, StrIndex
from django.db.models.lookups import GreaterThan

from causal.models import Event, RouteState
from causal.selectors import PAGE_SIZE, distinct_values
from infra.converters import MAX_ID
from infra.queries import starts_with
from routing.config.selectors import live_scope_rows
from routing.models import CONTROL_POLICY, Disposition

# The most Events one list reads (``events list --limit``).
MAX_LIST_LIMIT = 1000


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


def events_with_records() -> QuerySet[Event]:
    """Events with their RouteRecord and the record's Work joined."""
    return Event.objects.select_related("route_record", "route_record__work")


def events_listed(filters: EventListFilter) -> QuerySet[Event]:
    """The Events ``filters`` select (paging aside), each with its RouteRecord and the
    record's Work joined, unordered."""
    queryset = events_with_records()
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


def known_event_types(*, limit: int = 200) -> list[str]:
    """The Event types accepted so far, sorted, at most ``limit`` (one query, by the index)."""
    return distinct_values(Event, "type", limit=limit)


def known_event_scopes(*, limit: int = 200) -> list[str]:
    """The scopes of the live configuration and of Events accepted so far, sorted (two
    queries, by the indexes)."""
    return sorted(set(live_scope_rows()) | set(distinct_values(Event, "scope", limit=limit)))[:limit]


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
