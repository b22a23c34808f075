"""Lease transactions: writes that need not survive a power loss, committed without waiting
for the disk.

A route loop's claim on its window (``claimed_by``/``claimed_until``) and its heartbeat are
leases: they lapse on their own, and correctness never rests on them (the route commit
revalidates everything). Losing the last of them to a power cut costs at most a lease
waited out. Committed durably, each costs a flush of the log to disk: with windows of one
Event (a loop woken by each acceptance) the claim doubled the flushes per routed Event, and on
SQLite each flush holds the one write turn that acceptances wait for.

- SQLite (WAL): the outermost block commits with ``synchronous=NORMAL`` (no fsync at commit;
  the next durable commit's fsync writes these frames too, the log being sequential), then the
  connection's configured level is restored.
- PostgreSQL: ``SET LOCAL synchronous_commit = off`` for the transaction (no wait for the WAL
  flush; the WAL writer flushes it within moments), which is durable for everything else.

Inside another atomic block a lease is part of the enclosing transaction, durable as it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import DEFAULT_DB_ALIAS, connections, transaction


@contextmanager
def lease_transaction(using: str = DEFAULT_DB_ALIAS) -> Iterator[None]:
    """``transaction.atomic()`` whose commit does not wait for the disk (see the module)."""
    connection = connections[using]
    if connection.in_atomic_block:
        with transaction.atomic(using=using):
            yield
        return
    if connection.vendor == "postgresql":
        with transaction.atomic(using=using):
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL synchronous_commit = off")
            yield
        return
    if connection.vendor != "sqlite":
        with transaction.atomic(using=using):
            yield
        return
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA synchronous")
        (level,) = cursor.fetchone()
        cursor.execute("PRAGMA synchronous=NORMAL")
    try:
        with transaction.atomic(using=using):
            yield
    finally:
        if connection.connection is not None:
            with connection.cursor() as cursor:
                cursor.execute(f"PRAGMA synchronous={int(level)}")
