"""Set-based inserts: many rows of one model in as few statements as the database allows,
for the hot paths that write a whole window at once (the router's commit)."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from typing import Any

from django.db import connection, connections

from infra.frozen import frozen
from infra.queries import (
    JsonPreparer,
    array_cast,
    dumps_json_text,
    padded_length,
    shared_columns,
    unnest_select,
)


def bulk_insert(
    model: type, fields: Sequence[str], rows: list[list], *, returning: bool = False
) -> list[int]:
    """Insert rows (values in ``fields`` order; every other column takes its field's
    default) with set-based statements; returns the new primary keys, in row order, when
    ``returning`` (as Django's own ``bulk_create`` relies on). JSON and datetime values are
    prepared by their fields for the backend in use.

    SQLite: ``INSERT … SELECT … FROM (VALUES …)`` statements (``RETURNING`` the keys when
    asked), as many rows each as the connection's bound-variable limit allows: a window's
    rows in one statement. Its ``VALUES`` list is padded to a few lengths
    (:func:`infra.queries.padded_length`) with rows that the ``SELECT`` leaves out, so
    a window of any size finds its statement prepared, and the statements kept (SQLite's
    prepared statements, their conversions to its placeholders) stay few. An
    ``executemany`` bound, ran and reset its statement row by row, and cost SQLite about a
    fifth more instructions (``bench/route_instructions.py``). PostgreSQL: one
    ``INSERT … SELECT … FROM UNNEST(…)`` whose parameters are the varying columns as arrays
    and the columns every row shares as single values (:func:`_insert_columns`)."""
    if not rows:
        return []
    plan = _insert_plan(connection.alias, model, tuple(fields))
    default_values = plan.defaults() if callable(plan.defaults) else plan.defaults
    if plan.types is not None:
        return _insert_columns(plan, [[*row, *default_values] for row in rows], returning=returning)
    # Prepared column by column (the rows taken apart and put together again by zip, in C):
    # a window's time is one object every row shares, prepared once.
    count = len(rows)
    columns: list[Sequence[Any]] = [*zip(*rows, strict=True), *([value] * count for value in default_values)]
    for index, prepare in _json_preparers(plan):
        columns[index] = [None if value is None else prepare(value) for value in columns[index]]
    for index, column in plan.time_columns:
        columns[index] = _prepared_times(column, columns[index])
    # Each row leads with its position; the statement's padding rows have none (NULL).
    values = list(zip(range(count), *columns, strict=True))
    bound = plan.width + 1
    chunk = max(1, connection.features.max_query_params // bound)
    ids: list[int] = []
    with connection.cursor() as cursor:
        for start in range(0, count, chunk):
            part = values[start : start + chunk]
            rows = min(padded_length(len(part)), chunk)
            params = list(itertools.chain.from_iterable(part))
            params.extend(itertools.repeat(None, (rows - len(part)) * bound))
            cursor.execute(_padded_insert_sql(plan.head, plan.width, rows, plan.pk_column, returning), params)
            if returning:
                ids.extend(row[0] for row in cursor.fetchall())
    return ids


@functools.lru_cache(maxsize=256)
def _padded_insert_sql(head: str, width: int, rows: int, pk_column: str, returning: bool) -> str:
    """SQLite: ``head`` inserting the rows of a ``VALUES`` list of ``rows`` rows, each its
    position then ``width`` values, but those without a position (the padding). The keys
    come back in the rows' order when ``returning``."""
    row = "({})".format(", ".join(["%s"] * (width + 1)))
    columns = ", ".join(f"column{index}" for index in range(2, width + 2))
    sql = f"{head} SELECT {columns} FROM (VALUES {', '.join([row] * rows)}) WHERE column1 IS NOT NULL"
    return f"{sql} ORDER BY column1 RETURNING {pk_column}" if returning else sql


def _prepared_times(column, values: Sequence[Any]) -> list[Any]:
    """``values`` of a datetime column prepared by its field for the backend, each distinct
    object once (a window's rows share its time)."""
    first = values[0]
    if all(value is first for value in values):
        return [column.get_db_prep_save(first, connection)] * len(values)
    prepared: dict[int, Any] = {}
    for value in values:
        if id(value) not in prepared:  # the values are alive in ``values``: ids are unique
            prepared[id(value)] = column.get_db_prep_save(value, connection)
    return [prepared[id(value)] for value in values]


def _insert_columns(plan: _InsertPlan, rows: list[list], *, returning: bool) -> list[int]:
    """PostgreSQL: ``rows`` in one ``INSERT … SELECT … FROM UNNEST(…)``
    (:func:`infra.queries.unnest_select`). A column whose value every row shares (a
    window's time, scope, generation, state) is one parameter, prepared once; the others are
    arrays, each value prepared by its field."""
    prepare: dict[int, Callable[[Any], Any]] = dict(_json_preparers(plan))
    for index, column in plan.time_columns:
        prepare[index] = functools.partial(column.get_db_prep_save, connection=connection)
    columns = list(zip(*rows, strict=True))
    shared = shared_columns(columns)
    prepared: list[Sequence[Any]] = []
    for index, (values, same) in enumerate(zip(columns, shared, strict=True)):
        convert = prepare.get(index)
        if convert is None:
            prepared.append(values)
        elif same:
            prepared.append([None if values[0] is None else convert(values[0])])
        else:
            prepared.append([None if v is None else convert(v) for v in values])
    select, params = unnest_select(plan.types, prepared, shared)
    with connection.cursor() as cursor:
        if not returning:
            cursor.execute(f"{plan.head} {select}", params)
            return []
        cursor.execute(f"{plan.head} {select} RETURNING {plan.pk_column}", params)
        return [row[0] for row in cursor.fetchall()]


def _json_preparers(plan: _InsertPlan) -> list[tuple[int, JsonPreparer]]:
    """Each JSON column's preparer for one statement (its encoder, the backend's adapter)."""
    adapt = connection.ops.adapt_json_value
    return [
        (
            index,
            JsonPreparer(
                functools.partial(adapt, encoder=encoder),
                strings_as_text=dumps_json_text(connection.alias, encoder),
            ),
        )
        for index, encoder in plan.json_columns
    ]


@frozen
class _InsertPlan:
    head: str
    width: int  # columns a row
    defaults: Any  # a tuple of constant defaults, or a function making them per call
    json_columns: tuple[tuple[int, Any], ...]
    time_columns: tuple[tuple[int, Any], ...]
    pk_column: str
    types: tuple[str, ...] | None  # PostgreSQL: each column's type for its cast


@functools.lru_cache(maxsize=64)
def _insert_plan(alias: str, model: type, fields: tuple[str, ...]) -> _InsertPlan:
    """What :func:`bulk_insert` needs of a model's columns, worked out once per model and fields:
    the statement's head, the values of the columns not given (their
    constant defaults, or a function making them per call when one is made by a callable),
    the JSON columns with their encoders, the datetime columns, the quoted primary key and,
    on PostgreSQL, each column's type."""
    meta = model._meta
    quote = connections[alias].ops.quote_name
    given = [meta.get_field(name) for name in fields]
    defaults = [f for f in meta.concrete_fields if not f.primary_key and f not in given]
    columns = given + defaults
    if any(f.has_default() and callable(f.default) for f in defaults):
        default_values = lambda: [f.get_default() for f in defaults]  # noqa: E731
    else:
        default_values = tuple(f.get_default() for f in defaults)
    json_columns = tuple(
        (i, c.encoder) for i, c in enumerate(columns) if c.get_internal_type() == "JSONField"
    )
    time_columns = tuple((i, c) for i, c in enumerate(columns) if c.get_internal_type() == "DateTimeField")
    head = "INSERT INTO {} ({})".format(quote(meta.db_table), ", ".join(quote(c.column) for c in columns))
    types = None
    if connections[alias].vendor == "postgresql":
        types = tuple(array_cast(c, connections[alias]) for c in columns)
    return _InsertPlan(
        head,
        len(columns),
        default_values,
        json_columns,
        time_columns,
        quote(meta.pk.column),
        types,
    )
