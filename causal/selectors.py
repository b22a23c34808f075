"""Reads of the acceptance ledger.

Each selector names its joins explicitly (``select_related``/``prefetch_related``) so a page
costs a fixed number of queries whatever the length of history.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import connection
from django.db.models import Count, Max, QuerySet, Sum
from django.db.models.functions import Coalesce

from causal.models import KV, CausalDiagnostic, DiagnosticKind, Event, RouteState

if TYPE_CHECKING:
    from causal.limits import Limits, Pin

# --- paging ---------------------------------------------------------------------------------

PAGE_SIZE = 50


@dataclass(frozen=True, slots=True)
class KeysetPage:
    """One page of rows read by a keyset (``key < cursor`` or ``key > cursor``).

    ``next_cursor`` is the key of the last row when more rows follow (pass it back as the
    cursor for the next page), else ``None``. Counting the total is deliberately not done:
    the cost of a page never depends on the length of history.
    """

    items: Sequence[Any]
    cursor: int | None
    next_cursor: int | None

    @property
    def has_next(self) -> bool:
        return self.next_cursor is not None

    @property
    def is_first(self) -> bool:
        return self.cursor is None

    def __iter__(self) -> Iterator[Any]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __bool__(self) -> bool:
        return bool(self.items)


def keyset_page(
    queryset: QuerySet,
    *,
    key: str,
    cursor: int | None = None,
    limit: int = PAGE_SIZE,
    descending: bool = True,
) -> KeysetPage:
    """Read one page of ``queryset`` ordered by the unique integer field ``key``.

    Newest first (``descending``) reads rows with ``key < cursor``; otherwise rows with
    ``key > cursor`` in ascending order. One query: ``limit + 1`` rows tell whether a next
    page exists.
    """
    if limit < 1:
        raise ValueError("limit must be at least 1")
    if cursor is not None:
        queryset = queryset.filter(**{f"{key}__{'lt' if descending else 'gt'}": cursor})
    queryset = queryset.order_by(f"-{key}" if descending else key)
    rows = list(queryset[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    next_cursor = getattr(rows[-1], key) if more else None
    return KeysetPage(items=rows, cursor=cursor, next_cursor=next_cursor)


# Lists count their rows up to this many; past it they say "10,000+" (counting every row of a
# long history would cost a page time that grows with it).
COUNT_CAP = 10_000


@dataclass(frozen=True, slots=True)
class ListTotal:
    """How many rows a filtered list has: exact up to the cap, else "at least ``count``"."""

    count: int
    capped: bool

    def __str__(self) -> str:
        return f"{self.count:,}+" if self.capped else f"{self.count:,}"


def count_capped(queryset: QuerySet, *, cap: int = COUNT_CAP) -> ListTotal:
    """How many rows ``queryset`` has, counting at most ``cap`` of them: one query whose
    cost is bounded by the cap (``SELECT COUNT(*) FROM (… LIMIT cap + 1)``)."""
    if cap < 1:
        raise ValueError("cap must be at least 1")
    n = queryset.order_by()[: cap + 1].count()
    return ListTotal(count=min(n, cap), capped=n > cap)


def distinct_values(model: type, column: str, *, limit: int) -> list[str]:
    """The first ``limit`` distinct values of an indexed text ``column`` of ``model``, sorted.

    One query, a "loose index scan" (a recursive common table expression that asks the index
    for the next larger value, once per value): its cost grows with the number of distinct
    values, not with the number of rows.
    """
    table = connection.ops.quote_name(model._meta.db_table)
    col = connection.ops.quote_name(model._meta.get_field(column).column)
    sql = (
        f"WITH RECURSIVE v(value) AS ("
        f" SELECT MIN({col}) FROM {table}"
        f" UNION ALL"
        f" SELECT (SELECT MIN({col}) FROM {table} WHERE {col} > v.value) FROM v WHERE v.value IS NOT NULL"
        f") SELECT value FROM v WHERE value IS NOT NULL LIMIT %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [limit])
        return [row[0] for row in cursor.fetchall()]


# --- console --------------------------------------------------------------------------------


def event_get(seq: int) -> Event:
    """The Event with this ``seq`` and its parent and root, or ``Event.DoesNotExist``."""
    return Event.objects.select_related("parent", "root").get(seq=seq)


def unrouted_event_count() -> int:
    """How many accepted Events are still unrouted (uses the partial unrouted index)."""
    return Event.objects.filter(route_state=RouteState.UNROUTED).count()


# --- causal limits --------------------------------------------------------------------------


def event_chain(seq: int) -> list[Event]:
    """The causal chain of Event ``seq``, root first, ending with the Event itself.

    Two queries whatever the depth (a recursive common table expression walks the parents).
    Raises ``Event.DoesNotExist`` for an unknown ``seq``.
    """
    table = connection.ops.quote_name(Event._meta.db_table)
    sql = (
        f"WITH RECURSIVE chain(seq, parent_id) AS ("
        f" SELECT seq, parent_id FROM {table} WHERE seq = %s"
        f" UNION ALL"
        f" SELECT e.seq, e.parent_id FROM {table} e JOIN chain c ON e.seq = c.parent_id"
        f") SELECT seq FROM chain"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [seq])
        seqs = [row[0] for row in cursor.fetchall()]
    if not seqs:
        raise Event.DoesNotExist(f"No Event with seq {seq}.")
    # A parent is always accepted before its child, so seq order is root-first order.
    return list(Event.objects.filter(seq__in=seqs).order_by("seq"))


def roots_refused_since(since: datetime) -> list[dict[str, Any]]:
    """Roots whose derived Events the causal limits refused at or after ``since``.

    One dict per root, most refused first: ``root_seq`` (``None`` for refusals that had no
    parent to name a root), ``refusals`` (how many: the diagnostics' ``occurrences``),
    ``kinds`` (``{kind: count}``) and ``last_at``. One query.
    """
    if since.tzinfo is None or since.utcoffset() is None:
        raise ValueError(f"since: expected an aware datetime, got naive {since!r}")
    rows = (
        CausalDiagnostic.objects.filter(at__gte=since)
        .values("root_seq", "kind")
        .annotate(n=Sum("occurrences"), last_at=Max(Coalesce("last_at", "at")))
        .order_by()
    )
    roots: dict[int | None, dict[str, Any]] = {}
    for row in rows:
        entry = roots.setdefault(
            row["root_seq"],
            {"root_seq": row["root_seq"], "refusals": 0, "kinds": {}, "last_at": row["last_at"]},
        )
        entry["refusals"] += row["n"]
        entry["kinds"][row["kind"]] = row["n"]
        entry["last_at"] = max(entry["last_at"], row["last_at"])
    return sorted(roots.values(), key=lambda e: (-e["refusals"], e["root_seq"] is None, e["root_seq"] or 0))


@dataclass(frozen=True, slots=True)
class RootLimitsStatus:
    """A root's limits in force and its token bucket for the current UTC minute."""

    root_seq: int
    pin: Pin | None
    limits: Limits
    minute: datetime
    used: int

    @property
    def pinned(self) -> bool:
        return self.pin is not None

    @property
    def remaining(self) -> int:
        return max(self.limits.rate_per_minute - self.used, 0)


def root_limits_status(root_seq: int, *, now: datetime, default: Limits | None = None) -> RootLimitsStatus:
    """The limits ``root_seq``'s descendants are judged by (the pin, else ``default`` or the
    settings) and the tokens used in the UTC minute holding ``now``. One query."""
    # Imported here, not with this module: the limits module is the derived acceptance (it
    # imports the acceptance services), which the other reads here (events get's) never need.
    from causal.limits import (
        BUCKETS_NAMESPACE,
        PINS_NAMESPACE,
        Limits,
        bucket_key,
        minute_start,
        pin_from_value,
        pin_key,
    )

    minute = minute_start(now)
    pin = bucket = None
    entries = KV.objects.filter(namespace=PINS_NAMESPACE, key=pin_key(root_seq)) | KV.objects.filter(
        namespace=BUCKETS_NAMESPACE, key=bucket_key(root_seq, minute)
    )
    for entry in entries:
        if entry.namespace == PINS_NAMESPACE:
            pin = pin_from_value(root_seq, entry.value)
        else:
            bucket = entry
    limits = pin.limits if pin is not None else (default or Limits.from_settings())
    used = int(bucket.value.get("count", 0)) if bucket is not None else 0
    return RootLimitsStatus(root_seq=root_seq, pin=pin, limits=limits, minute=minute, used=used)


@dataclass(frozen=True, slots=True)
class TreeNode:
    """One Event of a causal tree, with its level below the tree's root (0 for the root)."""

    event: Event
    level: int
    children: int


@dataclass(frozen=True, slots=True)
class RootTree:
    """A root and its first ``len(nodes) - 1`` descendants in tree (pre-)order."""

    root: Event
    nodes: list[TreeNode]
    descendants: int

    @property
    def truncated(self) -> bool:
        return len(self.nodes) - 1 < self.descendants


ROOT_TREE_MAX_NODES = 500


class NotARoot(ValueError):
    """The Event asked for as a root is a descendant; ``root_seq`` names its root."""

    def __init__(self, seq: int, root_seq: int) -> None:
        super().__init__(f"Event #{seq} is not a root: its root is #{root_seq}")
        self.seq = seq
        self.root_seq = root_seq


def root_tree(root_seq: int, *, max_nodes: int = ROOT_TREE_MAX_NODES) -> RootTree:
    """Root ``root_seq`` and its descendants as a tree: the ``max_nodes`` first accepted.

    A parent is accepted before its children, so the first descendants by seq always form
    a connected tree. At most three queries. Raises ``Event.DoesNotExist`` for an unknown
    seq and :class:`NotARoot` for an Event that is not a root.
    """
    if max_nodes < 1:
        raise ValueError("max_nodes must be at least 1")
    root = Event.objects.get(seq=root_seq)
    if root.root_id is not None:
        raise NotARoot(root_seq, root.root_id)
    descendants = Event.objects.filter(root_id=root_seq)
    rows = list(descendants.order_by("seq")[:max_nodes])
    total = len(rows) if len(rows) < max_nodes else descendants.count()
    children: dict[int, list[Event]] = {}
    for event in rows:
        children.setdefault(event.parent_id, []).append(event)
    nodes: list[TreeNode] = []
    stack: list[tuple[Event, int]] = [(root, 0)]
    while stack:
        event, level = stack.pop()
        kids = children.get(event.seq, [])
        nodes.append(TreeNode(event=event, level=level, children=len(kids)))
        stack.extend((kid, level + 1) for kid in reversed(kids))
    return RootTree(root=root, nodes=nodes, descendants=total)


@dataclass(frozen=True, slots=True)
class DiagnosticFilter:
    """What the diagnostics list is filtered by; empty means "any"."""

    kind: str = ""
    root_seq: int | None = None

    def __post_init__(self) -> None:
        if self.kind and self.kind not in DiagnosticKind.values:
            raise ValueError(f"kind: unknown diagnostic kind {self.kind!r}")


def diagnostics_filtered(filters: DiagnosticFilter) -> QuerySet[CausalDiagnostic]:
    """Causal diagnostics matching ``filters``, unordered."""
    queryset = CausalDiagnostic.objects.all()
    if filters.kind:
        queryset = queryset.filter(kind=filters.kind)
    if filters.root_seq is not None:
        queryset = queryset.filter(root_seq=filters.root_seq)
    return queryset


def diagnostics_page(
    filters: DiagnosticFilter, *, before: int | None = None, limit: int = PAGE_SIZE, oldest: bool = False
) -> KeysetPage:
    """One page of causal diagnostics, newest first below id ``before`` when given, or oldest
    first above it (``oldest``)."""
    return keyset_page(
        diagnostics_filtered(filters), key="id", cursor=before, limit=limit, descending=not oldest
    )


def diagnostics_total(filters: DiagnosticFilter, *, cap: int = COUNT_CAP) -> ListTotal:
    """How many refusals the causal diagnostics matching ``filters`` count (their
    ``occurrences``), summed over at most ``cap`` records ("at least" past it). One query (two
    past the cap) whose cost is bounded by the cap."""
    if cap < 1:
        raise ValueError("cap must be at least 1")
    first = diagnostics_filtered(filters).order_by()[: cap + 1]
    totals = first.aggregate(records=Count("pk"), refusals=Sum("occurrences"))
    if totals["records"] > cap:
        # Past the cap: the refusals of the first ``cap`` records, at least.
        capped = diagnostics_filtered(filters).order_by()[:cap].aggregate(refusals=Sum("occurrences"))
        return ListTotal(count=capped["refusals"] or 0, capped=True)
    return ListTotal(count=totals["refusals"] or 0, capped=False)


# --- KV namespaces ----------------------------------------------------------------------------


def kv_newest(
    namespace: str, *, since: datetime | None = None, limit: int
) -> list[tuple[str, dict, datetime]]:
    """The entries of ``namespace``, the most recently written first (only those written at
    ``since`` or later when given), as (key, value, written at); a value that is not a mapping
    reads as ``{}``. One query."""
    entries = KV.objects.filter(namespace=namespace)
    if since is not None:
        entries = entries.filter(updated_at__gte=since)
    rows = entries.order_by("-updated_at", "key").values_list("key", "value", "updated_at")[:limit]
    return [(key, value if isinstance(value, dict) else {}, updated_at) for key, value, updated_at in rows]
