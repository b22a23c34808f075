"""The web process's reader of the live-update outbox: it turns committed changes into messages
to the websockets this process serves.

Every writer (a request, a loop, a command that exits at once) records its change in the
outbox in its own transaction (``infra.live``). A web process starts one :class:`LiveReader`
with its first websocket: a thread that reads the rows after the last position it read, woken
on commit (``LISTEN/NOTIFY`` on PostgreSQL, a datagram on SQLite) and at the latest every
``CONDUIT_LIVE_POLL_SECONDS`` whatever happens to wake-ups, and sends one ``console.update`` to
each group its websockets are in that a row names. A change committed while no page listened is
caught up by the page itself: a page carries the outbox position it was rendered at, and its
websocket asks on connect (:func:`changed_since`) whether a row after it names the page.

Positions are taken when a row is inserted, commits can come in another order: a position
missing below the last one read (a transaction still open, or rolled back) is looked for again
on each pass for :data:`HOLE_SECONDS`, so a late commit is still delivered.

The reader writes its position as a heartbeat (:data:`READERS_NAMESPACE`) every
:data:`BEAT_SECONDS`, so doctor can say a web process's live updates are behind, and prunes the
outbox past :data:`infra.live.LIVE_RETENTION` once a minute.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections import Counter, deque
from collections.abc import Iterable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from datetime import datetime, timedelta

from channels.layers import get_channel_layer
from django.conf import settings
from django.db import close_old_connections
from django.db.models import Min

from causal.clock import system_clock
from causal.services import kv_replace
from infra.identity import host_name
from infra.leases import lease_transaction
from infra.live import (
    LIVE_CHANNEL,
    LIVE_RETENTION,
    UPDATE_TYPE,
    live_backlog,
    live_changes_after,
    live_changes_prune,
    live_head,
    ws_path_at,
)
from infra.models import LiveChange
from infra.wakeup import Listener

logger = logging.getLogger("conduit.live")

# The KV namespace of the readers' heartbeats: one entry a web process, its position and time.
READERS_NAMESPACE = "core.serve.live"
# A reader writes its heartbeat this often (seconds).
BEAT_SECONDS = 5.0
# A reader prunes the outbox this often (seconds).
PRUNE_SECONDS = 60.0
# A position missing below the last one read is looked for this long (seconds), then given up
# (its transaction rolled back). A transaction open longer than this after writing its row is
# not waited for: its pages refresh on their next load.
HOLE_SECONDS = 60.0
# At most this many missing positions are looked for at once.
MAX_HOLES = 1000
# Rows a pass reads at most; a pass that reads as many goes on at once.
BATCH = 1000
# After a wake-up the reader waits this long (seconds) before it reads, so that the commits of a
# burst are read, and their groups told, in one pass.
GATHER_SECONDS = 0.1
# On PostgreSQL the reader reads at least this often (seconds) besides being woken by NOTIFY.
PG_POLL_SECONDS = 2.0
# Live updates are "behind" when a change committed this long ago has not been sent.
BEHIND = timedelta(seconds=15)


@dataclass(frozen=True, slots=True)
class ReaderState:
    """What the banner shows: whether the reader runs, its position, and how long the oldest
    change it has not sent has waited (seconds, 0 when none)."""

    running: bool
    position: int | None
    behind_seconds: float

    @property
    def behind(self) -> bool:
        return self.behind_seconds > BEHIND.total_seconds()


class LiveReader:
    """Reads the outbox on a thread of its own and tells this process's websockets (see the
    module's docstring). Consumers :meth:`subscribe` their groups on connect and
    :meth:`unsubscribe` on disconnect; the reader sends only to groups someone here is in."""

    def __init__(self, *, poll_seconds: float | None = None) -> None:
        self.poll_seconds = poll_seconds
        self._lock = threading.Lock()
        self._groups: Counter[str] = Counter()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.position: int | None = None
        self._holes: dict[int, float] = {}
        # Rows read late (a position below the last one read), with when, for changed_since().
        self._late: deque[tuple[float, frozenset[str]]] = deque(maxlen=1000)
        self.last_pass = 0.0
        self._next_beat = 0.0
        self._next_prune = 0.0
        # What it did, for tests and benchmarks: passes, rows read, messages sent.
        self.passes = 0
        self.rows = 0
        self.messages = 0

    # --- the consumers' side (the event loop) ---------------------------------------------

    def prepare(self) -> None:
        """Take the outbox's head as the position to read from, unless the reader has one (a
        websocket calls this, in a thread, before it subscribes: whatever commits after its
        connect is then after the reader's position, however late the thread starts)."""
        with self._lock:
            if self.position is None:
                self.position = live_head()

    def subscribe(self, groups: Iterable[str], loop: asyncio.AbstractEventLoop) -> None:
        """A websocket on ``loop`` joined ``groups``: send it their changes (starts the reader)."""
        with self._lock:
            self._groups.update(groups)
            self._loop = loop
            if self._thread is None or not self._thread.is_alive():
                self._stop.clear()
                self._thread = threading.Thread(target=self._run, name="live-reader", daemon=True)
                self._thread.start()

    def unsubscribe(self, groups: Iterable[str]) -> None:
        """A websocket left ``groups``."""
        with self._lock:
            self._groups.subtract(groups)
            self._groups = +self._groups

    def late_since(self, seconds: float, groups: Iterable[str]) -> bool:
        """Whether a row naming one of ``groups`` was read late within the last ``seconds``."""
        wanted = set(groups)
        since = time.monotonic() - seconds
        with self._lock:
            return any(at >= since and wanted & names for at, names in self._late)

    def state(self, *, now: datetime) -> ReaderState:
        """Whether the reader runs and how far behind it is: no query before this process's
        first websocket, one after (a reader whose thread died is behind as well)."""
        position = self.position
        running = self._thread is not None and self._thread.is_alive()
        if position is None:
            return ReaderState(running=running, position=None, behind_seconds=0.0)
        return ReaderState(
            running=running, position=position, behind_seconds=live_backlog(position).seconds(now)
        )

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread (tests; a web process's reader ends with the process)."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        self._thread = None
        self.position = None
        self._holes.clear()

    # --- the reader's thread -----------------------------------------------------------------

    def _run(self) -> None:
        listener = None
        try:
            listener = Listener(LIVE_CHANNEL)
            poll = self.poll_seconds if self.poll_seconds is not None else settings.CONDUIT_LIVE_POLL_SECONDS
            if listener.vendor == "postgresql":
                # LISTEN wakes the reader on every commit; the poll only bounds a broken one.
                poll = max(poll, PG_POLL_SECONDS)
            while not self._stop.is_set():
                try:
                    full = self.step()
                except Exception:  # noqa: BLE001 - the reader's loop: a pass fails, the next one tries again
                    logger.warning("live.read_failed", exc_info=True)
                    full = False
                if not full:
                    listener.wait(poll, self._stop)
                    # Commits that come meanwhile join the next pass: a stream of them costs at
                    # most 1 / GATHER_SECONDS passes (and messages a group) a second.
                    self._stop.wait(GATHER_SECONDS)
        finally:
            if listener is not None:
                listener.close()
            close_old_connections()

    def step(self) -> bool:
        """One pass: read the rows after the position (and the missing ones), send their groups'
        messages, write the heartbeat and prune when due. ``True`` when it read a full batch."""
        close_old_connections()
        mono = time.monotonic()
        if self.position is None:
            self.prepare()
        for hole, since in list(self._holes.items()):
            if mono - since > HOLE_SECONDS:
                del self._holes[hole]
        changes = live_changes_after(self.position, also=self._holes, limit=BATCH)
        groups: set[str] = set()
        last = self.position
        late = []
        for change in changes:
            if change.position <= self.position:
                self._holes.pop(change.position, None)
                late.append(change.groups)
            else:
                # The positions skipped are looked for again, the nearest first; below the
                # first row of an outbox that was empty there is nothing to wait for.
                if last > 0:
                    for missing in range(change.position - 1, last, -1):
                        if len(self._holes) >= MAX_HOLES:
                            break
                        self._holes.setdefault(missing, mono)
                last = change.position
            groups |= change.groups
        self.position = last
        with self._lock:
            for names in late:
                self._late.append((mono, names))
            wanted = sorted(groups & set(self._groups))
            loop = self._loop
        if wanted and loop is not None and not loop.is_closed():
            self._send(loop, wanted, last)
        self.passes += 1
        self.rows += len(changes)
        self.last_pass = mono
        if mono >= self._next_beat:
            self._next_beat = mono + BEAT_SECONDS
            self._beat()
        if mono >= self._next_prune:
            self._next_prune = mono + PRUNE_SECONDS
            live_changes_prune(before=system_clock() - LIVE_RETENTION)
        return len(changes) >= BATCH

    def _send(self, loop: asyncio.AbstractEventLoop, groups: list[str], position: int) -> None:
        async def send() -> int:
            layer = get_channel_layer()
            if layer is None:
                return 0
            for group in groups:
                await layer.group_send(
                    group, {"type": UPDATE_TYPE, "group": group, "payload": {"position": position}}
                )
            return len(groups)

        try:
            self.messages += asyncio.run_coroutine_threadsafe(send(), loop).result(timeout=10)
        except (FutureTimeout, RuntimeError):
            # The event loop is gone or stuck: these pages refresh on their next load.
            logger.warning("live.send_failed", extra={"groups": len(groups), "position": position})

    def _beat(self) -> None:
        with lease_transaction():
            kv_replace(
                namespace=READERS_NAMESPACE,
                key=f"{host_name()}:{os.getpid()}",
                value={"position": self.position, "subscribed": sum(self._groups.values())},
                clock=system_clock,
            )


# The reader of this process.
reader = LiveReader()

# A late row is remembered this long for the pages connecting after it (seconds): longer than a
# page takes to open its websocket after it is rendered.
LATE_SECONDS = 60.0


def page_position() -> int:
    """The outbox position a page rendered now is at: the reader's, when it runs here (no
    query), else the outbox's last position (one query)."""
    position = reader.position
    return position if position is not None else live_head()


def position_url(path: str) -> str:
    """A page's websocket ``path`` saying the position the page is rendered at."""
    return ws_path_at(path, page_position())


def changed_since(position: int, groups: Iterable[str]) -> bool:
    """Whether a page rendered at ``position`` and showing ``groups`` missed a change: a row
    after it naming one of them, the outbox pruned past it, or a row read late lately. Two
    queries."""
    wanted = frozenset(groups)
    first = LiveChange.objects.aggregate(first=Min("pk"))["first"]
    if first is not None and first > position + 1 and position > 0:
        return True
    changes = live_changes_after(position, limit=BATCH)
    if len(changes) >= BATCH or any(change.groups & wanted for change in changes):
        return True
    return reader.late_since(LATE_SECONDS, wanted)


@dataclass(frozen=True, slots=True)
class ReaderBeat:
    """A web process's last reader heartbeat: its position and when it was written."""

    process: str
    position: int
    at: datetime


def reader_beats(*, since: datetime, limit: int = 20) -> list[ReaderBeat]:
    """The readers' heartbeats written at ``since`` or later, newest first. One query."""
    from causal.selectors import kv_newest

    return [
        ReaderBeat(process=key, position=int(value.get("position") or 0), at=at)
        for key, value, at in kv_newest(READERS_NAMESPACE, since=since, limit=limit)
    ]


def readers_behind(*, now: datetime, fresh: timedelta) -> list[tuple[ReaderBeat, float]]:
    """The web processes whose reader (a heartbeat newer than ``fresh``) has not sent a change
    committed more than :data:`BEHIND` ago, with how long it has waited (seconds). One query a
    fresh reader, one more."""
    found = []
    for beat in reader_beats(since=now - fresh):
        # The heartbeat is at most BEAT_SECONDS old: a row is late only once it is older than that.
        waited = live_backlog(beat.position).seconds(now)
        if waited > BEHIND.total_seconds() + BEAT_SECONDS:
            found.append((beat, waited))
    return found
