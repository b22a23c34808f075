"""Connection hygiene for long-running loops: between passes, and as they start."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.db import OperationalError, close_old_connections, connection

logger = logging.getLogger("conduit.db")

# How long a starting loop waits for the database: a server restarting takes a few seconds
# (bench/pg_restart.py: 0.4-2.6 s). It stays below the 10 s within which serve's supervisor takes
# a child's exit for one that cannot start (an unreachable database: a bad setting).
START_WAIT_SECONDS = 5.0
# Between two tries to connect.
RETRY_SECONDS = 0.5


def connections_refresh() -> None:
    """Drop connections past their age or broken, between passes (never inside a transaction
    the caller holds, as when a test or a wrapper runs the loop)."""
    if not connection.in_atomic_block:
        close_old_connections()


def database_wait(
    *,
    seconds: float = START_WAIT_SECONDS,
    wait: Callable[[float], object] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Wait up to ``seconds`` for the database to take a connection, as a loop starts.

    A server that is restarting does not end the loop; one still unreachable after ``seconds``
    raises its ``OperationalError`` (the loop exits, and its supervisor starts it again or,
    at once at every start, takes it for a bad setting). Running loops reconnect at their next
    pass without this (``connections_refresh``)."""
    deadline = clock() + seconds
    while True:
        try:
            connection.ensure_connection()
            return
        except OperationalError as exc:
            connection.close()
            if clock() >= deadline:
                raise
            logger.warning("database.unavailable", extra={"error": str(exc).strip()[:300]})
            wait(RETRY_SECONDS)
