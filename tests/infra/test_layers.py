"""The SQLite channel layer: the embedded default that carries live updates between the
web process and the router process without Redis."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from channels.exceptions import ChannelFull

from infra.layers import SQLiteChannelLayer

REPO_ROOT = Path(__file__).resolve().parents[2]


class Clock:
    """Seconds since the epoch, moved by hand."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def layer(tmp_path, clock):
    layer = SQLiteChannelLayer(path=tmp_path / "channels.sqlite3", clock=clock, poll_interval=0.01)
    yield layer
    async_to_sync(layer.close)()


def run(coroutine):
    """Run a coroutine to completion from a sync test."""
    return asyncio.run(coroutine)


async def receive_or_none(layer: SQLiteChannelLayer, channel: str, timeout: float = 0.3):
    """The next message on ``channel``, or ``None`` when none arrives within ``timeout``."""
    try:
        return await asyncio.wait_for(layer.receive(channel), timeout)
    except TimeoutError:
        return None


def test_send_then_receive_in_order_keeps_types(layer):
    async def scenario():
        channel = await layer.new_channel()
        await layer.send(
            channel, {"type": "a.b", "n": 1, "text": "héllo", "raw": b"\x00\xff", "list": [1, None]}
        )
        await layer.send(channel, {"type": "a.b", "n": 2})
        return channel, await layer.receive(channel), await layer.receive(channel)

    channel, first, second = run(scenario())
    assert "!" in channel
    assert first == {"type": "a.b", "n": 1, "text": "héllo", "raw": b"\x00\xff", "list": [1, None]}
    assert second == {"type": "a.b", "n": 2}


def test_capacity_refuses_a_full_channel(tmp_path, clock):
    layer = SQLiteChannelLayer(
        path=tmp_path / "c.sqlite3", capacity=2, channel_capacity={"small.*": 1}, clock=clock
    )

    async def scenario():
        await layer.send("big.one", {"type": "x"})
        await layer.send("big.one", {"type": "x"})
        with pytest.raises(ChannelFull):
            await layer.send("big.one", {"type": "x"})
        await layer.send("small.one", {"type": "x"})
        with pytest.raises(ChannelFull):
            await layer.send("small.one", {"type": "x"})
        # Receiving one frees one place.
        await layer.receive("big.one")
        await layer.send("big.one", {"type": "x"})

    run(scenario())


def test_messages_expire_and_their_channel_leaves_its_groups(layer, clock):
    async def scenario():
        stale = await layer.new_channel()
        fresh = await layer.new_channel()
        await layer.group_add("console.events", stale)
        await layer.group_add("console.events", fresh)
        await layer.send(stale, {"type": "old"})
        clock.now += layer.expiry + 1
        # The expired message is never delivered.
        assert await receive_or_none(layer, stale) is None
        # A channel whose messages expired has no consumer: it left the group.
        await layer.group_send("console.events", {"type": "new"})
        assert await receive_or_none(layer, stale) is None
        assert await layer.receive(fresh) == {"type": "new"}

    run(scenario())


def test_group_membership_expires(layer, clock):
    async def scenario():
        channel = await layer.new_channel()
        await layer.group_add("work.1", channel)
        clock.now += layer.group_expiry + 1
        await layer.group_send("work.1", {"type": "x"})
        return await receive_or_none(layer, channel)

    assert run(scenario()) is None


def test_occupied_groups_are_the_live_memberships_among_those_asked_about(layer, clock):
    """A few groups are looked up by name; a route window's hundreds are read as every live
    membership kept to those asked about (OCCUPIED_LOOKUP_MAX): the two answers agree."""
    from infra.layers import OCCUPIED_LOOKUP_MAX

    async def scenario():
        a, b = await layer.new_channel(), await layer.new_channel()
        await layer.group_add("work.1", a)
        await layer.group_add("event.5", b)
        await layer.group_add("work.2", a)
        await layer.group_add("event.999", b)  # live, never asked about
        clock.now += layer.group_expiry - 10
        await layer.group_add("work.3", b)  # joined later: still live when the others lapse
        few = await layer.occupied_groups(["work.1", "work.3", "work.9", "console.events"])
        many = [f"work.{n}" for n in range(OCCUPIED_LOOKUP_MAX + 5)] + ["event.5", "event.6"]
        several = await layer.occupied_groups(many)
        clock.now += 20  # past the first three memberships' expiry
        lapsed = await layer.occupied_groups(many)
        return few, several, lapsed

    few, several, lapsed = run(scenario())
    assert few == {"work.1", "work.3"}
    assert several == {"work.1", "work.2", "work.3", "event.5"}
    assert lapsed == {"work.3"}


def test_groups_deliver_to_members_only(layer):
    async def scenario():
        a, b, c = [await layer.new_channel() for _ in range(3)]
        await layer.group_add("work.7", a)
        await layer.group_add("work.7", b)
        await layer.group_add("work.8", c)
        await layer.group_send("work.7", {"type": "one"})
        got = [await layer.receive(a), await layer.receive(b), await receive_or_none(layer, c)]
        await layer.group_discard("work.7", a)
        await layer.group_send("work.7", {"type": "two"})
        got += [await receive_or_none(layer, a), await layer.receive(b)]
        return got

    assert run(scenario()) == [{"type": "one"}, {"type": "one"}, None, None, {"type": "two"}]


def test_group_send_skips_a_full_member(tmp_path, clock):
    layer = SQLiteChannelLayer(path=tmp_path / "c.sqlite3", capacity=1, clock=clock, poll_interval=0.01)

    async def scenario():
        full = await layer.new_channel()
        free = await layer.new_channel()
        await layer.send(full, {"type": "first"})
        await layer.group_add("g", full)
        await layer.group_add("g", free)
        await layer.group_send("g", {"type": "second"})
        return [await layer.receive(full), await receive_or_none(layer, full), await layer.receive(free)]

    assert run(scenario()) == [{"type": "first"}, None, {"type": "second"}]


def test_flush_drops_messages_and_groups(layer):
    async def scenario():
        channel = await layer.new_channel()
        await layer.group_add("g", channel)
        await layer.send(channel, {"type": "x"})
        await layer.flush()
        await layer.group_send("g", {"type": "y"})
        return await receive_or_none(layer, channel)

    assert run(scenario()) is None


def test_bad_names_and_messages_are_refused(layer):
    async def scenario():
        with pytest.raises(TypeError, match="Channel name"):
            await layer.send("bad name", {"type": "x"})
        with pytest.raises(TypeError, match="Group name"):
            await layer.group_add("bad group!", "ok.channel")
        with pytest.raises(TypeError, match="message"):
            await layer.send("ok.channel", ["not", "a", "dict"])
        with pytest.raises(TypeError, match="set value cannot cross"):
            await layer.send("ok.channel", {"type": "x", "bad": {1, 2}})
        return await receive_or_none(layer, "ok.channel")

    assert run(scenario()) is None


def test_a_cancelled_receive_puts_its_message_back(tmp_path, clock):
    taken = threading.Event()
    release = threading.Event()

    class SlowLayer(SQLiteChannelLayer):
        def _pop_sync(self, channel):
            row = super()._pop_sync(channel)
            if row is not None and not taken.is_set():
                taken.set()
                release.wait(5)  # the caller is cancelled while the message is taken
            return row

    layer = SlowLayer(path=tmp_path / "c.sqlite3", clock=clock, poll_interval=0.01)

    async def scenario():
        await layer.send("ch.one", {"type": "m", "n": 1})
        await layer.send("ch.one", {"type": "m", "n": 2})
        waiter = asyncio.create_task(layer.receive("ch.one"))
        while not taken.is_set():
            await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        release.set()
        return [await layer.receive("ch.one"), await layer.receive("ch.one")]

    assert run(scenario()) == [{"type": "m", "n": 1}, {"type": "m", "n": 2}]


RECEIVER = """
import asyncio, json, sys
from infra.layers import SQLiteChannelLayer

async def main():
    layer = SQLiteChannelLayer(path=sys.argv[1], poll_interval=0.02)
    channel = await layer.new_channel()
    await layer.group_add("console.events", channel)
    print("ready", flush=True)
    message = await asyncio.wait_for(layer.receive(channel), timeout=30)
    print(json.dumps(message), flush=True)

asyncio.run(main())
"""


def test_a_group_message_crosses_processes(tmp_path):
    path = tmp_path / "shared" / "channels.sqlite3"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    receiver = subprocess.Popen(
        [sys.executable, "-c", RECEIVER, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO_ROOT,
    )
    try:
        assert receiver.stdout.readline().strip() == "ready"
        sender = SQLiteChannelLayer(path=path)
        started = time.monotonic()
        async_to_sync(sender.group_send)("console.events", {"type": "console.update", "payload": {"seq": 42}})
        out, err = receiver.communicate(timeout=30)
        assert receiver.returncode == 0, err
        assert out.strip() == '{"type": "console.update", "payload": {"seq": 42}}'
        assert time.monotonic() - started < 10
        assert receiver.pid != os.getpid()
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait()


# The channel layer's file is private.
def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_channel_layer_file_is_created_0600_in_a_0700_folder(tmp_path):
    layer = SQLiteChannelLayer(path=tmp_path / "var" / "channels.sqlite3", poll_interval=0.01)
    old = os.umask(0o022)
    try:
        asyncio.run(layer.send("test.channel", {"type": "hello"}))
    finally:
        os.umask(old)
        asyncio.run(layer.flush())
    assert mode(tmp_path / "var") == 0o700
    for path in (tmp_path / "var").iterdir():
        assert mode(path) == 0o600, path
