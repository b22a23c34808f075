"""infra.queries.Listed: an ``__in`` list passed as prepared values selects, updates
and excludes exactly the rows the same plain list does (the router's window reads and writes
rely on it), on whichever database the tests run."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from causal.models import KV, Event, EventKey
from infra.queries import (
    CompiledOnce,
    JsonPreparer,
    Listed,
    array_text,
    dumps_json_text,
    in_list_sql,
    json_array_text,
    padded_length,
    shared_columns,
    unnest_select,
    update_rows,
)
from routing.engine import failures as failures_module
from routing.engine import world
from routing.engine.failures import FAILURES_NAMESPACE, failures_read
from tests.causal.factories import EventFactory, KVFactory
from tests.worklife.factories import (
    AttemptFactory,
    DependencySubscriptionFactory,
    WaitFactory,
    WorkFactory,
    WorkInputFactory,
)
from worklife import views as work_views
from worklife.models import Work


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


# Hot reads compiled once (infra.queries.CompiledOnce) return
# exactly what the ORM returns, on whichever database the tests run.
def _orm_work_views(ids):
    return [tuple(row.values()) for row in work_views.work_views_query(ids)]


@pytest.mark.django_db
def test_work_views_compiled_once_equal_the_orm_for_every_shape():
    works = WorkFactory.create_batch(4)
    WorkInputFactory(work=works[0])
    WorkInputFactory(work=works[0], binding="reviewer", state="pending", kind="queue")  # the latest
    AttemptFactory(work=works[1], state="running")
    AttemptFactory(work=works[1], state="succeeded")
    AttemptFactory(work=works[2], capabilities=["inject"])
    ids = [w.pk for w in works]
    for chosen in ([ids[0]], ids[:2], ids, [ids[3], 10**9]):
        once = CompiledOnce(work_views.work_views_query)
        assert once.rows(chosen) == _orm_work_views(chosen)
        assert once.rows(chosen) == _orm_work_views(chosen)  # the same shape, compiled
    views = work_views.read_work_views(ids)
    assert views[works[0].pk].queued_binding == "reviewer"
    assert views[works[1].pk].active_attempt is not None
    assert views[works[2].pk].latest_attempt.capabilities == frozenset({"inject"})
    # Every field, as the model and its rows say (the views are built by position).
    latest_seq = works[0].inputs.order_by("-seq").values_list("seq", flat=True).first()
    for work in works:
        work.refresh_from_db()
        view = views[work.pk]
        assert [getattr(view, name) for name in work_views.WORK_VIEW_FIELDS] == [
            work.pk,
            work.scope,
            work.status,
            work.binding,
            work.retry_binding,
            work.rebind_binding,
            work.rebind_after_attempt,
        ]
        assert view.max_input_seq == (latest_seq if work == works[0] else 0)
        assert view.queued_binding == ("reviewer" if work == works[0] else "")
        assert view.active_wait is None


@pytest.mark.django_db
def test_a_shape_is_built_once_then_only_run():
    works = WorkFactory.create_batch(3)
    built = []

    def build(ids):
        built.append(list(ids))
        return Work.objects.filter(pk__in=Listed(ids)).values_list("pk", "scope")

    once = CompiledOnce(build)
    for work in works:
        assert once.rows([work.pk]) == [(work.pk, work.scope)]
    assert len(built) == 1 and built[0][0] < 0  # the sentinel build, then statements only
    assert sorted(once.rows([w.pk for w in works[:2]])) == sorted((w.pk, w.scope) for w in works[:2])
    assert len(built) == 2  # a new shape


@pytest.mark.django_db
def test_empty_lists_and_values_the_orm_rewrites_go_through_the_orm():
    work = WorkFactory(scope="Acme")
    built = []

    def build(scopes):
        built.append(scopes)
        # The values are changed on the way in: their sentinels cannot be found.
        return Work.objects.filter(scope__in=[s.title() for s in scopes]).values_list("pk", flat=False)

    once = CompiledOnce(build)
    assert once.rows(["acme"]) == [(work.pk,)]
    assert once.rows(["acme"]) == [(work.pk,)]
    assert built.count(["acme"]) == 2  # through the ORM both times
    assert CompiledOnce(lambda ids: Work.objects.filter(pk__in=Listed(ids)).values_list("pk")).rows([]) == []


@pytest.mark.django_db
def test_failures_read_compiled_once_equals_the_orm():
    KVFactory(namespace=FAILURES_NAMESPACE, key="11", value={"count": 2, "code": "handler_failed"})
    KVFactory(namespace=FAILURES_NAMESPACE, key="12", value=["not", "a", "dict"])
    KVFactory(namespace="elsewhere", key="13", value={"count": 1})
    read = failures_read([11, 12, 13, 14])
    orm = dict(KV.objects.filter(namespace=FAILURES_NAMESPACE).values_list("key", "value"))
    assert set(read) == {11}
    assert any(
        shape for shape in failures_module.FEW_FAILURES_QUERY._shapes.values()
    )  # compiled, not the ORM
    assert orm["11"] == {"count": 2, "code": "handler_failed"}
    assert read[11].count == 2


@pytest.mark.django_db
@pytest.mark.parametrize(
    "counted", [0, 1, failures_module.FEW_FAILURES, failures_module.FEW_FAILURES + 1, 150]
)
def test_failures_read_answers_alike_with_few_and_many_failures(counted):
    """While few failures are counted, all of them are read at once; past
    :data:`FEW_FAILURES`, each Event's is looked up. Either way the answer is the failures of
    the Events asked about, no other (fails when the read of all of them is not filtered)."""
    for seq in range(1000, 1000 + counted):
        KVFactory(
            namespace=FAILURES_NAMESPACE, key=str(seq), value={"count": seq % 7 + 1, "code": "handler_failed"}
        )
    KVFactory(namespace="elsewhere", key="1001", value={"count": 9})
    asked = [999, 1000, 1001, 1063, 1064, 1065, 1149, 5000]
    read = failures_read(asked)
    expected = {seq for seq in asked if 1000 <= seq < 1000 + counted}
    assert set(read) == expected
    assert all(read[seq].count == seq % 7 + 1 for seq in expected)
    assert failures_read([]) == {}


@pytest.mark.django_db
def test_subscriptions_compiled_once_equal_the_orm():
    at = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    wait = WaitFactory(name="deps", match={"type": "build.done"}, timeout_at=at, blocked_reason="")
    sub = DependencySubscriptionFactory(wait=wait, scope="ci", match={"data.ok": True})
    DependencySubscriptionFactory(scope="ci", active=False)
    DependencySubscriptionFactory(scope="ci", wait=WaitFactory(state="woken"))
    DependencySubscriptionFactory(scope="other")
    (found,) = world.read_subscriptions(frozenset({"ci", "nowhere"}))
    assert (found.id, found.work_id, found.work_scope, found.scope, found.match) == (
        sub.pk,
        wait.work_id,
        wait.work.scope,
        "ci",
        {"data.ok": True},
    )
    assert (found.wait.id, found.wait.name, found.wait.match, found.wait.timeout_at) == (
        wait.pk,
        "deps",
        {"type": "build.done"},
        at,
    )
    assert world.read_subscriptions(frozenset()) == []
    assert any(shape for shape in world.SUBSCRIPTIONS._shapes.values())


@pytest.mark.django_db
def test_the_live_generation_id_compiled_once_follows_applies(clock):
    from routing.config.selectors import live_generation, live_generation_id
    from routing.config.services import config_apply

    assert live_generation_id() is None
    config_apply(document="version: 1\nscopes:\n  - path: a\n", clock=clock)
    first = live_generation()
    assert live_generation_id() == first.pk
    config_apply(document="version: 1\nscopes:\n  - path: b\n", clock=clock)
    assert live_generation_id() == live_generation().pk != first.pk


@pytest.mark.django_db
def test_key_owners_compiled_once_equal_the_orm():
    from tests.worklife.factories import CorrelationKeyFactory

    a = CorrelationKeyFactory(scope="acme", key="pr:1")
    b = CorrelationKeyFactory(scope="acme", key="pr:2")
    c = CorrelationKeyFactory(scope="beta", key="pr:1")
    CorrelationKeyFactory(scope="beta", key="pr:9")
    pairs = {("acme", "pr:1"), ("acme", "pr:2"), ("beta", "pr:1"), ("beta", "pr:3"), ("gone", "x")}
    assert world.read_owners(pairs) == {
        ("acme", "pr:1"): a.work_id,
        ("acme", "pr:2"): b.work_id,
        ("beta", "pr:1"): c.work_id,
    }
    assert world.read_owners({("beta", "pr:9"), ("acme", "pr:2")}) == {
        ("beta", "pr:9"): CorrelationKeyFactory._meta.model.objects.get(key="pr:9").work_id,
        ("acme", "pr:2"): b.work_id,
    }


def test_lists_are_padded_to_a_few_lengths_at_most_a_quarter_longer():
    lengths = {padded_length(n) for n in range(1, 1025)}
    assert len(lengths) <= 40
    for n in range(1, 5000):
        assert n <= padded_length(n) <= max(n, -(-n * 5 // 4))


@pytest.mark.django_db
def test_windows_of_many_sizes_share_few_compiled_statements_and_read_what_the_orm_reads():
    works = WorkFactory.create_batch(40)
    built = []

    def build(ids):
        built.append(len(ids))
        return Work.objects.filter(pk__in=Listed(ids)).values_list("pk", "scope").order_by("pk")

    once = CompiledOnce(build)
    ids = [w.pk for w in works]
    for size in range(1, 41):
        chosen = ids[-size:] + [10**9]  # one id that matches nothing
        assert once.rows(chosen) == list(
            Work.objects.filter(pk__in=chosen).values_list("pk", "scope").order_by("pk")
        )
    # 40 sizes, each list padded by repeating its last value: 2 to 41 values fall on 17 lengths.
    assert len(built) == len({padded_length(n) for n in range(2, 42)}) == 17


@pytest.mark.django_db
def test_a_time_among_the_values_is_passed_as_the_backend_takes_it():
    at = datetime(2026, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
    early, late = WorkFactory(), WorkFactory()
    Work.objects.filter(pk=early.pk).update(updated_at=at)
    Work.objects.filter(pk=late.pk).update(updated_at=datetime(2026, 3, 4, 5, 6, 8, tzinfo=UTC))
    built = []

    def build(before, ids):
        built.append(before)
        return Work.objects.filter(updated_at__lte=before[0], pk__in=Listed(ids)).values_list(
            "pk", "updated_at"
        )

    once = CompiledOnce(build)
    ids = [early.pk, late.pk]
    assert once.rows([at], ids) == [(early.pk, at)]
    assert sorted(once.rows([datetime(2027, 1, 1, tzinfo=UTC)], ids)) == sorted(
        Work.objects.filter(pk__in=ids).values_list("pk", "updated_at")
    )
    assert once.rows([datetime(2026, 1, 1, tzinfo=UTC)], ids) == []
    assert len(built) == 1  # compiled once, with a sentinel time; then only run


@pytest.mark.django_db
def test_update_rows_writes_what_the_orms_update_writes():
    works = WorkFactory.create_batch(12)
    at = datetime(2026, 5, 6, 7, 8, 9, tzinfo=UTC)
    chosen = [w.pk for w in works[:9]]  # nine keys: padded to ten by repeating the last
    update_rows(Work, chosen + [None], status="running", updated_at=at, last_error="a 100% error")
    rows = dict(Work.objects.values_list("pk", "status"))
    assert {pk for pk, status in rows.items() if status == "running"} == set(chosen)
    for work in Work.objects.filter(pk__in=chosen):
        assert (work.updated_at, work.last_error) == (at, "a 100% error")
    untouched = Work.objects.get(pk=works[-1].pk)
    assert (untouched.status, untouched.last_error) == (works[-1].status, works[-1].last_error)
    update_rows(Work, [], status="cancelled")  # nothing to do: no statement
    assert not Work.objects.filter(status="cancelled").exists()


@pytest.mark.django_db
def test_json_columns_read_as_the_orm_reads_them_empty_ones_each_a_new_value():
    """Empty arrays and objects skip the decoder (most Events' correlation and extensions); what
    comes back is what the ORM returns, and no two rows share a list or dict."""
    events = [
        EventFactory(correlation=[], extensions={}, data={"n": 1}),
        EventFactory(correlation=["pr:1"], extensions={"x": [1, {}]}, data=[]),
        EventFactory(correlation=[], extensions={}, data={}),
        EventFactory(correlation=[], extensions={}, data=None),
    ]
    seqs = [e.seq for e in events]
    fields = ("seq", "data", "correlation", "extensions")
    once = CompiledOnce(
        lambda ids: Event.objects.filter(seq__in=Listed(ids)).order_by("seq").values_list(*fields)
    )
    rows = once.rows(seqs)
    assert rows == list(Event.objects.filter(seq__in=seqs).order_by("seq").values_list(*fields))
    assert rows[0][2] is not rows[2][2] and rows[0][3] is not rows[2][3]
    assert once.rows(seqs) == rows  # the compiled statement, run again


@pytest.mark.parametrize(
    "text",
    [
        None,
        "[]",
        "{}",
        '{"repo": "acme/api", "n": 1, "draft": false}',
        '[1, 2.5, null, "\u00e9", {"k": [true]}]',
        '"text"',
        "1",
        "null",
        ' {"padded": 1} ',
        "123456789012345678901234567890",
        '\ufeff{"a": 1}',
        "not json",
        '{"a": 1} trailing',
        "",
    ],
)
def test_json_text_decodes_as_djangos_json_field_decodes_it(text):
    """The quicker conversion (the decoder called directly) returns what ``JSONField.from_db_value``
    returns for any text: values, ``null``, and text ``json.loads`` refuses (returned as it is)."""
    from django.db import connection
    from django.db.models import F

    from infra.queries import quicker

    field = Event._meta.get_field("data")
    quick = quicker(field.from_db_value)
    assert quick is not field.from_db_value
    assert quick(text, F("data"), connection) == field.from_db_value(text, F("data"), connection)


@pytest.mark.django_db
def test_a_statement_run_again_converts_as_it_did_the_first_time():
    """SQLite's cursor remembers each statement's ``?`` form; ``%%`` stays a literal ``%``."""
    from django.db import connection

    for _ in range(3):
        with connection.cursor() as cursor:
            cursor.execute("SELECT %s || '%%', %s || '%%s'", ["a", "b"])
            assert cursor.fetchone() == ("a%", "b%s")


@pytest.mark.django_db
def test_earlier_unrouted_before_a_consecutive_window_is_the_list_read():
    """For a window of consecutive seqs the commit reads the unrouted Events
    before its first one, without the window's list; that is exactly the list read (unrouted,
    before the window's last Event, outside the window). A window with a gap still reads with
    its list, and finds the unrouted Event inside the gap."""
    states = ["routed", "unrouted", "skipped", "unrouted", "failed"] * 2 + ["unrouted"] * 10
    states += ["unrouted", "routed"] * 5
    seqs = [EventFactory(route_state=state).seq for state in states]
    window = seqs[10:20]
    before = world.EARLIER_UNROUTED_BEFORE.rows([window[0]])
    listed = world.EARLIER_UNROUTED.rows([window[-1]], window)
    assert before == listed
    assert [row[0] for row in before] == [seqs[i] for i in (1, 3, 6, 8)]
    gapped = [*window[:4], *window[5:]]
    with_gap = world.EARLIER_UNROUTED.rows([gapped[-1]], gapped)
    assert [row[0] for row in with_gap] == [seqs[i] for i in (1, 3, 6, 8, 14)]


def test_work_views_are_built_by_position_in_the_fields_order():
    """read_work_views builds each WorkView by position: WORK_VIEW_FIELDS are its first fields
    in its order, then its attempts, its wait and the two input annotations."""
    import dataclasses

    from worklife.views import WorkView

    names = [f.name for f in dataclasses.fields(WorkView)]
    assert names == [
        *work_views.WORK_VIEW_FIELDS,
        "active_attempt",
        "latest_attempt",
        "active_wait",
        "queued_binding",
        "max_input_seq",
    ]


def test_settlements_are_built_by_position_in_the_fields_order():
    """Settlement.settled_by builds a settlement by position: its fields in this order."""
    import dataclasses

    from routing.engine.settle import Settlement

    assert [f.name for f in dataclasses.fields(Settlement)] == [
        "seq",
        "state",
        "decision",
        "error",
        "reason",
        "stored_reason",
        "waiting_on",
        "retry_at",
        "failure",
        "forget_failure",
        "remember_keys",
        "bridges",
        "held",
        "won_first",
    ]


def test_queued_decisions_are_built_by_position_in_the_fields_order():
    """routing.engine.decide._queued builds a decision by position: Decision's fields in this order."""
    import dataclasses

    from routing.engine.decide import Decision

    assert [f.name for f in dataclasses.fields(Decision)] == [
        "effect",
        "reason",
        "work_id",
        "new_work",
        "route",
        "route_scope",
        "binding",
        "input_kind",
        "attach_keys",
        "keys",
        "intent_kind",
        "intent_attempt",
        "wake_wait",
        "timed_out_wait",
        "error",
        "refusals",
        "evaluation",
        "also_wakes",
    ]


@pytest.mark.django_db
def test_a_compiled_in_list_of_awkward_strings_selects_exactly_their_rows():
    """On PostgreSQL a compiled statement's IN list is one array literal written by
    infra.queries.array_text: a value holding the literal's quote, backslash, separator,
    braces or the word NULL matches its own row and no other."""
    scopes = ['a"b', "back\\slash\\", "x,y", "{z}", " pad ", "NULL", "it's", '\\"', "é ✓"]
    works = {scope: WorkFactory(scope=scope) for scope in [*scopes, "a", "b", "z", "pad", "x"]}
    once = CompiledOnce(lambda names: Work.objects.filter(scope__in=Listed(names)).values_list("scope", "pk"))
    assert sorted(once.rows(scopes)) == sorted((scope, works[scope].pk) for scope in scopes)
    for scope in scopes:  # the shape of one, compiled once, run for each
        assert once.rows([scope]) == [(scope, works[scope].pk)]
