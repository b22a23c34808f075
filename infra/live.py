"""Live updates of the console: group names, publishing after commit, websocket paths (declared
once here: the site routes them).

Services call :func:`publish_on_commit` when they change what a page shows: the group
``work.<id>`` for a Work's page, ``event.<seq>`` for an Event's page and :data:`EVENTS_GROUP`
for the Events list; Work changes go through :func:`work_changed_on_commit`, which coalesces
them for :data:`WORK_GROUP` (the Work list and the home page) and the Work pages. The console's
websocket consumers (``conduit_site.console.consumers``) join those groups and re-render the partial the
page shows. Group names come from here only and contain only ids.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any
from urllib.parse import urlencode

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

logger = logging.getLogger(__name__)

# The group of the Events list (every new or newly routed Event).
EVENTS_GROUP = "console.events"
# The channels message type of a live update: consumers handle it in ``console_update``.
UPDATE_TYPE = "console.update"
# Channels' own rule for group names: ASCII letters, digits, '-', '_', '.'; under 100 chars.
GROUP_NAME = re.compile(r"[A-Za-z0-9\-_.]{1,99}")


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


def publish_on_commit(group: str, payload: Mapping[str, Any], *, using: str | None = None) -> None:
    """Send ``payload`` to ``group`` once the current transaction commits.

    Outside a transaction it is sent at once; if the transaction rolls back nothing is sent.
    A failure to send (the channel layer is down) is logged, never raised: the change is
    already committed and a page only misses one live refresh. ``payload`` holds ids and
    short strings (it crosses processes as JSON or msgpack).
    """
    if not isinstance(group, str) or not GROUP_NAME.fullmatch(group):
        raise ValueError(f"group: {group!r} is not a valid group name (ids, letters, '.', '-', '_')")
    message = {"type": UPDATE_TYPE, "group": group, "payload": dict(payload)}
    transaction.on_commit(lambda: _send(group, message), using=using, robust=True)


def _send(group: str, message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        logger.debug("live.no_channel_layer", extra={"group": group})
        return
    async_to_sync(layer.group_send)(group, message)


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


# --- Work changes, coalesced ----------------------------------------------------------------------
# The group of the Work list and the home page's counts: any Work created or changed state.
WORK_GROUP = "console.work"
# At most this many Work pages are told about one batch; the rest refresh on their next load.
MAX_WORK_PAGES = 50
# A batch is sent at most this often: changes committed meanwhile join the next one, so a burst
# of any size costs about ``1 / WORK_BATCH_SECONDS`` sends a second (each at most
# ``1 + MAX_WORK_PAGES`` channel-layer messages).
WORK_BATCH_SECONDS = 0.25


def work_changed_on_commit(work_ids: Iterable[int], *, using: str | None = None) -> None:
    """Tell open pages, once the current transaction commits, that these Work were created or
    changed state: the Work list and home page (:data:`WORK_GROUP`) and each Work's page.

    Changes are coalesced on a thread of their own: whatever commits while a batch is being
    sent, or within :data:`WORK_BATCH_SECONDS` of the last one, goes out as one batch, so
    10,000 changes send a handful of messages, not 10,000. Nothing is sent on a rollback; a
    failing channel layer is logged, never raised (the change is committed already)."""
    ids = {int(work_id) for work_id in work_ids if work_id}
    if ids:
        transaction.on_commit(lambda: work_publisher.put(ids), using=using)


class CoalescingSender:
    """Sends what services put, on a thread of its own, so a channel-layer write never sits on
    a loop's or a request's path: whatever is put while a send is in flight (or within
    ``batch_seconds`` of the last one) goes out as one batch. Subclasses say how items gather
    (:meth:`gather`), how a batch is taken (:meth:`take`) and sent (:meth:`send`, given a function
    that runs a coroutine on the thread's event loop, returning how many messages it sent). A
    failing send is logged as ``failure_event``, never raised: what it announces is committed."""

    thread_name = "live-publisher"
    failure_event = "live.publish_failed"

    def __init__(self, *, batch_seconds: float = 0.0) -> None:
        self.batch_seconds = batch_seconds
        self._lock = threading.Condition()
        self._busy = False
        self._thread: threading.Thread | None = None
        # What it sent, for tests and benchmarks: batches, and channel-layer messages in all.
        self.batches = 0
        self.messages = 0

    def gather(self, items: Any) -> None:
        raise NotImplementedError

    def pending(self) -> bool:
        raise NotImplementedError

    def take(self) -> Any:
        raise NotImplementedError

    def send(self, run: Callable[[Awaitable[Any]], Any], batch: Any) -> int:
        raise NotImplementedError

    def put(self, items: Any) -> None:
        with self._lock:
            self.gather(items)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
                self._thread.start()
            self._lock.notify_all()

    def drain(self, timeout: float = 5.0) -> bool:
        """Wait until everything put so far has been sent; ``True`` when idle."""
        with self._lock:
            return self._lock.wait_for(lambda: not self.pending() and not self._busy, timeout)

    def _run(self) -> None:
        # One event loop for the thread's life: a loop per send would cost more than the send.
        loop = asyncio.new_event_loop()
        try:
            while True:
                with self._lock:
                    if not self._lock.wait_for(self.pending, timeout=60):
                        self._thread = None
                        return
                    batch = self.take()
                    self._busy = True
                try:
                    self.messages += self.send(loop.run_until_complete, batch)
                    self.batches += 1
                except Exception:  # noqa: BLE001 - the sender's loop: a page misses a refresh
                    logger.warning(self.failure_event, exc_info=True, extra={"items": len(batch)})
                with self._lock:
                    self._busy = False
                    self._lock.notify_all()
                    # Let the next items gather: one batch per interval at most (a put's
                    # notify wakes the wait, so it waits out what is left of the interval).
                    deadline = time.monotonic() + self.batch_seconds
                    while (left := deadline - time.monotonic()) > 0:
                        self._lock.wait(left)
        finally:
            loop.close()


class WorkPublisher(CoalescingSender):
    """The coalescing sender behind :func:`work_changed_on_commit` (one per process)."""

    thread_name = "work-live-publisher"
    failure_event = "live.work_publish_failed"

    def __init__(self, *, batch_seconds: float = WORK_BATCH_SECONDS) -> None:
        super().__init__(batch_seconds=batch_seconds)
        self._pending: set[int] = set()

    def gather(self, items: Iterable[int]) -> None:
        self._pending.update(items)

    def pending(self) -> bool:
        return bool(self._pending)

    def take(self) -> list[int]:
        batch, self._pending = sorted(self._pending), set()
        return batch

    def send(self, run: Callable[[Awaitable[Any]], Any], batch: list[int]) -> int:
        return int(run(_send_work_changed(batch)))


work_publisher = WorkPublisher()


async def _send_work_changed(work_ids: list[int]) -> int:
    """One :data:`WORK_GROUP` message and at most :data:`MAX_WORK_PAGES` ``work.<id>`` messages,
    to open pages only when the layer can tell (``occupied_groups``); returns how many."""
    layer = get_channel_layer()
    if layer is None:
        return 0
    works = {group_name_for_work(work_id): work_id for work_id in work_ids}
    groups = [WORK_GROUP, *works]
    occupied = getattr(layer, "occupied_groups", None)
    if occupied is not None:
        members = await occupied(groups)
        groups = [group for group in groups if group in members]
    sent = 0
    if WORK_GROUP in groups:
        payload = {"works": len(work_ids), "first": work_ids[0], "last": work_ids[-1]}
        await layer.group_send(WORK_GROUP, {"type": UPDATE_TYPE, "group": WORK_GROUP, "payload": payload})
        sent += 1
    for group in [group for group in groups if group in works][:MAX_WORK_PAGES]:
        await layer.group_send(
            group, {"type": UPDATE_TYPE, "group": group, "payload": {"work_id": works[group]}}
        )
        sent += 1
    return sent
