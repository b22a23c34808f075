"""infra.queries.Listed: an ``__in`` list passed as prepared values selects, updates
and excludes exactly the rows the same plain list does (the router's window reads and writes
rely on it), on whichever database the tests run."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from causal.models import KV, Event, EventKey
from infra.queries import (
    JsonPreparer,
    Listed,
    array_text,
    dumps_json_text,
    in_list_sql,
    json_array_text,
    shared_columns,
    unnest_select,
    update_rows,
)
from tests.causal.factories import EventFactory, KVFactory


@pytest.mark.django_db
def test_listed_selects_excludes_and_updates_the_rows_a_plain_list_does():
    events = EventFactory.create_batch(6, correlation=["k"])
    seqs = [e.seq for e in events]
    chosen = [seqs[4], seqs[1], seqs[1], seqs[3]]  # out of order, one twice

    def rows(queryset):
        return sorted(queryset.values_list("seq", flat=True))

    assert rows(Event.objects.filter(seq__in=Listed(chosen))) == rows(Event.objects.filter(seq__in=chosen))
    assert rows(Event.objects.filter(seq__in=Listed(chosen))) == sorted({seqs[1], seqs[3], seqs[4]})
    assert rows(Event.objects.exclude(seq__in=Listed(chosen))) == rows(Event.objects.exclude(seq__in=chosen))
    # A foreign key's column, as the world reads use it.
    assert sorted(
        EventKey.objects.filter(event_id__in=Listed(chosen)).values_list("event_id", flat=True)
    ) == [
        seqs[1],
        seqs[3],
        seqs[4],
    ]
    assert Event.objects.filter(seq__in=Listed(chosen)).update(claimed_by="loop") == 3
    assert rows(Event.objects.filter(claimed_by="loop")) == sorted({seqs[1], seqs[3], seqs[4]})


@pytest.mark.django_db
def test_listed_leaves_out_none_and_an_empty_list_matches_nothing():
    events = EventFactory.create_batch(3)
    seqs = [e.seq for e in events]
    assert list(Event.objects.filter(seq__in=Listed([None, seqs[0]])).values_list("seq", flat=True)) == [
        seqs[0]
    ]
    assert not Event.objects.filter(seq__in=Listed([])).exists()
    assert not Event.objects.filter(seq__in=Listed([None])).exists()
    assert Event.objects.exclude(seq__in=Listed([])).count() == 3
    assert Event.objects.filter(seq__in=Listed([])).update(claimed_by="loop") == 0


@pytest.mark.django_db
def test_listed_strings_select_the_keys_a_plain_list_does():
    for key in ("1", "2", "10", "x'; --"):
        KVFactory(namespace="n", key=key)
    wanted = ["10", "x'; --", "absent"]
    listed = sorted(KV.objects.filter(namespace="n", key__in=Listed(wanted)).values_list("key", flat=True))
    assert listed == sorted(KV.objects.filter(namespace="n", key__in=wanted).values_list("key", flat=True))
    assert listed == ["10", "x'; --"]


@pytest.mark.django_db
def test_in_lists_are_one_array_parameter_on_postgresql_and_a_parameter_per_value_elsewhere():
    """A window's IN lists (Listed, update_rows) are one array on PostgreSQL, read with an index
    probe per value and planned alike for any length; elsewhere one parameter per value. Both
    select and update exactly the listed rows, for keys and strings."""
    events = EventFactory.create_batch(4)
    seqs = [e.seq for e in events]
    for key in ("a", "b", "c"):
        KVFactory(namespace="n", key=key)

    with CaptureQueriesContext(connection) as queries:
        assert (
            sorted(Event.objects.filter(seq__in=Listed(seqs[1:3])).values_list("seq", flat=True)) == seqs[1:3]
        )
        assert sorted(
            KV.objects.filter(namespace="n", key__in=Listed(["c", "a"])).values_list("key", flat=True)
        ) == [
            "a",
            "c",
        ]
        update_rows(Event, [seqs[0], seqs[2]], claimed_by="loop")
    assert sorted(Event.objects.filter(claimed_by="loop").values_list("seq", flat=True)) == [seqs[0], seqs[2]]

    arrays = [q["sql"] for q in queries.captured_queries if "UNNEST" in q["sql"]]
    if connection.vendor == "postgresql":
        assert len(arrays) == 3
        assert in_list_sql(connection, [1, 2, 3]) == ("(SELECT UNNEST(%s::bigint[]))", ["{1,2,3}"])
    else:
        assert arrays == []
        assert in_list_sql(connection, [1, 2, 3]) == ("(%s, %s, %s)", [1, 2, 3])
    # Values of another kind are listed one by one on either database.
    assert in_list_sql(connection, [True, False]) == ("(%s, %s)", [True, False])


def test_unnest_select_passes_shared_columns_once_and_the_others_as_arrays():
    columns = [[1, 2, 3], ["a", "a", "a"], [None, None, None]]
    shared = shared_columns(columns)
    assert shared == [False, True, True]
    sql, params = unnest_select(["bigint", "text", "bigint"], columns, shared)
    assert sql == "SELECT u.c0, (%s)::text, (%s)::bigint FROM UNNEST((%s)::bigint[]) AS u(c0)"
    # The array as the text of its literal (infra.queries.array_text).
    assert params == ["a", None, "{1,2,3}"]
    # Rows alike in every column: the first column stays an array, one value a row.
    assert shared_columns([[1, 1], ["a", "a"]]) == [False, True]
    with pytest.raises(ValueError):
        unnest_select(["bigint"], [[1]], [True])


@pytest.mark.django_db
def test_json_preparer_writes_lists_of_strings_as_json_dumps_does():
    """The fast path for lists of plain strings gives ``json.dumps``'s text exactly: quotes,
    backslashes, controls, non-ASCII and lone surrogates escaped alike; anything else (other
    items, str subclasses) goes to ``prepare``. Only where the backend's adapter is
    ``json.dumps`` text with no encoder is it taken."""
    import json
    import random

    from django.core.serializers.json import DjangoJSONEncoder

    class Tagged(str):
        """A str subclass: json.dumps may treat it otherwise, so it is not taken."""

    calls = []

    def prepare(value):
        calls.append(value)
        return json.dumps(value)

    preparer = JsonPreparer(prepare, strings_as_text=True)
    alphabet = [
        "a",
        "Z",
        "0",
        " ",
        '"',
        "\\",
        "/",
        "\n",
        "\t",
        "\x00",
        "\x1f",
        "\x7f",
        "é",
        "€",
        "😀",
        "\ud800",
        "\udfff",
    ]
    rng = random.Random(12)
    for _ in range(500):
        value = [
            "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 12)))
            for _ in range(rng.randrange(1, 5))
        ]
        assert preparer(value) == json.dumps(value), value
    assert calls == []
    for other in (["a", 1], ["a", None], [Tagged("a")], [["a"]], ("a",), {"a": "b"}):
        assert preparer(other) == json.dumps(other)
    assert len(calls) == 6
    assert JsonPreparer(prepare)(["k"]) == '["k"]' and len(calls) == 7  # not asked: prepare
    assert dumps_json_text(connection.alias, DjangoJSONEncoder) is False
    assert dumps_json_text(connection.alias, None) is (connection.vendor == "sqlite")


def test_json_preparer_prepares_an_empty_object_or_array_once_and_the_rest_each_time():
    calls = []

    def prepare(value):
        calls.append(value)
        return f"prepared {value!r}"

    preparer = JsonPreparer(prepare)
    assert [preparer(v) for v in ([], {}, [], {}, ())] == [
        "prepared []",
        "prepared {}",
        "prepared []",
        "prepared {}",
        "prepared ()",
    ]
    assert [preparer(v) for v in (["k"], ["k"], 0, "")] == [
        "prepared ['k']",
        "prepared ['k']",
        "prepared 0",
        "prepared ''",
    ]
    assert calls == [[], {}, (), ["k"], ["k"], 0, ""]


# Strings an array literal must quote: its own quote, backslash, separators, braces, spaces,
# the word NULL, an empty string, quotes of SQL and JSON, text beyond ASCII.
AWKWARD = ['a"b', "back\\slash\\", "x,y", "{z}", " pad ", "NULL", "", "it's", '\\"', "é ✓ 日本"]


def test_array_text_writes_integers_and_strings_as_an_array_literal():
    assert array_text([3, 1, 2]) == "{3,1,2}"
    assert array_text([1, None]) == "{1,NULL}"
    assert array_text(['a"b', "c\\d", None]) == '{"a\\"b","c\\\\d",NULL}'
    assert array_text([]) == "{}"
    # Any other kind (booleans, mixed integers and strings, times) stays a list for the driver.
    assert array_text([True, False]) == [True, False]
    assert array_text([1, "a"]) == [1, "a"]


def test_json_array_text_writes_a_jsonb_column_as_one_document():
    """PostgreSQL's path (infra.queries.unnest_select); no database needed to check the
    text: each value by its wrapper's own ``dumps``, SQL NULL as ``null``, a shared wrapper
    written once."""
    import json
    from decimal import Decimal

    from django.core.serializers.json import DjangoJSONEncoder
    from psycopg.types.json import Jsonb

    empty = Jsonb({})
    calls = []

    def dumps(value):
        calls.append(value)
        return json.dumps(value, cls=DjangoJSONEncoder)

    values = [Jsonb({"n": Decimal("1.50")}, dumps=dumps), None, Jsonb(["é", 'a"b']), empty, empty]
    document = json_array_text(values)
    assert json.loads(document) == [{"n": "1.50"}, None, ["é", 'a"b'], {}, {}]
    assert calls == [{"n": Decimal("1.50")}]
    # Values all written by json.dumps itself (a field without an encoder, as Django wraps
    # them): the same document from one call.
    plain = [Jsonb({"a": ["é", 'a"b']}, dumps=json.dumps), None, Jsonb([], dumps=json.dumps)]
    assert json_array_text(plain) == '[{"a": ["\\u00e9", "a\\"b"]}, null, []]'
    assert json.loads(json_array_text([*plain, values[0]])) == [{"a": ["é", 'a"b']}, None, [], {"n": "1.50"}]
    # JSON null cannot be told from SQL NULL in the document, and a value the driver does not
    # wrap is not for it: such a column stays an array, as before.
    assert json_array_text([Jsonb(None), None]) is None
    assert json_array_text(['{"k": 1}']) is None
    sql, params = unnest_select(["bigint", "jsonb"], [[1, 2], [Jsonb(None), None]], [False, False])
    assert "jsonb_array_elements" not in sql and type(params[1]) is list
    sql, params = unnest_select(["bigint", "jsonb"], [[1, 2], values[:2]], [False, False])
    assert "jsonb_array_elements" in sql and params == ["{1,2}", '[{"n": "1.50"},null]']
