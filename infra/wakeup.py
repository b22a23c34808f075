"""Wake-ups between processes: a loop that waits for work is told when there is some.

A writer calls :func:`notify_on_commit` (or, on PostgreSQL, puts :func:`pg_notify_sql` in a
statement it runs anyway) inside its transaction; once it commits, every :class:`Listener` of
that channel on the same database wakes. A rolled-back transaction wakes no one.

- PostgreSQL: ``pg_notify(channel, '')`` in the writer's transaction (delivered on commit) and
  ``LISTEN channel`` on the listener's own autocommit connection.
- SQLite: after commit, one datagram to each listener's UNIX socket, in a folder of the var
  directory named after the channel and the database file (``var/wake/<channel>.<digest>/``).

Wake-ups are hints, never the only way work is found: a listener also wakes after its timeout
(the loops' poll interval), a lost or spurious wake-up costs at most one poll interval or one
empty pass, and a listener that cannot listen (a socket path too long, a broken connection)
just waits out its timeout.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import itertools
import logging
import os
import select
import socket
import threading
import time
from pathlib import Path

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction

from infra.private_files import private_directory

logger = logging.getLogger("conduit.wakeup")

# Accepted Events to route (causal.services, on acceptance; route_loop listens).
ACCEPTED = "conduit_accepted"
# A wait is cut into slices this long so that a stop request (a signal) is seen promptly.
STOP_CHECK_SECONDS = 0.25
# AF_UNIX paths are limited to 108 bytes on Linux (sun_path), the final NUL included.
MAX_SOCKET_PATH = 107
_names = itertools.count()
_sender_lock = threading.Lock()
_sender: socket.socket | None = None


def pg_notify_sql(channel: str) -> str:
    """A select-list item that notifies ``channel`` when the transaction it runs in commits."""
    return f"pg_notify('{channel}', '')"


def notify_on_commit(channel: str, *, using: str = DEFAULT_DB_ALIAS) -> None:
    """Wake ``channel``'s listeners once the current transaction commits (now, outside one)."""
    connection = connections[using]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {pg_notify_sql(channel)}")
        return
    if connection.in_atomic_block:
        # Once per transaction (a window may accept hundreds of Events). Django replaces its
        # list of commit hooks on every commit and every rollback, a savepoint's included, so
        # while it is the same list the hook registered into it is still there.
        registered = connection.__dict__.setdefault("conduit_wakeups", {})
        if registered.get(channel) is connection.run_on_commit:
            return
        registered[channel] = connection.run_on_commit
    transaction.on_commit(lambda: _send_local(channel, using), using=using)


def _local_folder(channel: str, using: str) -> Path:
    """The folder of ``channel``'s listener sockets for this database (one per database file,
    so two test runs or two var folders never wake each other)."""
    return _folder_for(channel, str(connections[using].settings_dict["NAME"]), str(settings.VAR_DIR))


@functools.lru_cache(maxsize=64)
def _folder_for(channel: str, name: str, var_dir: str) -> Path:
    # Every acceptance wakes: resolving the database's path each time cost more than sending.
    digest = hashlib.sha256(str(Path(name).resolve()).encode()).hexdigest()[:12]
    return Path(var_dir) / "wake" / f"{channel}.{digest}"


def _send_local(channel: str, using: str) -> None:
    global _sender
    try:
        entries = list(os.scandir(_local_folder(channel, using)))
    except FileNotFoundError:
        return  # no listener has ever run here
    with _sender_lock:
        if _sender is None:
            _sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            _sender.setblocking(False)
        for entry in entries:
            if not entry.name.endswith(".sock"):
                continue
            try:
                _sender.sendto(b"!", entry.path)
            except (BlockingIOError, InterruptedError):
                pass  # its queue is full: it has wake-ups pending already
            except OSError as exc:
                if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
                    # A listener that died without removing its socket; names are never reused.
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry.path)
                elif exc.errno not in (errno.ENOBUFS, errno.EAGAIN):
                    logger.warning("wakeup.send_failed", extra={"path": entry.path, "error": str(exc)})


class Listener:
    """Waits for ``channel``'s wake-ups on database ``using``, or a timeout.

    Start listening before the first look for work: a wake-up that arrives while the caller
    works stays pending, so the next :meth:`wait` returns at once and nothing is missed.
    """

    def __init__(self, channel: str, *, using: str = DEFAULT_DB_ALIAS) -> None:
        self.channel = channel
        self.using = using
        self.vendor = connections[using].vendor
        self._pg = None
        self._socket: socket.socket | None = None
        self._path: Path | None = None
        self.listening = self._listen()

    def wait(self, timeout: float, stop: threading.Event | None = None) -> bool:
        """Block until a wake-up, ``timeout`` seconds, or ``stop`` is set; ``True`` when woken.
        Consumes every wake-up pending, so one wait answers many acceptances."""
        deadline = time.monotonic() + timeout
        while True:
            if stop is not None and stop.is_set():
                return False
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            slice_ = min(remaining, STOP_CHECK_SECONDS)
            if not self.listening:
                self.listening = self._listen()
            if not self.listening:
                if stop is not None:
                    stop.wait(slice_)
                else:
                    time.sleep(slice_)
                continue
            if self._wait_once(slice_):
                return True

    def close(self) -> None:
        """Stop listening (removes this listener's socket)."""
        if self._pg is not None:
            self._pg.close()  # psycopg's close never raises, even on a broken connection
            self._pg = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        if self._path is not None:
            with contextlib.suppress(FileNotFoundError):
                self._path.unlink()
            self._path = None
        self.listening = False

    # -- the two mechanisms --------------------------------------------------------------
    def _listen(self) -> bool:
        try:
            return self._listen_pg() if self.vendor == "postgresql" else self._listen_local()
        except OSError as exc:
            logger.warning("wakeup.listen_failed", extra={"channel": self.channel, "error": str(exc)})
            self.close()
            return False

    def _listen_pg(self) -> bool:
        import psycopg

        params = connections[self.using].get_connection_params()
        params.pop("cursor_factory", None)
        params.pop("context", None)
        try:
            self._pg = psycopg.connect(**params, autocommit=True)
            self._pg.execute(f"LISTEN {self.channel}")
        except psycopg.Error as exc:
            logger.warning("wakeup.listen_failed", extra={"channel": self.channel, "error": str(exc)})
            self.close()
            return False
        return True

    def _listen_local(self) -> bool:
        folder = private_directory(_local_folder(self.channel, self.using))
        path = folder / f"{os.getpid()}-{next(_names)}.sock"
        if len(os.fsencode(path)) > MAX_SOCKET_PATH:
            logger.info("wakeup.path_too_long", extra={"path": str(path)})
            return False
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(str(path))
        sock.setblocking(False)
        self._socket, self._path = sock, path
        return True

    def _wait_once(self, timeout: float) -> bool:
        if self._pg is not None:
            return self._wait_pg(timeout)
        readable, _, _ = select.select([self._socket], [], [], timeout)
        if not readable:
            return False
        with contextlib.suppress(BlockingIOError):
            while self._socket.recv(64):
                pass
        return True

    def _wait_pg(self, timeout: float) -> bool:
        import psycopg

        try:
            woken = any(True for _ in self._pg.notifies(timeout=timeout, stop_after=1))
            if woken:
                # The rest of what is pending: one pass answers them all.
                for _ in self._pg.notifies(timeout=0, stop_after=1000):
                    pass
            return woken
        except psycopg.Error as exc:
            # The listening connection broke: say so, reconnect on the next wait, and treat it
            # as a wake-up (anything notified meanwhile is lost).
            logger.warning("wakeup.connection_lost", extra={"channel": self.channel, "error": str(exc)})
            self.close()
            return True
