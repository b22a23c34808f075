"""A channels layer backed by a SQLite file, for the embedded default (no Redis).

The web process (daphne) and the router process (``route_loop``) are different processes,
so channels' in-memory layer cannot carry a message from one to the other. This layer keeps
messages and group memberships in a small SQLite file both processes open:

- the file is opened with the ``sqlite3`` module, not the Django ORM (it is not the
  project's database and must not join its transactions), in WAL mode with a busy timeout,
  so readers never block the writer and writers wait for each other briefly;
- every call runs in a worker thread (``asyncio.to_thread``): the event loop never blocks
  on the file;
- ``receive()`` polls its channel every ``poll_interval`` seconds (a cheap indexed read;
  the write transaction that takes the message runs only when one is there);
- ``capacity`` (and ``channel_capacity`` patterns) bound each channel: ``send()`` raises
  ``ChannelFull``, ``group_send()`` skips a full channel, as the Redis layer does;
- ``expiry`` drops messages nobody received in time, and a channel with an expired message
  leaves every group (its consumer is gone); ``group_expiry`` ends group memberships.

Messages cross processes as JSON; ``bytes`` values (websocket frames) are kept as bytes.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import secrets
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from channels.exceptions import ChannelFull
from channels.layers import BaseChannelLayer

from infra.private_files import private_file

logger = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS channel_message (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    channel TEXT NOT NULL,
    body TEXT NOT NULL,
    expires REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS channel_message_channel_idx ON channel_message (channel, id);
CREATE INDEX IF NOT EXISTS channel_message_expires_idx ON channel_message (expires);
CREATE TABLE IF NOT EXISTS channel_group (
    grp TEXT NOT NULL,
    channel TEXT NOT NULL,
    joined REAL NOT NULL,
    PRIMARY KEY (grp, channel)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS channel_group_channel_idx ON channel_group (channel);
"""

_BYTES_TAG = "__bytes__"
# ``occupied_groups`` asks about at most this many groups by name; past it, it reads every live
# membership (one a page's group, few) and keeps the groups asked about.
OCCUPIED_LOOKUP_MAX = 64


def encode_message(message: dict[str, Any]) -> str:
    """``message`` as JSON text; ``bytes`` values are tagged so they come back as bytes.

    Raises ``TypeError`` naming the offending value for anything an ASGI message may not
    carry (ASGI messages hold str, bytes, int, float, bool, None, lists and dicts).
    """

    def default(value: Any) -> Any:
        if isinstance(value, bytes | bytearray):
            return {_BYTES_TAG: base64.b64encode(bytes(value)).decode("ascii")}
        raise TypeError(f"message: a {type(value).__name__} value cannot cross the channel layer")

    return json.dumps(message, default=default, separators=(",", ":"), ensure_ascii=False)


def decode_message(body: str) -> dict[str, Any]:
    """The message :func:`encode_message` encoded."""

    def hook(obj: dict[str, Any]) -> Any:
        if len(obj) == 1 and _BYTES_TAG in obj:
            return base64.b64decode(obj[_BYTES_TAG])
        return obj

    return json.loads(body, object_hook=hook)


@dataclass(frozen=True, slots=True)
class _Row:
    id: int
    channel: str
    body: str
    expires: float


class SQLiteChannelLayer(BaseChannelLayer):
    """A channels layer in a SQLite file shared by the processes of one installation.

    ``CHANNEL_LAYERS = {"default": {"BACKEND": "infra.layers.SQLiteChannelLayer",
    "CONFIG": {"path": ".../channels.sqlite3"}}}``. Options: ``expiry`` (seconds a message
    waits, 60), ``group_expiry`` (seconds a membership lasts, 86400), ``capacity`` (messages a
    channel holds, 100), ``channel_capacity`` (glob or regex → capacity), ``poll_interval``
    (seconds between polls in ``receive``, 0.05), ``busy_timeout`` (seconds a write waits
    for another writer, 5) and ``clock`` (seconds since the epoch; tests inject one).
    """

    extensions = ["groups", "flush"]

    def __init__(
        self,
        path: str | os.PathLike[str],
        expiry: float = 60,
        group_expiry: float = 86400,
        capacity: int = 100,
        channel_capacity: dict | None = None,
        poll_interval: float = 0.05,
        busy_timeout: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(expiry=expiry, capacity=capacity, channel_capacity=channel_capacity)
        if not path:
            raise ValueError("path: the SQLite channel layer needs a file path")
        if poll_interval <= 0:
            raise ValueError("poll_interval: must be a positive number of seconds")
        self.channel_capacity = self.compile_capacities(channel_capacity or {})
        self.path = os.fspath(path)
        self.group_expiry = group_expiry
        self.poll_interval = poll_interval
        self.busy_timeout = busy_timeout
        self.clock = clock
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._schema_ready = False
        # Polls whose receive() was cancelled, by channel, oldest first (see receive()).
        self._orphans: dict[str, deque[asyncio.Future]] = {}

    # --- connections ---------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        """This thread's connection (one per thread; created with the schema on first use)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and getattr(self._local, "pid", None) == os.getpid():
            return conn
        # Messages carry rendered Events: the file is its owner's only (0600 in a 0700 folder).
        private_file(self.path)
        # Autocommit mode: transactions are explicit (BEGIN IMMEDIATE) below.
        conn = sqlite3.connect(
            self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False
        )
        conn.execute("PRAGMA journal_mode=WAL")
        # Channel messages are ephemeral: losing the last ones on power loss is harmless.
        conn.execute("PRAGMA synchronous=NORMAL")
        with self._lock:
            if not self._schema_ready:
                conn.executescript(SCHEMA)
                self._schema_ready = True
            self._connections.append(conn)
        self._local.conn = conn
        self._local.pid = os.getpid()
        return conn

    def _write(self, operation: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run ``operation`` in one ``BEGIN IMMEDIATE`` transaction (committed unless it raises)."""
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = operation(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return result

    def _expire_in_tx(
        self, conn: sqlite3.Connection, now: float, channels: Iterable[str] | None = None
    ) -> None:
        """Drop expired messages (of ``channels``, or all); their channels leave every group,
        as a channel whose messages expire has no consumer any more. End old memberships."""
        if channels is None:
            conn.execute(
                "DELETE FROM channel_group WHERE channel IN"
                " (SELECT DISTINCT channel FROM channel_message WHERE expires < ?)",
                (now,),
            )
            conn.execute("DELETE FROM channel_message WHERE expires < ?", (now,))
        else:
            for channel in channels:
                expired = conn.execute(
                    "DELETE FROM channel_message WHERE channel = ? AND expires < ?", (channel, now)
                ).rowcount
                if expired:
                    conn.execute("DELETE FROM channel_group WHERE channel = ?", (channel,))
        conn.execute("DELETE FROM channel_group WHERE joined < ?", (now - self.group_expiry,))

    # --- blocking operations (run in worker threads) ------------------------------------

    def _send_sync(self, channel: str, body: str) -> None:
        capacity = self.get_capacity(channel)

        def operation(conn: sqlite3.Connection) -> None:
            now = self.clock()
            self._expire_in_tx(conn, now, [channel])
            (count,) = conn.execute(
                "SELECT COUNT(*) FROM channel_message WHERE channel = ?", (channel,)
            ).fetchone()
            if count >= capacity:
                raise ChannelFull(channel)
            conn.execute(
                "INSERT INTO channel_message (channel, body, expires) VALUES (?, ?, ?)",
                (channel, body, now + self.expiry),
            )

        self._write(operation)

    def _pop_sync(self, channel: str) -> _Row | None:
        conn = self._connection()
        # A cheap read first (WAL readers never wait): write only when a message is there.
        if (
            conn.execute("SELECT 1 FROM channel_message WHERE channel = ? LIMIT 1", (channel,)).fetchone()
            is None
        ):
            return None

        def operation(conn: sqlite3.Connection) -> _Row | None:
            now = self.clock()
            self._expire_in_tx(conn, now, [channel])
            row = conn.execute(
                "SELECT id, channel, body, expires FROM channel_message WHERE channel = ? ORDER BY id LIMIT 1",
                (channel,),
            ).fetchone()
            if row is None:
                return None
            conn.execute("DELETE FROM channel_message WHERE id = ?", (row[0],))
            return _Row(*row)

        return self._write(operation)

    def _group_add_sync(self, group: str, channel: str) -> None:
        self._write(
            lambda conn: conn.execute(
                "INSERT OR REPLACE INTO channel_group (grp, channel, joined) VALUES (?, ?, ?)",
                (group, channel, self.clock()),
            )
        )

    def _group_discard_sync(self, group: str, channel: str) -> None:
        self._write(
            lambda conn: conn.execute(
                "DELETE FROM channel_group WHERE grp = ? AND channel = ?", (group, channel)
            )
        )

    def _group_send_sync(self, group: str, body: str) -> int:
        # A cheap read first (WAL readers never wait): a group nobody is in costs no write.
        if (
            self._connection()
            .execute(
                "SELECT 1 FROM channel_group WHERE grp = ? AND joined >= ? LIMIT 1",
                (group, self.clock() - self.group_expiry),
            )
            .fetchone()
            is None
        ):
            return 0

        def operation(conn: sqlite3.Connection) -> int:
            now = self.clock()
            self._expire_in_tx(conn, now)
            members = [
                channel
                for (channel,) in conn.execute("SELECT channel FROM channel_group WHERE grp = ?", (group,))
            ]
            if not members:
                return 0
            placeholders = ",".join("?" * len(members))
            counts = dict(
                conn.execute(
                    "SELECT channel, COUNT(*) FROM channel_message"
                    f" WHERE channel IN ({placeholders}) GROUP BY channel",
                    members,
                ).fetchall()
            )
            delivered = [
                (channel, body, now + self.expiry)
                for channel in members
                # A full channel misses this message (as with the Redis layer): a group
                # send never fails because one member is slow.
                if counts.get(channel, 0) < self.get_capacity(channel)
            ]
            conn.executemany(
                "INSERT INTO channel_message (channel, body, expires) VALUES (?, ?, ?)", delivered
            )
            return len(delivered)

        return self._write(operation)

    def _occupied_sync(self, groups: list[str]) -> set[str]:
        conn = self._connection()
        since = self.clock() - self.group_expiry
        if len(groups) > OCCUPIED_LOOKUP_MAX:
            # A route window asks about hundreds of groups, of which the open pages are a few:
            # reading every live membership and keeping the groups asked about cost a tenth
            # of binding them all (0.5 → 0.04 ms for 750).
            wanted = set(groups)
            return {
                grp
                for (grp,) in conn.execute(
                    "SELECT DISTINCT grp FROM channel_group WHERE joined >= ?", [since]
                )
                if grp in wanted
            }
        placeholders = ",".join("?" * len(groups))
        return {
            grp
            for (grp,) in conn.execute(
                f"SELECT DISTINCT grp FROM channel_group WHERE joined >= ? AND grp IN ({placeholders})",
                [since, *groups],
            )
        }

    def _flush_sync(self) -> None:
        def operation(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM channel_message")
            conn.execute("DELETE FROM channel_group")

        self._write(operation)

    # --- the channel layer API --------------------------------------------------------------

    async def send(self, channel: str, message: dict[str, Any]) -> None:
        """Put ``message`` on ``channel``; ``ChannelFull`` when it holds ``capacity`` messages."""
        if not isinstance(message, dict):
            raise TypeError(f"message: expected a dict, got {type(message).__name__}")
        self.require_valid_channel_name(channel)
        body = encode_message(message)
        await asyncio.to_thread(self._send_sync, channel, body)

    async def receive(self, channel: str) -> dict[str, Any]:
        """The next message on ``channel``, waiting (polling) until one arrives.

        Cancellation-safe: a poll runs in a thread that cannot be interrupted, so when the
        caller is cancelled meanwhile the poll is kept, and the next ``receive()`` on the
        channel takes its message first: nothing is lost or reordered.
        """
        self.require_valid_channel_name(channel)
        while True:
            poll = self._take_orphan(channel)
            if poll is None:
                poll = asyncio.ensure_future(asyncio.to_thread(self._pop_sync, channel))
            try:
                row = poll.result() if poll.done() else await asyncio.shield(poll)
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc):
                    raise
                # Another writer held the file past the busy timeout: poll again later.
                row = None
            except asyncio.CancelledError:
                self._orphans.setdefault(channel, deque()).appendleft(poll)
                poll.add_done_callback(lambda done: self._forget_empty(channel, done))
                raise
            if row is not None and row.expires >= self.clock():
                return decode_message(row.body)
            if row is None:
                await asyncio.sleep(self.poll_interval)

    def _take_orphan(self, channel: str) -> asyncio.Future | None:
        """The oldest kept poll of ``channel`` this event loop can use, if any."""
        orphans = self._orphans.get(channel)
        while orphans:
            poll = orphans.popleft()
            if poll.cancelled():
                continue
            # A finished poll's result is readable from any loop; a running one only from its own.
            if poll.done() or poll.get_loop() is asyncio.get_running_loop():
                return poll
        return None

    def _forget_empty(self, channel: str, poll: asyncio.Future) -> None:
        """Drop a kept poll that found nothing (or failed): only messages are worth keeping."""
        if poll.cancelled() or poll.exception() is not None or poll.result() is None:
            orphans = self._orphans.get(channel)
            if orphans is not None and poll in orphans:
                orphans.remove(poll)
                if not orphans:
                    del self._orphans[channel]
        # Messages a dead consumer's poll took expire like any other.
        now = self.clock()
        for name, polls in list(self._orphans.items()):
            for kept in list(polls):
                if kept.done() and not kept.cancelled() and kept.exception() is None:
                    row = kept.result()
                    if row is not None and row.expires < now:
                        polls.remove(kept)
            if not polls:
                del self._orphans[name]

    async def new_channel(self, prefix: str = "specific") -> str:
        """A new unique channel name for a consumer of this process."""
        return f"{prefix.rstrip('.')}.sqlite!{secrets.token_hex(12)}"

    async def group_add(self, group: str, channel: str) -> None:
        """Add ``channel`` to ``group`` (renewing its membership if already there)."""
        self.require_valid_group_name(group)
        self.require_valid_channel_name(channel)
        await asyncio.to_thread(self._group_add_sync, group, channel)

    async def group_discard(self, group: str, channel: str) -> None:
        """Remove ``channel`` from ``group`` (nothing happens when it is not a member)."""
        self.require_valid_group_name(group)
        self.require_valid_channel_name(channel)
        await asyncio.to_thread(self._group_discard_sync, group, channel)

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        """Put ``message`` on every channel of ``group`` that is not full."""
        if not isinstance(message, dict):
            raise TypeError(f"message: expected a dict, got {type(message).__name__}")
        self.require_valid_group_name(group)
        body = encode_message(message)
        await asyncio.to_thread(self._group_send_sync, group, body)

    async def occupied_groups(self, groups: Iterable[str]) -> set[str]:
        """The groups among ``groups`` that have a member now: one read, no write (a sender
        tells only open pages)."""
        return await asyncio.to_thread(self._occupied_sync, list(groups))

    async def flush(self) -> None:
        """Drop every message and every group membership."""
        await asyncio.to_thread(self._flush_sync)

    async def close(self) -> None:
        """Close this layer's connections (a later call opens new ones)."""
        with self._lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()
        self._local = threading.local()
