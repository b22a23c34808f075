"""Every index a write keeps up to date earns its place.

An index whose columns lead another index of the same table answers no query the longer one
cannot, yet every INSERT of an Event (acceptance) and every routed window (RouteRecord,
WorkInput, CorrelationKey) pays for it. Partial indexes are left out (they cover fewer rows),
and so are unique ones (they enforce something) and PostgreSQL's ``_like`` indexes (another
operator class, for ``LIKE 'prefix%'``), with the plain index PostgreSQL makes one beside."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.db import connection

from causal.models import Event
from infra.queries import starts_with
from routing.receivers.selectors import last_event_query
from tests.support import query_plan
from worklife.models import Work, WorkInput

APPS = ("causal", "routing", "worklife")
# Indexes kept on purpose although another index leads with their columns: none now.
KEPT: set[tuple[str, tuple[str, ...]]] = set()


def _partial_index_names() -> set[str]:
    return {
        index.name
        for app in APPS
        for model in apps.get_app_config(app).get_models()
        for index in model._meta.indexes
        if index.condition is not None
    }


def redundant_indexes() -> list[str]:
    """Each plain index whose column list is a leading part of another index on its table."""
    partial = _partial_index_names()
    found = []
    with connection.cursor() as cursor:
        for app in APPS:
            for model in apps.get_app_config(app).get_models():
                table = model._meta.db_table
                constraints = connection.introspection.get_constraints(cursor, table)
                indexes = {
                    name: tuple(c["columns"])
                    for name, c in constraints.items()
                    if (c["index"] or c["unique"]) and c["columns"] and name not in partial
                }
                for name, columns in indexes.items():
                    if (
                        constraints[name]["unique"]
                        or constraints[name]["primary_key"]
                        or name.endswith("_like")
                        or (table, columns) in KEPT
                    ):
                        continue
                    for other, longer in indexes.items():
                        same = longer == columns and (constraints[other]["unique"] or other < name)
                        if (
                            other != name
                            and longer[: len(columns)] == columns
                            and (len(longer) > len(columns) or same)
                        ):
                            found.append(f"{table}.{name} {columns} leads {other} {longer}")
                            break
    return found


@pytest.mark.django_db
def test_no_index_leads_another_on_the_same_table():
    assert redundant_indexes() == []


@pytest.mark.django_db
def test_the_check_finds_a_redundant_index():
    """The check itself: an index on a column another index already leads is reported."""
    with connection.cursor() as cursor:
        cursor.execute('CREATE INDEX "i12_redundant" ON "causal_event" ("type")')
    # The test's transaction rolls the index back (DDL is transactional on both databases).
    assert any(line.startswith("causal_event.i12_redundant ('type',) leads") for line in redundant_indexes())


@pytest.mark.django_db
def test_every_declared_constraint_and_index_exists_in_the_database():
    """Dropping the led indexes kept every constraint and index the models declare: on
    PostgreSQL a conditional unique constraint is a unique partial index on the same column,
    which Django's own AlterField(db_index=False) would have dropped too."""
    missing = []
    with connection.cursor() as cursor:
        for app in APPS:
            for model in apps.get_app_config(app).get_models():
                found = connection.introspection.get_constraints(cursor, model._meta.db_table)
                for declared in [*model._meta.constraints, *model._meta.indexes]:
                    if declared.name not in found:
                        missing.append(f"{model._meta.db_table}.{declared.name}")
    assert missing == []


# What the console, the router and the Work pages look up through the indexes that hold only
# some rows, and the index each lookup must still use.
LOOKUPS = [
    (
        "the console's scope-subtree filter",
        lambda: Event.objects.filter(starts_with("scope", "acme/")).order_by("-seq").values_list("seq")[:50],
        "event_scope_seq_idx",
    ),
    (
        "Events that target Work",
        lambda: Event.objects.filter(work_id__in=[1, 2]).values_list("seq"),
        "event_work_idx",
    ),
    ("an Event's children", lambda: Event.objects.filter(parent_id=1).values_list("seq"), "event_parent_idx"),
    (
        "a root's descendants",
        lambda: Event.objects.filter(root_id=1).order_by("seq").values_list("seq"),
        "event_root_seq_idx",
    ),
    ("a Work's children", lambda: Work.objects.filter(parent_id=1).values_list("pk"), "work_parent_idx"),
    (
        "an attempt's input",
        lambda: WorkInput.objects.filter(attempt_id=1).values_list("pk"),
        "workinput_attempt_idx",
    ),
    (
        # The Receivers page's last delivery of each receiver.
        "a receiver's newest Event",
        lambda: last_event_query("github")[:1],
        "event_receiver_seq_idx",
    ),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("what", "query", "index"), LOOKUPS, ids=[what for what, _, _ in LOOKUPS])
def test_lookups_use_the_indexes_that_hold_only_the_rows_they_need(what, query, index):
    """The partial indexes (an Event's explicit Work, parent and root, a Work's parent, an
    input's attempt: most rows have none, and a row such an index does not hold costs it
    nothing when written) still serve the lookups, whose ``= x`` and ``IN (...)`` imply IS NOT
    NULL on both databases; and on PostgreSQL Event.scope's one index, in the "C" collation,
    serves prefixes (``LIKE 'acme/%'``) without a LIKE index of its own."""
    sql, params = query().query.sql_with_params()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")  # the tables are nearly empty
        plan = query_plan(cursor, sql, params)
    assert index in plan, f"{what}: {plan}"
