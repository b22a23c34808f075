"""Refusal diagnostics: one record per root, kind and UTC minute, counting the refusals it
stands for (a Work refused in a loop adds to a count, not a row a refusal), written with one
upsert; and their redacted summary for the log when the database cannot take them."""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import DatabaseError, connection, transaction

from causal.clock import minute_start
from causal.models import CausalDiagnostic

logger = logging.getLogger("conduit.causal")


def persist_diagnostics(pending: list[CausalDiagnostic]) -> None:
    unsaved = [diagnostic for diagnostic in pending if diagnostic.pk is None]
    if not unsaved:
        return
    try:
        with transaction.atomic():
            count_diagnostics_in_tx(unsaved)
    except DatabaseError:
        # Raising here would hide the refusal (or report a committed operation as failed);
        # the refusal itself still reaches the caller. Log the redacted fields instead.
        logger.exception(
            "causal.diagnostic_lost",
            extra={"diagnostics": [diagnostic_summary(d) for d in unsaved]},
        )


def diagnostic_key(*, root_seq: int | None, kind: str, at: datetime) -> str:
    """The key of the diagnostic row counting the refusals of one root (``-`` for none), kind
    and UTC minute."""
    return f"{root_seq if root_seq is not None else '-'}:{kind}:{minute_start(at):%Y-%m-%dT%H:%M}"


def count_diagnostics_in_tx(diagnostics: list[CausalDiagnostic]) -> None:
    """Count ``diagnostics`` on their records, one per (root, kind, minute): a record that
    exists gains their number (and their last time), else the first of them becomes it. Each
    gets its record's ``pk`` and count.

    One statement a record (an insert that adds to the existing row on conflict), as cheap as
    the row each refusal used to write: refusals in a loop cost a record a minute, not a row
    each."""
    groups: dict[str, list[CausalDiagnostic]] = {}
    for diagnostic in diagnostics:
        groups.setdefault(diagnostic.aggregate_key, []).append(diagnostic)
    sql = _diagnostic_upsert_sql()
    # In key order: two writers meet on the records they share in the same order.
    for key in sorted(groups):
        group = groups[key]
        first = group[0]
        first.occurrences = len(group)
        first.last_at = max(diagnostic.last_at for diagnostic in group)
        params = [
            field.get_db_prep_save(getattr(first, field.attname), connection) for field in _DIAGNOSTIC_FIELDS
        ]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            pk, occurrences = cursor.fetchall()[0]
        for diagnostic in group:
            diagnostic.pk, diagnostic.occurrences, diagnostic.last_at = pk, occurrences, first.last_at
            diagnostic._state.adding = False


_DIAGNOSTIC_FIELDS = tuple(field for field in CausalDiagnostic._meta.concrete_fields if not field.primary_key)


def _diagnostic_upsert_sql() -> str:
    table = _quote(CausalDiagnostic._meta.db_table)
    columns = [_quote(field.column) for field in _DIAGNOSTIC_FIELDS]
    occurrences, last_at = _quote("occurrences"), _quote("last_at")
    return (
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))}) "
        f"ON CONFLICT ({_quote('aggregate_key')}) DO UPDATE SET "
        f"{occurrences} = {table}.{occurrences} + excluded.{occurrences}, "
        f"{last_at} = CASE WHEN excluded.{last_at} > {table}.{last_at} "
        f"THEN excluded.{last_at} ELSE {table}.{last_at} END "
        f"RETURNING {_quote(CausalDiagnostic._meta.pk.column)}, {occurrences}"
    )


def diagnostic_summary(diagnostic: CausalDiagnostic) -> dict:
    return {
        "kind": diagnostic.kind,
        "root_seq": diagnostic.root_seq,
        "parent_seq": diagnostic.parent_seq,
        "limit": diagnostic.limit,
        "count": diagnostic.count,
    }


def _quote(name: str) -> str:
    return connection.ops.quote_name(name)
