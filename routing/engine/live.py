"""Live updates from the router: after a window commits, open console pages refresh.

The router calls :func:`publish_routed` once per window with the Events it touched and the
Work they went to. On commit (never before, nothing on a rollback) a publisher thread sends one
``console.events`` message, at most :data:`MAX_WORK_MESSAGES` ``work.<id>`` messages and at
most :data:`MAX_EVENT_MESSAGES` ``event.<seq>`` messages (the Event pages), so a window of any
size costs a bounded number of channel-layer writes; with the embedded layer, only groups a
page is open on are sent to (and count against the caps). The consumers
(``conduit_site.console.consumers``) re-render their partials and push them as out-of-band swaps.

Publishing is best effort and never reaches routing: the decisions are committed already,
and a page without a live refresh is still right on its next load. A failing channel layer
is logged (a warning, with the stack) and routing goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from infra.live import EVENTS_GROUP, UPDATE_TYPE, CoalescingSender, group_name_for_event, group_name_for_work

logger = logging.getLogger("conduit.routing.live")

# At most this many Work pages are told about one window; the rest refresh on their next load.
MAX_WORK_MESSAGES = 50
# At most this many Event pages are told about one window.
MAX_EVENT_MESSAGES = 50
# Windows waiting to be published while a send is slow; older ones are dropped past this.
MAX_PENDING = 100


def publish_routed(seqs: Iterable[int], work_ids: Iterable[int], *, using: str | None = None) -> None:
    """Tell open console pages, once the current transaction commits, that these Events were
    decided (routed or still unrouted with a new reason) and these Works took input.

    Sends one ``console.events`` message for the window and one ``work.<id>`` message for each
    of the first :data:`MAX_WORK_MESSAGES` Works (lowest ids first). Outside a transaction it
    sends at once. Never raises: a failure to send is logged with its stack.
    """
    try:
        seq_list = sorted({int(seq) for seq in seqs})
        works = sorted({int(work_id) for work_id in work_ids if work_id is not None and int(work_id) > 0})
    except (TypeError, ValueError):
        logger.warning("route.live_publish_skipped", exc_info=True)
        return
    if not seq_list and not works:
        return
    transaction.on_commit(lambda: _publisher.put((seq_list, works)), using=using)


def drain(timeout: float = 5.0) -> bool:
    """Wait until every window committed so far has been sent (tests, shutdown); ``True``
    when the publisher is idle."""
    return _publisher.drain(timeout)


class _Publisher(CoalescingSender):
    """Sends windows' messages on a thread of its own, so a channel-layer write never sits on
    the route loop's path. Windows that queue up while a send is in flight are coalesced into
    one send; past :data:`MAX_PENDING` queued windows the oldest are dropped (the pages still
    show the truth on their next load)."""

    thread_name = "route-live-publisher"
    failure_event = "route.live_publish_failed"

    def __init__(self) -> None:
        super().__init__()
        self._pending: list[tuple[list[int], list[int]]] = []

    def gather(self, items: tuple[list[int], list[int]]) -> None:
        self._pending.append(items)
        if len(self._pending) > MAX_PENDING:
            del self._pending[0]

    def pending(self) -> bool:
        return bool(self._pending)

    def take(self) -> list[tuple[list[int], list[int]]]:
        batch, self._pending = self._pending, []
        return batch

    def send(self, run: Callable[[Awaitable], object], batch: list[tuple[list[int], list[int]]]) -> int:
        seqs = sorted({seq for seqs, _ in batch for seq in seqs})
        works = sorted({work for _, works in batch for work in works})
        return send_routed(seqs, works, run=run)


_publisher = _Publisher()


def send_routed(
    seqs: list[int], work_ids: list[int], *, run: Callable[[Awaitable], object] | None = None
) -> int:
    """Send the window's messages now (what :func:`publish_routed` runs on commit); returns how
    many were sent. A failing channel layer is logged as a warning with its stack, never raised:
    this is the route loop's boundary with the web pages."""
    try:
        layer = get_channel_layer()
        if layer is None:
            logger.debug("route.live_no_channel_layer", extra={"events": len(seqs)})
            return 0
        if run is None:
            return int(async_to_sync(_send_all)(layer, seqs, work_ids))
        return int(run(_send_all(layer, seqs, work_ids)))
    except Exception:  # noqa: BLE001 - the loop boundary: a page misses a refresh, routing goes on
        logger.warning(
            "route.live_publish_failed", exc_info=True, extra={"events": len(seqs), "works": len(work_ids)}
        )
        return 0


async def _send_all(layer, seqs: list[int], work_ids: list[int]) -> int:
    """One ``console.events`` message, at most :data:`MAX_WORK_MESSAGES` ``work.<id>`` messages
    and at most :data:`MAX_EVENT_MESSAGES` ``event.<seq>`` messages. A layer that can tell
    which groups have members (``occupied_groups``, as the embedded SQLite layer can) is asked
    first, in one read: only open pages are told, and the caps count open pages, so a page
    open on any Work or Event of a big window hears of it."""
    works = {group_name_for_work(w): w for w in work_ids}
    events = {group_name_for_event(s): s for s in seqs}
    groups = ([EVENTS_GROUP] if seqs else []) + list(works) + list(events)
    occupied = getattr(layer, "occupied_groups", None)
    if occupied is not None:
        members = await occupied(groups)
        groups = [g for g in groups if g in members]
    work_groups = [g for g in groups if g in works]
    event_groups = [g for g in groups if g in events]
    if len(work_groups) > MAX_WORK_MESSAGES or len(event_groups) > MAX_EVENT_MESSAGES:
        logger.debug(
            "route.live_pages_capped",
            extra={"works": len(work_groups), "events": len(event_groups), "published": MAX_WORK_MESSAGES},
        )
    sent = 0
    if EVENTS_GROUP in groups:
        payload = {"events": len(seqs), "first_seq": seqs[0], "last_seq": seqs[-1]}
        await layer.group_send(EVENTS_GROUP, {"type": UPDATE_TYPE, "group": EVENTS_GROUP, "payload": payload})
        sent += 1
    for group in work_groups[:MAX_WORK_MESSAGES]:
        message = {"type": UPDATE_TYPE, "group": group, "payload": {"work_id": works[group]}}
        await layer.group_send(group, message)
        sent += 1
    for group in event_groups[:MAX_EVENT_MESSAGES]:
        message = {"type": UPDATE_TYPE, "group": group, "payload": {"seq": events[group]}}
        await layer.group_send(group, message)
        sent += 1
    return sent
