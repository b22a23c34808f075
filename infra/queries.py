"""Query helpers shared by the apps' hot paths."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from json.encoder import encode_basestring_ascii
from typing import Any

from django.core.exceptions import EmptyResultSet
from django.db import NotSupportedError, connection, connections
from django.db.backends.base.operations import BaseDatabaseOperations
from django.db.models import DateTimeField, Expression, FloatField, Func, JSONField, Model, Q


class SecondsBetween(Func):
    """``later - earlier`` in seconds (a float), computed by the database: the home page's
    route latency, the route loop's latency histogram."""

    output_field = FloatField()

    def as_sql(self, compiler, connection, **extra):  # pragma: no cover - only the two below
        raise NotSupportedError(f"SecondsBetween is not written for {connection.vendor}")

    def as_sqlite(self, compiler, connection, **extra):
        later, later_params = compiler.compile(self.source_expressions[0])
        earlier, earlier_params = compiler.compile(self.source_expressions[1])
        return f"((julianday({later}) - julianday({earlier})) * 86400.0)", [*later_params, *earlier_params]

    def as_postgresql(self, compiler, connection, **extra):
        later, later_params = compiler.compile(self.source_expressions[0])
        earlier, earlier_params = compiler.compile(self.source_expressions[1])
        return f"EXTRACT(EPOCH FROM ({later} - {earlier}))::float8", [*later_params, *earlier_params]


class Listed(Expression):
    """Plain values (ints or strings) as the right side of an ``__in`` lookup, already in
    the form the column takes: ``filter(seq__in=Listed(seqs))`` is ``filter(seq__in=seqs)``
    without the per-value preparation Django runs three times for a list (a window's
    500-value lists cost more in it than in the database). ``None`` is left out (it never
    equals anything) and an empty list matches nothing, as with a list."""

    def __init__(self, values: Iterable[Any]) -> None:
        super().__init__()
        self.values = [value for value in values if value is not None]

    def __repr__(self) -> str:
        return f"Listed({self.values!r})"

    def resolve_expression(self, query=None, allow_joins=True, reuse=None, summarize=False, for_save=False):
        return self

    def as_sql(self, compiler, connection):
        if not self.values:
            raise EmptyResultSet
        return in_list_sql(connection, self.values)


def array_type(connection, example: Any) -> str | None:
    """PostgreSQL: the array type an IN list of values like ``example`` is passed as, one
    parameter (``col IN (SELECT UNNEST(%s::bigint[]))``); ``None`` elsewhere, or for values
    of another kind, which are listed one parameter each.

    A list of a window's 500 keys written out was planned anew on every statement and, on a
    table of some thousands of rows, read with a sequential scan (about 4 ms); the array is
    read with an index probe per value (about 0.7 ms)."""
    if connection.vendor != "postgresql":
        return None
    if isinstance(example, bool):
        return None
    if isinstance(example, int):
        return "bigint[]"
    if isinstance(example, str):
        return "text[]"
    if isinstance(example, datetime):
        return "timestamptz[]"
    return None


def in_list_sql(connection, values: Sequence[Any]) -> tuple[str, list[Any]]:
    """``IN (…)``'s right side for ``values`` (not empty) and its parameters: one array on
    PostgreSQL (:func:`array_type`, passed as :func:`array_text` writes it), one parameter per
    value elsewhere."""
    array = array_type(connection, values[0])
    if array is not None:
        return f"(SELECT UNNEST(%s::{array}))", [array_text(values)]
    return "(" + ", ".join(["%s"] * len(values)) + ")", list(values)


class CompiledOnce:
    """An ORM query whose SQL Django builds and compiles once per *shape* (the lengths of its
    ``Listed`` value lists, padded to a few lengths), for hot paths that run the same query every pass.

    ``build(*lists)`` returns the queryset (a ``values()`` or ``values_list()`` one) for value
    lists it passes to :class:`Listed`. The first call of a shape builds it with sentinel
    values no real id or key can equal, compiles it, and notes where each sentinel sits among
    the statement's parameters; later calls put their values there and run the statement,
    converting rows with the compiler's own converters. The query stays defined by the ORM
    (one definition, one place): only its building is saved. A call with an empty list, or a
    query whose sentinels cannot all be found, runs through the ORM as before.
    """

    def __init__(self, build) -> None:
        self.build = build
        self._shapes: dict[tuple, Any] = {}

    def rows(self, *lists: Sequence[Any]) -> list[tuple]:
        """The query's rows as tuples, in its column order (``names`` gives the names)."""
        return self.run(*lists)[1]

    def dicts(self, *lists: Sequence[Any]) -> list[dict[str, Any]]:
        names, rows = self.run(*lists)
        return [dict(zip(names, row, strict=True)) for row in rows]

    def run(self, *lists: Sequence[Any]) -> tuple[list[str], list[tuple]]:
        lists = tuple(list(values) for values in lists)
        if not all(lists):
            return self._through_orm(lists)
        # Each list is an IN list: repeating a value changes nothing it matches, so lists are
        # padded to a few lengths and a window of any size finds its statement compiled.
        lists = tuple(padded(values) for values in lists)
        key = (connection.alias, tuple((len(v), type(v[0])) for v in lists))
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = self._compile(lists)
        if shape is False:
            return self._through_orm(lists)
        sql, params, slots, names, converters = shape
        values = list(params)
        for (start, length), given in zip(slots, lists, strict=True):
            if length is None:  # the list is one parameter, an array (PostgreSQL)
                values[start] = array_text(_prepared(given, connection))
            else:
                values[start : start + length] = _prepared(given, connection)
        with connection.cursor() as cursor:
            cursor.execute(sql, values)
            rows = cursor.fetchall()
        if converters:
            rows = [self._converted(row, converters, connection) for row in rows]
        return names, [tuple(row) for row in rows]

    def _through_orm(self, lists) -> tuple[list[str], list[tuple]]:
        queryset = self.build(*lists)
        names = self._names(queryset.query)
        return names, [tuple(row.values()) if isinstance(row, dict) else tuple(row) for row in queryset]

    @staticmethod
    def _names(query) -> list[str]:
        if query.selected:
            return list(query.selected)
        return [*query.extra_select, *query.values_select, *query.annotation_select]

    @staticmethod
    def _converted(row, converters, connection) -> list:
        row = list(row)
        for index, chain, expression in converters:
            value = row[index]
            for converter in chain:
                value = converter(value, expression, connection)
            row[index] = value
        return row

    def _compile(self, lists):
        sentinels = tuple(
            [_sentinel(values[0], n, i) for i in range(len(values))] for n, values in enumerate(lists)
        )
        queryset = self.build(*sentinels)
        compiler = queryset.query.get_compiler(using=queryset.db)
        try:
            sql, params = compiler.as_sql()
        except EmptyResultSet:
            return False
        params = list(params)
        slots = []
        for given in sentinels:
            values = _prepared(given, connections[queryset.db])  # as they are among the params
            array = array_text(values)  # as in_list_sql passes an array
            arrays = [i for i, p in enumerate(params) if type(p) is type(array) and p == array]
            if arrays:
                if len(arrays) != 1:
                    return False
                slots.append((arrays[0], None))
                continue
            starts = [i for i, p in enumerate(params) if p == values[0] and type(p) is type(values[0])]
            if len(starts) != 1 or params[starts[0] : starts[0] + len(values)] != values:
                return False
            slots.append((starts[0], len(values)))
        expressions = [column for column, _, _ in compiler.select[: compiler.col_count]]
        converters = [
            (index, [quicker(converter) for converter in chain], expression)
            for index, (chain, expression) in compiler.get_converters(expressions).items()
        ]
        return sql, params, slots, self._names(queryset.query), converters


def quicker(converter):
    """``converter``, or for ``JSONField.from_db_value`` of a field without a decoder the same
    conversion with an empty array or object made at once, and other text decoded by the
    decoder ``json.loads`` itself uses, called directly: most Events' correlation and
    extensions are empty, and decoding ``[]`` cost about 2 µs on the 2-core machine, as much
    as a small object; an Event's data took 3.2 µs through ``from_db_value`` and
    ``json.loads``, 1.4 µs by the decoder. Each call makes a new list or dict (the caller may
    change it). Text ``json.loads`` refuses (a byte-order mark first, invalid JSON) comes back
    as it is, as ``from_db_value`` returns it."""
    field = getattr(converter, "__self__", None)
    if getattr(converter, "__func__", None) is not JSONField.from_db_value or field.decoder is not None:
        return converter

    def from_db_value(value, expression, connection):
        if value == "[]":
            return []
        if value == "{}":
            return {}
        if type(value) is str and not value.startswith("\ufeff"):
            try:
                return _JSON_DECODE(value)
            except json.JSONDecodeError:
                return value
        return converter(value, expression, connection)

    return from_db_value


# What ``json.loads(text)`` calls for text, with no options (json's own default decoder).
_JSON_DECODE = json.JSONDecoder().decode


def padded_length(length: int) -> int:
    """The length a list of ``length`` values is padded to: itself up to 8, then the next of
    four steps per doubling (10, 12, 14, 16, 20, 24, 28, 32, …), at most a quarter more."""
    if length <= 8:
        return length
    step = 1 << (length.bit_length() - 3)
    return -(-length // step) * step


def padded(values: list) -> list:
    """``values`` padded to :func:`padded_length` by repeating its last value (for an IN list)."""
    missing = padded_length(len(values)) - len(values)
    return values + [values[-1]] * missing if missing else values


def _sentinel(example: Any, list_index: int, index: int) -> Any:
    """A value of ``example``'s type that no stored id, key or time equals."""
    if isinstance(example, datetime):
        return _SENTINEL_TIME + timedelta(microseconds=list_index * 1_000_000 + index)
    if isinstance(example, int):
        return -(7_700_000_000_000_000 + list_index * 1_000_000 + index)
    return f"\x00compiled-once-{list_index}-{index}"


_SENTINEL_TIME = datetime(1901, 2, 3, 4, 5, 6, tzinfo=UTC)
_TIME = DateTimeField()


def _prepared(values: list, connection) -> list:
    """Values as a lookup passes them to the database: times as the backend takes a
    ``DateTimeField``'s (text on SQLite), anything else as it is."""
    if values and isinstance(values[0], datetime):
        return [_TIME.get_db_prep_value(value, connection) for value in values]
    return values


def array_cast(field, connection) -> str:
    """The type a PostgreSQL statement casts ``field``'s values to: the column's type without
    its length (``varchar``, not ``varchar(255)``), so a value too long still fails on the
    column itself."""
    return field.db_type(connection).split("(")[0]


def unnest_select(
    casts: Sequence[str], columns: Sequence[Sequence[Any]], shared: Sequence[bool]
) -> tuple[str, list[Any]]:
    """PostgreSQL: ``SELECT … FROM UNNEST(…)`` yielding the rows whose columns are ``columns``
    (prepared values, one sequence per column, each cast to ``casts``), for ``INSERT INTO t
    (…) SELECT …``, and its parameters. A column marked ``shared`` holds one value for every
    row and is one parameter (its first value); the others are arrays, one parameter each.
    At least one column must not be shared (UNNEST yields a row per array value).

    An executemany or a multi-row ``VALUES`` costs the client a literal, and the server a
    parse, for every value, and the client's driver splits the statement at each of its
    thousands of placeholders; UNNEST yields the rows in order, so ``RETURNING`` gives their
    keys in row order (as Django's own bulk_create relies on).

    A ``jsonb`` column of the driver's JSON wrappers goes as one JSON document, the array of
    its values (:func:`json_array_text`), split into the array by the server: the driver
    writes a ``jsonb[]`` literal out value by value in Python, quoting each value's text again
    (about 7.6 µs a value on the 2-core machine, against about 1 µs for the document)."""
    selected, one, arrays, unnested, names = [], [], [], [], []
    for index, (cast, values, same) in enumerate(zip(casts, columns, shared, strict=True)):
        if same:
            selected.append(f"(%s)::{cast}")
            one.append(values[0])
            continue
        selected.append(f"u.c{index}")
        names.append(f"c{index}")
        document = json_array_text(values) if cast == "jsonb" else None
        if document is None:
            unnested.append(f"(%s)::{cast}[]")
            arrays.append(array_text(values))
        else:
            unnested.append(_JSON_ELEMENTS)
            arrays.append(document)
    if not arrays:
        raise ValueError("unnest_select needs at least one column that is not shared")
    sql = f"SELECT {', '.join(selected)} FROM UNNEST({', '.join(unnested)}) AS u({', '.join(names)})"
    return sql, [*one, *arrays]


def array_text(values: Sequence[Any]) -> Any:
    """PostgreSQL: a list of integers or of strings (``None`` for NULL among them) as the text of
    an array literal, for a parameter cast to an array type (``(%s)::bigint[]``): the driver
    writes a list out value by value in Python (about 1.7 µs a value on the 2-core machine),
    ``str`` and ``join`` in C. Values of any other kind are returned as a list, as they were."""
    kinds = set(map(type, values))
    if kinds == {int}:
        return "{" + ",".join(map(str, values)) + "}"
    if kinds <= {int, str, type(None)} and not {int, str} <= kinds:
        return "{" + ",".join(map(_array_element, values)) + "}"
    return list(values)


def _array_element(value: int | str | None) -> str:
    """One value of an array literal: NULL, an integer, or a string quoted (``"`` and ``\\``
    escaped by a backslash, as the array input reads them)."""
    if value is None:
        return "NULL"
    if type(value) is int:
        return str(value)
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


# A JSON document's array elements, in order, as a jsonb[] for UNNEST: JSON null is SQL NULL.
_JSON_ELEMENTS = (
    "ARRAY(SELECT NULLIF(j.e, 'null'::jsonb) FROM jsonb_array_elements((%s)::jsonb) "
    "WITH ORDINALITY AS j(e, o) ORDER BY j.o)"
)


def json_array_text(values: Sequence[Any]) -> str | None:
    """PostgreSQL: ``values`` of a ``jsonb`` column (``None`` for SQL NULL, or the driver's JSON
    wrapper, as the field prepared it) as the text of one JSON array, each value written with
    its wrapper's own ``dumps`` (the field's encoder); ``None`` when a value is of another kind,
    or is JSON null (which the document could not tell from SQL NULL)."""
    from psycopg.types.json import Jsonb  # loaded with the backend; SQLite never comes here

    if all(
        value is None or (type(value) is Jsonb and value.dumps is json.dumps and value.obj is not None)
        for value in values
    ):
        # Every value written by json.dumps itself (a field without an encoder): one call.
        return json.dumps([None if value is None else value.obj for value in values])
    texts: dict[int, str] = {}  # an empty object or array is one wrapper shared by many rows
    parts: list[str] = []
    for value in values:
        if value is None:
            parts.append("null")
            continue
        text = texts.get(id(value))
        if text is None:
            if type(value) is not Jsonb or value.obj is None:
                return None
            text = texts[id(value)] = (value.dumps or json.dumps)(value.obj)
        parts.append(text)
    return "[" + ",".join(parts) + "]"


def shared_columns(columns: Sequence[Sequence[Any]]) -> list[bool]:
    """Which of ``columns`` hold one value in every row (equal values), for
    :func:`unnest_select`; the first is never marked when all would be."""
    shared = [values.count(values[0]) == len(values) for values in columns]
    if all(shared):
        shared[0] = False
    return shared


def update_rows(model: type[Model], pks: Iterable[Any], **values: Any) -> None:
    """``model.objects.filter(pk__in=pks).update(**values)`` for plain values (no expressions),
    through a statement written once per model, columns and padded number of rows (an IN
    list repeats its last key to reach the length, as :class:`CompiledOnce` pads): the ORM
    built and compiled the same UPDATE on every pass of the route loop. Each value is
    prepared by its field, as ``update`` prepares it."""
    pks = [pk for pk in pks if pk is not None]
    if not pks:
        return
    names = tuple(sorted(values))
    fields = [model._meta.get_field(name) for name in names]
    prepared = [
        field.get_db_prep_save(values[name], connection) for field, name in zip(fields, names, strict=True)
    ]
    for keys, params in in_list_chunks(connection, pks):
        with connection.cursor() as cursor:
            cursor.execute(_update_sql(connection.alias, model, names, keys), [*prepared, *params])


# Keys per UPDATE statement (a padded length): under SQLite's oldest bound-variable limit, 999,
# with the values beside.
UPDATE_CHUNK = 768


def in_list_chunks(connection, keys: Sequence[Any]) -> Iterable[tuple[str, list[Any]]]:
    """``keys`` (not empty) as the IN lists of UPDATE statements: chunks of at most
    :data:`UPDATE_CHUNK`, each padded (:func:`padded`), each as :func:`in_list_sql` writes it."""
    keys = list(keys)
    for start in range(0, len(keys), UPDATE_CHUNK):
        yield in_list_sql(connection, padded(keys[start : start + UPDATE_CHUNK]))


class JsonPreparer:
    """Prepares JSON values for the database with ``prepare(value)``, an empty object or
    array once per instance (every one prepares alike; most Events' extensions and
    correlation, most route records' refusals): make one per statement and column.

    With ``strings_as_text`` (``prepare`` is ``json.dumps`` with its defaults, as
    :func:`dumps_json_text` tells), a list of plain strings (a route record's keys, an Event's
    correlation) is written out by the C string encoder ``json.dumps`` itself uses: the same
    text, without the Python encoder's passes (about a microsecond a list)."""

    __slots__ = ("_empties", "_prepare", "_strings_as_text")

    def __init__(self, prepare, *, strings_as_text: bool = False) -> None:
        self._prepare = prepare
        self._empties: dict[type, Any] = {}
        self._strings_as_text = strings_as_text

    def __call__(self, value: Any) -> Any:
        if not value and type(value) in _EMPTY_JSON:
            kind = type(value)
            if kind not in self._empties:
                self._empties[kind] = self._prepare(value)
            return self._empties[kind]
        if self._strings_as_text and type(value) is list and all(type(item) is str for item in value):
            return "[" + ", ".join(map(encode_basestring_ascii, value)) + "]"
        return self._prepare(value)


def dumps_json_text(alias: str, encoder: type | None) -> bool:
    """Whether the backend of ``alias`` prepares a JSON value as ``json.dumps(value)`` text
    (Django's default adapter, no custom encoder: SQLite), so :class:`JsonPreparer` may write
    lists of strings out itself. PostgreSQL's adapter wraps the value for the driver instead."""
    ops = type(connections[alias].ops)
    return encoder is None and ops.adapt_json_value is BaseDatabaseOperations.adapt_json_value


_EMPTY_JSON = (dict, list, tuple)


@functools.lru_cache(maxsize=256)
def _update_sql(alias: str, model: type[Model], names: tuple[str, ...], keys: str) -> str:
    quote = connections[alias].ops.quote_name
    meta = model._meta
    assignments = ", ".join(f"{quote(meta.get_field(name).column)} = %s" for name in names)
    return f"UPDATE {quote(meta.db_table)} SET {assignments} WHERE {quote(meta.pk.column)} IN {keys}"


def starts_with(field: str, prefix: str) -> Q:
    """Rows whose text ``field`` begins with ``prefix``, case-sensitively, in a way the field's
    index can serve: a range on SQLite (whose text comparison is by code point, where ``LIKE``
    ignores case), ``LIKE 'prefix%'`` on PostgreSQL (where a range would follow the collation)."""
    last = ord(prefix[-1]) if prefix else 0
    # The next character after the last one (not a surrogate, which UTF-8 cannot hold).
    if connection.vendor == "sqlite" and prefix and last < sys.maxunicode and not 0xD7FF <= last < 0xE000:
        return Q(**{f"{field}__gte": prefix, f"{field}__lt": prefix[:-1] + chr(last + 1)})
    return Q(**{f"{field}__startswith": prefix})
