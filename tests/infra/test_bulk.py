"""The router's set-based inserts (infra.bulk.bulk_insert): whatever the statement's form
(``INSERT … SELECT … FROM (VALUES …)`` on SQLite, one ``INSERT … SELECT … FROM UNNEST`` on PostgreSQL
with the columns every row shares as single values), each row is stored exactly as given, and
new keys come back in row order (R7)."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
from django.db import DataError, connection, transaction
from django.test.utils import CaptureQueriesContext

from infra.bulk import bulk_insert
from routing.models import RouteRecord
from tests.causal.factories import EventFactory
from tests.worklife.factories import WorkFactory
from worklife.models import Work

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)

RECORD_FIELDS = (
    "event",
    "work",
    "scope",
    "route",
    "policy",
    "reason",
    "refusals",
    "keys",
    "attempts",
    "decided_at",
)


def test_r7_window_insert_stores_shared_varying_null_and_json_values_as_given():
    events = EventFactory.create_batch(4)
    work = WorkFactory()
    later = NOW + timedelta(seconds=1)
    rows = [
        # event, work (NULL in one row), scope (shared), route, policy, reason, refusals
        # (JSON, shared by three rows), keys (JSON, each its own), attempts, decided_at
        [events[0].seq, work.pk, "acme", "prs", "queue", "", [], ["pr:1"], 0, NOW],
        [events[1].seq, None, "acme", "", "unmatched", "no route matched", [{"route": "prs"}], [], 0, NOW],
        [events[2].seq, work.pk, "acme", "prs", "queue", "tab\there, 'quoted'", [], ["pr:1", "é"], 2, later],
        [events[3].seq, work.pk, "acme", "prs", "queue", "", [], [{"nested": {"a": [1, None]}}], 0, NOW],
    ]

    with transaction.atomic():
        assert bulk_insert(RouteRecord, RECORD_FIELDS, [list(row) for row in rows]) == []

    stored = {r.event_id: r for r in RouteRecord.objects.filter(event__in=events)}
    assert len(stored) == 4
    for row in rows:
        record = stored[row[0]]
        assert [
            record.event_id,
            record.work_id,
            record.scope,
            record.route,
            record.policy,
            record.reason,
            record.refusals,
            record.keys,
            record.attempts,
            record.decided_at,
        ] == row
        # The columns not given take their fields' defaults.
        assert (record.binding, record.generation, record.disposition, record.error, record.decided_by) == (
            "",
            "",
            "routed",
            "",
            "",
        )


def test_r7_window_insert_returns_new_keys_in_row_order_even_when_every_column_is_shared():
    triggers = EventFactory.create_batch(3)
    fields = ("scope", "status", "binding", "trigger", "created_at", "updated_at")
    with transaction.atomic():
        ids = bulk_insert(
            Work,
            fields,
            [["acme", "ready", "agent", event.seq, NOW, NOW] for event in triggers],
            returning=True,
        )
        # Two rows alike in every column: still two rows, two keys.
        twins = bulk_insert(
            Work, fields, [["acme", "ready", "agent", None, NOW, NOW] for _ in range(2)], returning=True
        )

    assert [Work.objects.get(pk=pk).trigger_id for pk in ids] == [event.seq for event in triggers]
    assert len(set(twins)) == 2
    assert Work.objects.filter(pk__in=twins, trigger__isnull=True, binding="agent").count() == 2


def test_r7_window_insert_of_a_value_too_long_for_its_column():
    """The statement casts to each column's type without its length (``varchar``, not
    ``varchar(128)``), so the column itself still refuses a value too long on PostgreSQL;
    SQLite stores text of any length in a varchar column, through any statement."""
    event = EventFactory()
    row = [event.seq, None, "acme", "r" * 129, "queue", "", [], [], 0, NOW]
    if connection.vendor == "postgresql":
        with pytest.raises(DataError), transaction.atomic():
            bulk_insert(RouteRecord, RECORD_FIELDS, [row])
        assert not RouteRecord.objects.filter(event=event).exists()
    else:
        with transaction.atomic():
            bulk_insert(RouteRecord, RECORD_FIELDS, [row])
        assert RouteRecord.objects.get(event=event).route == "r" * 129


def test_r7_window_insert_of_a_json_value_every_row_shares():
    events = EventFactory.create_batch(2)
    refusals = [{"route": "prs", "reason": "type did not match"}]
    rows = [[event.seq, None, "acme", "", "unmatched", "", refusals, {"k": 1}, 0, NOW] for event in events]
    with transaction.atomic():
        bulk_insert(RouteRecord, RECORD_FIELDS, rows)
    assert [(r.refusals, r.keys) for r in RouteRecord.objects.filter(event__in=events)] == [
        (refusals, {"k": 1})
    ] * 2


def test_window_insert_stores_awkward_text_and_json_values_exactly_in_row_order():
    """On PostgreSQL the varying text and integer columns go as array literals and each JSON
    column as one JSON document (infra.queries.array_text, json_array_text): whatever
    a value holds (the literal's own quote and backslash, separators, braces, the word NULL,
    quotes, text beyond ASCII), it is stored as given, NULL stays NULL, and rows keep their order."""
    awkward = ['a"b', "back\\slash\\", "x,y", "{z}", " pad ", "NULL", "", "it's", '\\"', "é ✓ 日本"]
    events = EventFactory.create_batch(len(awkward))
    work = WorkFactory()
    rows = [
        [
            event.seq,
            work.pk if index % 3 else None,
            "acme",
            text,
            "queue",
            text * 2,
            [{"reason": text, "n": [index, None, 2.5]}] if index % 2 else [],
            [text] if index % 4 else {"nested": {text: None}},
            index,
            NOW,
        ]
        for index, (event, text) in enumerate(zip(events, awkward, strict=True))
    ]
    with transaction.atomic():
        bulk_insert(RouteRecord, RECORD_FIELDS, [list(row) for row in rows])
    stored = RouteRecord.objects.filter(event__in=events).order_by("pk")
    assert [
        [
            r.event_id,
            r.work_id,
            r.scope,
            r.route,
            r.policy,
            r.reason,
            r.refusals,
            r.keys,
            r.attempts,
            r.decided_at,
        ]
        for r in stored
    ] == rows


@contextmanager
def bound_variables_at_most(limit: int) -> Iterator[None]:
    """SQLite: the connection binds at most ``limit`` values a statement meanwhile."""
    if connection.vendor != "sqlite":
        yield
        return
    connection.ensure_connection()
    before = connection.connection.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, limit)
    try:
        yield
    finally:
        connection.connection.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, before)


def bound(model) -> int:
    """The values an inserted row binds on SQLite: its position, then every column but the
    generated key."""
    return 1 + sum(1 for field in model._meta.concrete_fields if not field.primary_key)


def test_window_insert_binds_as_many_rows_a_statement_as_the_variable_limit_allows():
    """SQLite: a window's rows go in multi-row statements, as many rows each as the
    connection's bound-variable limit allows (one statement for a window under the usual
    limit), and the keys come back in row order across statements. PostgreSQL: one statement
    whatever the number of rows."""
    records = EventFactory.create_batch(5)
    triggers = EventFactory.create_batch(5)
    rows = [
        [event.seq, None, "acme", f"r{n}", "queue", "", [], [f"k{n}"], n, NOW]
        for n, event in enumerate(records)
    ]
    work_fields = ("scope", "status", "binding", "trigger", "created_at", "updated_at")
    limit = 40
    with bound_variables_at_most(limit), CaptureQueriesContext(connection) as captured, transaction.atomic():
        bulk_insert(RouteRecord, RECORD_FIELDS, [list(row) for row in rows])
        ids = bulk_insert(
            Work, work_fields, [["acme", "ready", "agent", e.seq, NOW, NOW] for e in triggers], returning=True
        )

    inserts = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("INSERT")]
    if connection.vendor == "sqlite":
        per_record, per_work = limit // bound(RouteRecord), limit // bound(Work)
        assert per_record >= 1 and per_work >= 1
        assert len(inserts) == math.ceil(5 / per_record) + math.ceil(5 / per_work)
    else:
        assert len(inserts) == 2
    stored = RouteRecord.objects.filter(event__in=records).order_by("pk")
    assert [[r.event_id, r.route, r.keys, r.attempts] for r in stored] == [
        [row[0], row[3], row[7], row[8]] for row in rows
    ]
    assert [Work.objects.get(pk=pk).trigger_id for pk in ids] == [event.seq for event in triggers]


def test_window_inserts_of_nearby_row_counts_run_one_statement():
    """SQLite pads a statement's rows to a few lengths (infra.queries.padded_length)
    with rows it leaves out: windows of 9 and 10 rows run the same statement (prepared once,
    and few kept), and store exactly their own rows. PostgreSQL's statement has one shape."""
    events = EventFactory.create_batch(19)
    nine, ten = events[:9], events[9:]

    def rows(batch):
        return [[e.seq, None, "acme", "", "unmatched", "", [], [], 0, NOW] for e in batch]

    statements: list[str] = []

    def noted(execute, sql, params, many, context):
        statements.append(sql)  # as the cursor is given it, before its values are bound
        return execute(sql, params, many, context)

    with connection.execute_wrapper(noted), transaction.atomic():
        bulk_insert(RouteRecord, RECORD_FIELDS, rows(nine))
        bulk_insert(RouteRecord, RECORD_FIELDS, rows(ten))

    first, second = [sql for sql in statements if sql.startswith("INSERT")]
    assert first == second
    assert sorted(RouteRecord.objects.filter(event__in=events).values_list("event_id", flat=True)) == [
        e.seq for e in events
    ]
    assert RouteRecord.objects.count() == 19
