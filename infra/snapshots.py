"""Read snapshots: many reads that see the database as of one moment, and write nothing.

A trace (and an impact preview, which runs a thousand of them) reads what routing reads and
rolls back whatever it did. It must neither block writers nor see them half-way:

- SQLite: the outermost block starts ``BEGIN DEFERRED`` rather than the configured
  ``BEGIN IMMEDIATE``. In WAL mode a deferred transaction that only reads holds a read snapshot
  from its first read and never takes the write lock, so acceptance and the route loop go on
  while a preview runs.
- PostgreSQL: the outermost block is ``REPEATABLE READ``: every statement in it sees the
  snapshot of its first one.

Inside another atomic block a read snapshot is a savepoint rolled back at the end (it sees
what the enclosing transaction sees). Whatever the block writes is rolled back.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import DEFAULT_DB_ALIAS, connections, transaction


@contextmanager
def read_snapshot(using: str = DEFAULT_DB_ALIAS) -> Iterator[None]:
    """A rolled-back atomic block whose reads all see one snapshot (see the module)."""
    connection = connections[using]
    outermost = not connection.in_atomic_block
    if outermost and connection.vendor == "sqlite":
        connection.ensure_connection()  # connecting sets the configured mode again
    mode = getattr(connection, "transaction_mode", None)
    if outermost and connection.vendor == "sqlite":
        connection.transaction_mode = "DEFERRED"
    try:
        with transaction.atomic(using=using):
            if outermost and connection.vendor == "sqlite":
                connection.transaction_mode = mode
            elif outermost and connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            yield
            transaction.set_rollback(True, using=using)
    finally:
        if outermost and connection.vendor == "sqlite":
            connection.transaction_mode = mode
