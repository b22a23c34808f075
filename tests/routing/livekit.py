"""Helpers of the live update tests: channels joined on the channel layer, the messages waiting
on them, a routing pass, and the headers of a signed-in websocket."""

from __future__ import annotations

import json
import sqlite3

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from routing.engine.live import drain as live_drain
from tests.routing.routerkit import drain, router


def join(*groups: str) -> dict[str, str]:
    """A new channel in each group, by group."""
    layer = get_channel_layer()
    channels = {}
    for group in groups:
        channel = async_to_sync(layer.new_channel)()
        async_to_sync(layer.group_add)(group, channel)
        channels[group] = channel
    return channels


def waiting(path, channels: dict[str, str]) -> dict[str, list[dict]]:
    """The messages waiting on each joined channel, read from the layer's file (once the
    publisher thread has sent what was committed)."""
    assert live_drain(), "the publisher did not finish"
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT channel, body FROM channel_message ORDER BY id").fetchall()
    by_channel = {channel: group for group, channel in channels.items()}
    messages: dict[str, list[dict]] = {group: [] for group in channels}
    for channel, body in rows:
        if channel in by_channel:
            messages[by_channel[channel]].append(json.loads(body))
    return messages


def route_pass(clock) -> None:
    r = router(clock)
    try:
        drain(r)
    finally:
        r.close()


def headers(client) -> list[tuple[bytes, bytes]]:
    return [
        (b"origin", b"http://testserver"),
        (b"host", b"testserver"),
        (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()),
    ]
