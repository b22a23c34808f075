"""What routing settles into Work, written set-based for a whole window inside the router's
commit: new Work, owned correlation keys, queued or injected input, intents for running
attempts, and the version bump of the Work a window touched.

Each function runs inside the caller's transaction (the router's commit) and takes plain
tuples, so the router never names a worklife column or state. The states are the models'
``TextChoices``, read once here as their values.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from datetime import datetime

from django.db import connection, connections

from infra.bulk import bulk_insert
from infra.live import work_changed_on_commit
from infra.queries import in_list_chunks
from worklife.flow import flow_inputs_arrived_in_tx
from worklife.models import (
    TERMINAL_STATUSES,
    CorrelationKey,
    InputKind,
    InputState,
    Intent,
    IntentState,
    Work,
    WorkInput,
    WorkStatus,
)

# Read once: a window writes these into every row.
_READY = WorkStatus.READY.value
_QUEUE = InputKind.QUEUE.value
_INPUT_PENDING = InputState.PENDING.value
_INTENT_PENDING = IntentState.PENDING.value

_WORK_COLUMNS = ("scope", "status", "binding", "trigger", "created_at", "updated_at")
_KEY_COLUMNS = ("scope", "key", "work", "attached_by", "attached_at")
_INPUT_COLUMNS = ("work", "event", "seq", "binding", "kind", "state", "attempt", "created_at", "priority")
_INTENT_COLUMNS = ("work", "attempt", "lease_epoch", "event", "kind", "state", "created_at")


def works_start_in_tx(starts: Sequence[tuple[str, str, int]], *, now: datetime) -> list[int]:
    """Start a ready Work for each ``(scope, binding, trigger seq)``; returns their ids, in
    order."""
    ids = bulk_insert(
        Work,
        _WORK_COLUMNS,
        [[scope, _READY, binding, seq, now, now] for scope, binding, seq in starts],
        returning=True,
    )
    work_changed_on_commit(ids)
    return ids


def keys_attach_in_tx(keys: Iterable[Sequence], *, now: datetime) -> None:
    """Attach each ``(scope, key, work id, attaching Event's seq)`` to its Work (R25). A key
    another Work owns violates the table's unique constraint: the caller's transaction fails."""
    bulk_insert(
        CorrelationKey, _KEY_COLUMNS, [[scope, key, work, seq, now] for scope, key, work, seq in keys]
    )


def inputs_add_in_tx(inputs: Iterable[Sequence], *, now: datetime) -> None:
    """Add each ``(work id, Event seq, binding, kind, attempt id[, priority])`` as pending input
    of its Work (R46): kind ``queue`` ("" reads as queue) or an intent's kind for an Event a
    running attempt is told about (``attempt id`` that attempt's); ``priority`` is its route's
    (0 when left out), which raises the Work's while the input is pending. A Work batching its input is looked
    at again by the next claim (``worklife.flow``: the new input may fill its batch)."""
    rows = [
        [
            work,
            seq,
            seq,
            binding,
            kind or _QUEUE,
            _INPUT_PENDING,
            attempt,
            now,
            priority[0] if priority else 0,
        ]
        for work, seq, binding, kind, attempt, *priority in inputs
    ]
    bulk_insert(WorkInput, _INPUT_COLUMNS, rows)
    if rows:
        flow_inputs_arrived_in_tx(sorted({row[0] for row in rows}))


def intents_record_in_tx(intents: Iterable[Sequence], *, now: datetime) -> None:
    """Record each ``(work id, attempt id, lease epoch, Event seq, kind)`` as a pending
    inject or interrupt intent for that running attempt (R33)."""
    bulk_insert(
        Intent,
        _INTENT_COLUMNS,
        [
            [work, attempt, epoch, seq, kind, _INTENT_PENDING, now]
            for work, attempt, epoch, seq, kind in intents
        ],
    )


def works_touch_in_tx(work_ids: set[int], now: datetime) -> None:
    """``Work.objects.filter(pk__in=work_ids).exclude(status__in=TERMINAL_STATUSES)
    .update(version=F("version") + 1, updated_at=now)``, through a statement written once per
    padded number of Works, in chunks (every routed window touches Work). Terminal Work is never
    touched (R49), even one another process ended since the router read it."""
    updated_at = Work._meta.get_field("updated_at").get_db_prep_save(now, connection)
    terminal = sorted(str(status) for status in TERMINAL_STATUSES)
    for keys, params in in_list_chunks(connection, sorted(work_ids)):
        with connection.cursor() as cursor:
            cursor.execute(_touch_works_sql(connection.alias, keys), [updated_at, *params, *terminal])
    # The Work list shows when each Work last changed: its open pages hear of the window.
    work_changed_on_commit(work_ids)


@functools.lru_cache(maxsize=64)
def _touch_works_sql(alias: str, keys: str) -> str:
    quote = connections[alias].ops.quote_name
    meta = Work._meta
    version, updated_at, status = (
        quote(meta.get_field(name).column) for name in ("version", "updated_at", "status")
    )
    return (
        f"UPDATE {quote(meta.db_table)} SET {version} = {version} + 1, {updated_at} = %s "
        f"WHERE {quote(meta.pk.column)} IN {keys} "
        f"AND NOT ({status} IN ({', '.join(['%s'] * len(TERMINAL_STATUSES))}))"
    )
