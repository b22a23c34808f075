"""Live updates of the console: group names, publishing after commit, websocket paths.

Services call :func:`publish_on_commit` when they change what a page shows: the group
``work.<id>`` for a Work's page, ``event.<seq>`` for an Event's page and :data:`EVENTS_GROUP`
for the Events list. The console's
websocket consumers (``conduit_site.console.consumers``) join those groups and re-render the partial the
page shows. Group names come from here only and contain only ids.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
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


def work_ws_path(work_id: int) -> str:
    """The websocket path that streams updates of one Work's page."""
    return f"/ws/work/{int(work_id)}/"


def event_ws_path(seq: int) -> str:
    """The websocket path that streams updates of one Event's page."""
    return f"/ws/events/{int(seq)}/"


def events_ws_path(filters: Mapping[str, str] | None = None) -> str:
    """The websocket path that streams the Events list, with the list's filters."""
    pairs = [(key, value) for key, value in (filters or {}).items() if value]
    return "/ws/events/" + (f"?{urlencode(pairs)}" if pairs else "")
