"""Live updates from the router: after a window commits, open console pages refresh.

The router calls :func:`publish_routed` once per window with the Events it touched and the
Work they went to. On commit (never before, nothing on a rollback) it sends one
``console.events`` message and at most :data:`MAX_WORK_MESSAGES` ``work.<id>`` messages,
so a window of any size costs a bounded number of channel-layer writes. The consumers
(``routing.consumers``) re-render their partials and push them as out-of-band swaps.

Publishing is best effort and never reaches routing: the decisions are committed already,
and a page without a live refresh is still right on its next load. A failing channel layer
is logged (a warning, with the stack) and routing goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from conduit_site.live import EVENTS_GROUP, UPDATE_TYPE, group_name_for_work

logger = logging.getLogger("conduit.routing.live")

# At most this many Work pages are told about one window; the rest refresh on their next load.
MAX_WORK_MESSAGES = 50


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
    transaction.on_commit(lambda: send_routed(seq_list, works), using=using)


def send_routed(seqs: list[int], work_ids: list[int]) -> int:
    """Send the window's messages now (what :func:`publish_routed` runs on commit); returns how
    many were sent. A failing channel layer is logged as a warning with its stack, never raised:
    this is the route loop's boundary with the web pages."""
    try:
        messages = _messages(seqs, work_ids)
        layer = get_channel_layer()
        if layer is None:
            logger.debug("route.live_no_channel_layer", extra={"events": len(seqs)})
            return 0
        async_to_sync(_send_all)(layer, messages)
        return len(messages)
    except Exception:  # noqa: BLE001 - the loop boundary: a page misses a refresh, routing goes on
        logger.warning(
            "route.live_publish_failed", exc_info=True, extra={"events": len(seqs), "works": len(work_ids)}
        )
        return 0


def _messages(seqs: list[int], work_ids: list[int]) -> list[tuple[str, dict]]:
    messages: list[tuple[str, dict]] = []
    if seqs:
        payload = {"events": len(seqs), "first_seq": seqs[0], "last_seq": seqs[-1]}
        messages.append((EVENTS_GROUP, {"type": UPDATE_TYPE, "group": EVENTS_GROUP, "payload": payload}))
    if len(work_ids) > MAX_WORK_MESSAGES:
        logger.debug(
            "route.live_works_capped", extra={"works": len(work_ids), "published": MAX_WORK_MESSAGES}
        )
    for work_id in work_ids[:MAX_WORK_MESSAGES]:
        group = group_name_for_work(work_id)
        messages.append((group, {"type": UPDATE_TYPE, "group": group, "payload": {"work_id": work_id}}))
    return messages


async def _send_all(layer, messages: list[tuple[str, dict]]) -> None:
    for group, message in messages:
        await layer.group_send(group, message)
