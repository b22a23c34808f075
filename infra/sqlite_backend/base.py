"""Django's SQLite backend, with writers that take turns fairly.

SQLite lets one writer at a time hold the database; the others wait in its busy handler, which
sleeps 1, 2, 5, 10, … then 100 ms between tries and wakes no one when the writer is done. A
process that writes again and again (the route loop draining a backlog, window after window)
finds the lock free at once each time, while writers asleep in the busy handler keep missing
the moments it is free: acceptances waited for seconds, past a webhook sender's timeout.

Here every write transaction (``BEGIN IMMEDIATE``, what every ``transaction.atomic()`` starts
under the project's settings) first takes an exclusive ``flock`` on a lock file beside the
database (``<database>.writers``), and gives it back when the transaction commits or rolls
back. A waiting writer looks again every 0.5 ms at first, then every 5 ms at most, so it sees
the lock free within 5 ms of its release, where the busy handler slept 100 ms: writers take
turns, and a waiting acceptance gets the database within about one transaction of the holder.
Once it has the lock file, SQLite's own lock is free or about to be (its holder has
committed). The wait is bounded by the busy timeout, after which it fails as SQLite would
(``database is locked``).

Threads of one process (the web server answers each request in a thread of its own) first
queue on a lock of the process for the same database, which wakes the next one as soon as it
is released, and only the thread at its head polls the lock file: requests of one server
took turns among themselves by polling before, sleeping up to 5 ms past a free lock while
others queued behind them. Read transactions (``BEGIN DEFERRED``, see
:mod:`infra.snapshots`) and writes outside a transaction take no turn; an in-memory
database has no lock file and no turns.
"""

from __future__ import annotations

import fcntl
import functools
import os
import threading
import time

from django.db.backends.sqlite3 import base
from django.db.utils import OperationalError

# A waiting writer asks again after this long at first, doubling up to the cap.
FIRST_RETRY_SECONDS = 0.0005
MAX_RETRY_SECONDS = 0.005
WRITE_MODES = ("IMMEDIATE", "EXCLUSIVE")


# The lock of this process for each lock file: its threads queue on it before the file's.
_PROCESS_TURNS: dict[str, threading.Lock] = {}
_PROCESS_TURNS_GUARD = threading.Lock()


def _process_turn(path: str) -> threading.Lock:
    with _PROCESS_TURNS_GUARD:
        return _PROCESS_TURNS.setdefault(path, threading.Lock())


class CursorWrapper(base.SQLiteCursorWrapper):
    """Django's cursor, remembering each statement's conversion to SQLite's ``?`` style: the
    route loop and acceptance run the same statements again and again, and Django converted
    each one with a regular expression on every run (a window's 500-key statements too)."""

    def convert_query(self, query, *, param_names=None):
        if param_names is None:
            return qmark_style(query)
        return super().convert_query(query, param_names=param_names)


@functools.lru_cache(maxsize=512)
def qmark_style(query: str) -> str:
    """``query`` with Django's ``%s`` placeholders written as SQLite's ``?``."""
    if "%%" not in query:
        # No escaped percent sign: every "%s" is a placeholder (what the expression finds), in
        # one pass of ``str.replace``. The expression took about a millisecond on a window's
        # INSERT of 500 rows, converted once per padded row count (routing.engine.writes).
        return query.replace("%s", "?")
    return base.FORMAT_QMARK_REGEX.sub("?", query).replace("%%", "%")


class DatabaseWrapper(base.DatabaseWrapper):
    """See the module: write transactions take turns on a lock file; statements' conversions
    are remembered (:class:`CursorWrapper`)."""

    def create_cursor(self, name=None):
        return self.connection.cursor(factory=CursorWrapper)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._turn_fd: int | None = None
        self._turn_held = False
        self._process_turn: threading.Lock | None = None

    # -- Django's hooks ---------------------------------------------------------------
    def _start_transaction_under_autocommit(self) -> None:
        if self.transaction_mode in WRITE_MODES:
            self._take_turn()
        try:
            super()._start_transaction_under_autocommit()
        except BaseException:
            self._give_turn()
            raise

    def _commit(self) -> None:
        try:
            super()._commit()
        finally:
            self._give_turn()

    def _rollback(self) -> None:
        try:
            super()._rollback()
        finally:
            self._give_turn()

    def _close(self) -> None:
        try:
            super()._close()
        finally:
            self._give_turn()
            if self._turn_fd is not None:
                os.close(self._turn_fd)
                self._turn_fd = None

    # -- turns ------------------------------------------------------------------------
    def _lock_path(self) -> str | None:
        name = str(self.settings_dict["NAME"])
        if self.is_in_memory_db() or name.startswith("file:"):
            return None
        return f"{name}.writers"

    def _take_turn(self) -> None:
        if self._turn_held:
            return
        if self._turn_fd is None:
            path = self._lock_path()
            if path is None:
                return
            self._turn_fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            self._process_turn = _process_turn(path)
        timeout = float(self.settings_dict["OPTIONS"].get("timeout", 5))
        deadline = time.monotonic() + timeout
        assert self._process_turn is not None
        if not self._process_turn.acquire(timeout=timeout):
            raise OperationalError("database is locked")
        try:
            delay = FIRST_RETRY_SECONDS
            while True:
                try:
                    fcntl.flock(self._turn_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise OperationalError("database is locked") from None
                time.sleep(delay)
                delay = min(delay * 2, MAX_RETRY_SECONDS)
        except BaseException:
            self._process_turn.release()
            raise
        self._turn_held = True

    def _give_turn(self) -> None:
        if self._turn_held and self._turn_fd is not None:
            fcntl.flock(self._turn_fd, fcntl.LOCK_UN)
            assert self._process_turn is not None
            self._process_turn.release()
        self._turn_held = False
