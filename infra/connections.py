"""Connection hygiene between a long-running loop's passes."""

from __future__ import annotations

from django.db import close_old_connections, connection


def connections_refresh() -> None:
    """Drop connections past their age or broken, between passes (never inside a transaction
    the caller holds, as when a test or a wrapper runs the loop)."""
    if not connection.in_atomic_block:
        close_old_connections()
