"""Live updates of the console: group names, the outbox that carries changes to the web
processes, websocket paths (declared once here: the site routes them).

A service that changes what a page shows records it in the outbox, in its own transaction:
:func:`work_changed_on_commit` for Work created or changed (the Work list, the home page and
each Work's page), :func:`pages_changed_on_commit` for Events and any group. A row
(:class:`infra.models.LiveChange`) commits with the change or not at all, whichever process
writes it (the web, a loop, a command that exits at once). Each web process reads the rows
after the last position it read (``conduit_site.live``), woken on commit by
``LISTEN/NOTIFY`` on PostgreSQL and a datagram on SQLite (``infra.wakeup``), and tells its
open pages through the channel layer: the group ``work.<id>`` for a Work's page, ``event.<seq>``
for an Event's page, :data:`WORK_GROUP` and :data:`EVENTS_GROUP` for the lists and the home page.
Group names come from here only and contain only ids.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlencode

from django.db import DEFAULT_DB_ALIAS, transaction
from django.db.models import Max, Min, Q
from django.utils import timezone

from infra.bulk import bulk_insert
from infra.models import LiveChange
from infra.wakeup import notify_on_commit

logger = logging.getLogger(__name__)

# The group of the Events list (every new or newly routed Event).
EVENTS_GROUP = "console.events"
# The group of the Work list and the home page's counts: any Work created or changed state.
WORK_GROUP = "console.work"
# The channels message type of a live update: consumers handle it in ``console_update``.
UPDATE_TYPE = "console.update"
# Channels' own rule for group names: ASCII letters, digits, '-', '_', '.'; under 100 chars.
GROUP_NAME = re.compile(r"[A-Za-z0-9\-_.]{1,99}")
# The wake-up channel of the outbox: a web process's reader listens on it.
LIVE_CHANNEL = "conduit_live"
# Outbox rows older than this are deleted (a page reconnecting from an older position refreshes
# whole: the position is older than the outbox's first row).
LIVE_RETENTION = timedelta(hours=1)
# The outbox columns a writer gives (its id is its position).
_CHANGE_COLUMNS = ("at", "groups", "works", "events")


def group_name_for_work(work_id: int) -> str:
    """The group of one Work's page: ``work.<id>``."""
    if isinstance(work_id, bool) or not isinstance(work_id, int) or work_id < 1:
        raise ValueError(f"work_id: expected a positive integer, got {work_id!r}")
    return f"work.{work_id}"


def group_name_for_event(seq: int) -> str:
    """The group of one Event's page: ``event.<seq>``."""
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        raise ValueError(f"seq: expected a positive integer, got {seq!r}")
    return f"event.{seq}"


def _ids(values: Iterable[int | None]) -> list[int]:
    """The positive ids among ``values``, sorted, once each. A temporary id (a Work a route
    window is still creating: negative) or ``None`` names no page and is left out."""
    return sorted({int(value) for value in values if value is not None and int(value) > 0})


def pages_changed_on_commit(
    *,
    groups: Iterable[str] = (),
    works: Iterable[int | None] = (),
    events: Iterable[int | None] = (),
    using: str = DEFAULT_DB_ALIAS,
) -> None:
    """Record in the outbox, in the current transaction, that pages showing ``groups``, the
    pages of ``works`` and the pages of ``events`` changed: open pages refresh once it commits,
    whichever process commits it; nothing is recorded on a rollback. Outside a transaction the
    row commits at once. One row a call; nothing at all when every list is empty."""
    names = sorted(set(groups))
    for name in names:
        if not isinstance(name, str) or not GROUP_NAME.fullmatch(name):
            raise ValueError(f"group: {name!r} is not a valid group name (ids, letters, '.', '-', '_')")
    work_ids, seqs = _ids(works), _ids(events)
    if not (names or work_ids or seqs):
        return
    if using == DEFAULT_DB_ALIAS:
        # The route loop writes a few a window: the set-based insert's prepared statement, not
        # a model instance saved (about a third of a millisecond each).
        bulk_insert(LiveChange, _CHANGE_COLUMNS, [[timezone.now(), names, work_ids, seqs]])
    else:
        LiveChange.objects.using(using).create(at=timezone.now(), groups=names, works=work_ids, events=seqs)
    notify_on_commit(LIVE_CHANNEL, using=using)


def work_changed_on_commit(work_ids: Iterable[int | None], *, using: str = DEFAULT_DB_ALIAS) -> None:
    """Record that these Work were created or changed state: the Work list and the home page
    (:data:`WORK_GROUP`) and each Work's page refresh once the current transaction commits.
    Temporary (negative) ids are left out; nothing is recorded when no id is left."""
    ids = _ids(work_ids)
    if ids:
        pages_changed_on_commit(groups=[WORK_GROUP], works=ids, using=using)


# --- reading the outbox ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Change:
    """One outbox row as a reader sees it: its position, when it was written, and the groups
    whose pages it changed."""

    position: int
    at: datetime
    groups: frozenset[str]


def change_groups(row_groups: Iterable[str], works: Iterable[int], events: Iterable[int]) -> frozenset[str]:
    """The group names of one row: its fixed groups, ``work.<id>`` and ``event.<seq>``."""
    return frozenset(
        [
            *row_groups,
            *(group_name_for_work(int(w)) for w in works),
            *(group_name_for_event(int(s)) for s in events),
        ]
    )


def live_changes_after(position: int, *, also: Iterable[int] = (), limit: int = 1000) -> list[Change]:
    """The outbox rows after ``position`` (oldest first, at most ``limit``), and those of the
    positions ``also`` names (rows a reader saw missing: a transaction that took its position
    earlier and committed later). One query."""
    wanted = sorted(set(also))
    after = Q(pk__gt=position) | Q(pk__in=wanted) if wanted else Q(pk__gt=position)
    rows = LiveChange.objects.filter(after)
    return [
        Change(pk, at, change_groups(groups, works, events))
        for pk, at, groups, works, events in rows.order_by("pk").values_list(
            "pk", "at", "groups", "works", "events"
        )[:limit]
    ]


def live_head() -> int:
    """The last position of the outbox (0 when it is empty). One query."""
    return LiveChange.objects.aggregate(head=Max("pk"))["head"] or 0


@dataclass(frozen=True, slots=True)
class Backlog:
    """How far a reader at ``position`` is behind: the outbox's last position, and when the
    oldest row after ``position`` was written (``None``: none is)."""

    head: int
    oldest: datetime | None

    def seconds(self, now: datetime) -> float:
        return 0.0 if self.oldest is None else max((now - self.oldest).total_seconds(), 0.0)


def live_backlog(position: int) -> Backlog:
    """The rows after ``position`` and the oldest one's time. One query."""
    found = LiveChange.objects.filter(pk__gt=position).aggregate(head=Max("pk"), oldest=Min("at"))
    return Backlog(head=found["head"] or position, oldest=found["oldest"])


def live_changes_prune(*, before: datetime, batch: int = 5000) -> int:
    """Delete outbox rows written before ``before``, ``batch`` at a time, each in a short
    transaction; returns how many."""
    deleted = 0
    while True:
        with transaction.atomic():
            ids = list(
                LiveChange.objects.filter(at__lt=before).order_by("pk").values_list("pk", flat=True)[:batch]
            )
            if not ids:
                return deleted
            deleted += LiveChange.objects.filter(pk__in=ids).delete()[0]
        if len(ids) < batch:
            return deleted


# --- websocket paths ----------------------------------------------------------------------------
# The console's websocket routes, declared once: name -> route (Django ``path()`` syntax, no
# leading slash). ``conduit_site.ws_urls`` routes each name to its consumer; the pages connect
# to the paths built below.
WS_HOME = "ws/home/"
WS_WORK_LIST = "ws/work/"
WS_WORK = "ws/work/<int:work_id>/"
WS_EVENTS = "ws/events/"
WS_EVENT = "ws/events/<int:seq>/"
WS_ROUTES: dict[str, str] = {
    "ws-home": WS_HOME,
    "ws-work-list": WS_WORK_LIST,
    "ws-work": WS_WORK,
    "ws-events": WS_EVENTS,
    "ws-event": WS_EVENT,
}
# The websocket path that streams the home page's cards.
HOME_WS_PATH = "/" + WS_HOME


# The query parameter of a page's websocket that says the outbox position the page was rendered at.
AFTER_PARAM = "outbox"


def ws_path_at(path: str, position: int) -> str:
    """``path`` (a websocket path, with or without a query) saying the outbox ``position``."""
    return f"{path}{'&' if '?' in path else '?'}{AFTER_PARAM}={int(position)}"


def _with_query(route: str, filters: Mapping[str, str] | None) -> str:
    pairs = [(key, value) for key, value in (filters or {}).items() if value]
    return "/" + route + (f"?{urlencode(pairs)}" if pairs else "")


def work_ws_path(work_id: int) -> str:
    """The websocket path that streams updates of one Work's page."""
    return "/" + WS_WORK.replace("<int:work_id>", str(int(work_id)))


def event_ws_path(seq: int) -> str:
    """The websocket path that streams updates of one Event's page."""
    return "/" + WS_EVENT.replace("<int:seq>", str(int(seq)))


def events_ws_path(filters: Mapping[str, str] | None = None) -> str:
    """The websocket path that streams the Events list, with the list's filters."""
    return _with_query(WS_EVENTS, filters)


def work_ws_list_path(filters: Mapping[str, str] | None = None) -> str:
    """The websocket path that streams the Work list, with the list's filters and page."""
    return _with_query(WS_WORK_LIST, filters)
