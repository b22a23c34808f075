"""Writes to the acceptance ledger.

``event_accept_in_tx`` is the trusted acceptance primitive: it stores an Event (or returns
the one already accepted under the same ``(source, id)``) and its explicit key index. It does
not decide who may accept what: ingress validation (``routing.acceptance.envelopes``) and the causal
limits (``causal.limits``) call it after their own checks.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import DEFAULT_DB_ALIAS, IntegrityError, connection, connections, models, transaction
from django.db.models import signals
from django.db.models.base import ModelState

from causal.clock import Clock
from causal.metrics import events_accepted_on_commit
from causal.models import KV, Event, EventKey
from infra import wakeup
from infra.queries import JsonPreparer, array_cast, dumps_json_text, shared_columns, unnest_select

# Acceptance order is the commit order: on PostgreSQL a sequence value is taken before
# commit, so two concurrent acceptances could commit out of seq order and a router could
# route seq 6 before seq 5 appears. One transaction-scoped advisory lock serialises the
# insert and commit of accepted Events. (SQLite serialises writers with BEGIN IMMEDIATE.)
ACCEPT_LOCK_ID = 0x436F6E64  # "Cond"


@dataclass(frozen=True, slots=True)
class Envelope:
    """A validated Event envelope (CloudEvents 1.0 attributes plus Conduit's targets)."""

    id: str
    source: str
    type: str
    scope: str
    subject: str = ""
    time: datetime | None = None
    specversion: str = "1.0"
    datacontenttype: str = "application/json"
    # Whether the sender gave datacontenttype (not in the digest: the same Event either way).
    datacontenttype_given: bool = False
    data: Any = None
    # True: ``data`` is the base64 text of binary data (CloudEvents ``data_base64``).
    binary_data: bool = False
    extensions: dict[str, Any] = field(default_factory=dict)
    correlation: tuple[str, ...] = ()
    work_id: int | None = None
    execution_id: int | None = None


def envelope_digest(envelope: Envelope) -> str:
    """A digest of everything acceptance stores of an Event (``sha256:<hex>``): two offers of
    the same ``(source, id)`` are the same Event exactly when their digests are equal."""
    canonical = {
        "id": envelope.id,
        "source": envelope.source,
        "type": envelope.type,
        "scope": envelope.scope,
        "subject": envelope.subject,
        "time": envelope.time.astimezone(UTC).isoformat() if envelope.time else None,
        "specversion": envelope.specversion,
        "datacontenttype": envelope.datacontenttype,
        "data": envelope.data,
        "extensions": envelope.extensions,
        "correlation": list(envelope.correlation),
        "work_id": envelope.work_id,
        "execution_id": envelope.execution_id,
    }
    if envelope.binary_data:
        # Only then: the digest of every Event without binary data stays what it was.
        canonical["binary_data"] = True
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def event_envelope(event: Event) -> Envelope:
    """The envelope an accepted Event was stored from."""
    return Envelope(
        id=event.envelope_id,
        source=event.source,
        type=event.type,
        scope=event.scope,
        subject=event.subject,
        time=event.time,
        specversion=event.specversion,
        datacontenttype=event.datacontenttype,
        datacontenttype_given=event.datacontenttype_given,
        data=event.data,
        binary_data=event.binary_data,
        extensions=dict(event.extensions or {}),
        correlation=tuple(event.correlation or ()),
        work_id=event.work_id,
        execution_id=event.execution_id,
    )


@dataclass(frozen=True, slots=True)
class Accepted:
    event: Event
    created: bool


def assert_in_tx() -> None:
    """Guard for ``*_in_tx`` functions: they must run inside the caller's transaction."""
    if not connection.in_atomic_block:
        raise RuntimeError("this function must be called inside transaction.atomic()")


def acceptance_lock_in_tx() -> None:
    """Serialise acceptance so that seq order is commit order (SQLite's writers are serial
    already), and wake the route loops when the transaction commits (``infra.wakeup``:
    on PostgreSQL a notification in the same statement, so acceptance pays no extra round trip)."""
    assert_in_tx()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT pg_advisory_xact_lock(%s), {wakeup.pg_notify_sql(wakeup.ACCEPTED)}", [ACCEPT_LOCK_ID]
            )
    else:
        wakeup.notify_on_commit(wakeup.ACCEPTED)


def event_row(envelope: Envelope, *, parent: Event | None, accepted_at: datetime, accepted_by: str) -> Event:
    """An unsaved Event for ``envelope``, with its ancestry taken from ``parent``."""
    if parent is None:
        return _root_row(envelope, accepted_at, accepted_by)
    return Event(
        envelope_id=envelope.id,
        source=envelope.source,
        type=envelope.type,
        subject=envelope.subject,
        time=envelope.time,
        specversion=envelope.specversion,
        datacontenttype=envelope.datacontenttype,
        datacontenttype_given=envelope.datacontenttype_given,
        data=envelope.data,
        binary_data=envelope.binary_data,
        extensions=dict(envelope.extensions),
        scope=envelope.scope,
        correlation=list(envelope.correlation),
        work_id=envelope.work_id,
        execution_id=envelope.execution_id,
        parent=parent,
        root_id=parent.root_seq,
        depth=parent.depth + 1,
        accepted_at=accepted_at,
        accepted_by=accepted_by,
    )


def _root_row(envelope: Envelope, accepted_at: datetime, accepted_by: str) -> Event:
    """A root Event (no parent) built from its values: every field the envelope does not give
    takes its default, as the model's constructor gives it.

    Every acceptance builds one, and the constructor (each field set in turn, the foreign
    keys' descriptors, the ``pre_init`` and ``post_init`` signals) cost more than storing it:
    when no receiver listens to those signals for Event, the instance is made as
    ``Model.from_db`` leaves one, its state fresh and its attributes set at once (a test holds
    it equal to the constructor's, field by field). A receiver brings the constructor back."""
    given = {
        "envelope_id": envelope.id,
        "source": envelope.source,
        "type": envelope.type,
        "subject": envelope.subject,
        "time": envelope.time,
        "specversion": envelope.specversion,
        "datacontenttype": envelope.datacontenttype,
        "datacontenttype_given": envelope.datacontenttype_given,
        "data": envelope.data,
        "binary_data": envelope.binary_data,
        "extensions": dict(envelope.extensions),
        "scope": envelope.scope,
        "correlation": list(envelope.correlation),
        "work_id": envelope.work_id,
        "execution_id": envelope.execution_id,
        "parent_id": None,
        "root_id": None,
        "depth": 0,
        "accepted_at": accepted_at,
        "accepted_by": accepted_by,
    }
    constants, factories = _row_defaults()
    if signals.pre_init.has_listeners(Event) or signals.post_init.has_listeners(Event):
        return Event(**{**constants, **{name: make() for name, make in factories}, **given})
    event = Event.__new__(Event)
    event._state = ModelState()
    values = event.__dict__
    values.update(constants)
    for name, make in factories:
        values[name] = make()
    values.update(given)
    return event


@functools.cache
def _row_defaults() -> tuple[dict[str, Any], tuple[tuple[str, Any], ...]]:
    """Event's concrete fields by attribute name: the constant defaults, and the functions
    that make a fresh default per row (a mutable one, a callable one)."""
    constants: dict[str, Any] = {}
    factories: list[tuple[str, Any]] = []
    for column in Event._meta.concrete_fields:
        if column.has_default() and callable(column.default):
            factories.append((column.attname, column.get_default))
        else:
            constants[column.attname] = column.get_default()
    return constants, tuple(factories)


def _accepted_under(source: str, envelope_id: str) -> Event | None:
    """The Event accepted under ``(source, envelope_id)``, or ``None``.

    Deduplication runs this on every acceptance, and almost always finds nothing: one raw
    statement for the ``seq`` (the ORM's building and compiling of the query cost several
    times its run), then the Event itself only when there is one.
    """
    with connection.cursor() as cursor:
        cursor.execute(_accepted_under_sql(), [source, envelope_id])
        row = cursor.fetchone()
    return None if row is None else Event.objects.get(seq=row[0])


@functools.lru_cache(maxsize=16)
def _accepted_among_sql(count: int) -> str:
    """The seqs of the Events accepted from one source under any of ``count`` ids."""
    quote = connection.ops.quote_name
    meta = Event._meta
    return (
        f"SELECT {quote(meta.pk.column)} FROM {quote(meta.db_table)} "
        f"WHERE {quote(meta.get_field('source').column)} = %s "
        f"AND {quote(meta.get_field('envelope_id').column)} IN ({', '.join(['%s'] * count)})"
    )


@functools.cache
def _accepted_under_sql() -> str:
    quote = connection.ops.quote_name
    meta = Event._meta
    return (
        f"SELECT {quote(meta.pk.column)} FROM {quote(meta.db_table)} "
        f"WHERE {quote(meta.get_field('source').column)} = %s "
        f"AND {quote(meta.get_field('envelope_id').column)} = %s"
    )


def _insert(events: Sequence[Event]) -> None:
    """Store the unsaved ``events`` in order and set their ``seq``: what ``bulk_create`` does
    (each field's ``pre_save`` and database preparation, one multi-row ``INSERT … RETURNING``
    per chunk, the keys coming back in the order of the rows as Django's own bulk insert
    relies on), through statements written once per chunk size instead of built and
    compiled for every acceptance."""
    fields = _insert_fields()
    db = connections[DEFAULT_DB_ALIAS]  # the wrapper itself: the proxy costs a lookup per use
    prepared = _prepared_columns()
    per_statement = max(1, min(INSERT_CHUNK, db.ops.bulk_batch_size(fields, events)))
    for start in range(0, len(events), per_statement):
        chunk = events[start : start + per_statement]
        values: list[Any] = []
        once: dict[int, Any] = {}  # a batch's rows share one acceptance time: prepared once
        jsons = {
            attname: JsonPreparer(
                functools.partial(column.get_db_prep_save, connection=db),
                strings_as_text=dumps_json_text(db.alias, column.encoder),
            )
            for column, attname, kind, _ in prepared
            if kind is _JSON
        }
        for event in chunk:
            for column, attname, kind, own_pre_save in prepared:
                if kind is _AS_IS:
                    values.append(getattr(event, attname))
                    continue
                value = column.pre_save(event, True) if own_pre_save else getattr(event, attname)
                if value is None:  # SQL NULL for every field here (JSON and times alike)
                    values.append(None)
                elif kind is _ONCE:
                    if id(value) not in once:
                        once[id(value)] = column.get_db_prep_save(value, db)
                    values.append(once[id(value)])
                elif kind is _JSON:
                    values.append(jsons[attname](value))
                else:
                    values.append(column.get_db_prep_save(value, db))
        with db.cursor() as cursor:
            if db.vendor == "postgresql" and len(chunk) > 1:
                # One parameter a column, not one a value (infra.queries.unnest_select).
                width = len(fields)
                columns = [values[start::width] for start in range(width)]
                select, params = unnest_select(_casts(), columns, shared_columns(columns))
                cursor.execute(f"{_insert_head()} {select} RETURNING {_seq_column()}", params)
            else:
                cursor.execute(_insert_sql(len(chunk)), values)
            seqs = [seq for (seq,) in cursor.fetchall()]
        for event, seq in zip(chunk, seqs, strict=True):
            event.seq = seq
            event._state.adding = False
            event._state.db = db.alias
    events_accepted_on_commit(event.scope for event in events)


# How _insert prepares a column's value: as the attribute holds it (text and integers, whose
# preparation only checks the type the envelope already has), once per distinct object (the
# acceptance time), by the field but once per chunk for an empty object or array (JSON), or
# by the field every time.
_AS_IS, _ONCE, _JSON, _FIELD = "as is", "once", "json", "field"
_PLAIN_TYPES = {
    "CharField",
    "TextField",
    "BigIntegerField",
    "IntegerField",
    "PositiveIntegerField",
    "PositiveBigIntegerField",
    "ForeignKey",
}


@functools.cache
def _prepared_columns() -> tuple[tuple[Any, str, str], ...]:
    columns = []
    for column in _insert_fields():
        if column.get_internal_type() in _PLAIN_TYPES:
            kind = _AS_IS
        elif column.attname == "accepted_at":
            kind = _ONCE
        elif column.get_internal_type() == "JSONField":
            kind = _JSON
        else:
            kind = _FIELD
        columns.append((column, column.attname, kind, pre_save_needed(column)))
    return tuple(columns)


def pre_save_needed(column: Any) -> bool:
    """Whether a column's ``pre_save`` does more than read its attribute (a time set on
    save, a field of another kind): only then is it called, per row and column."""
    if isinstance(column, models.DateField) and not (column.auto_now or column.auto_now_add):
        return type(column).pre_save not in (models.DateTimeField.pre_save, models.DateField.pre_save)
    return type(column).pre_save is not models.Field.pre_save


# Rows per INSERT statement of a batch acceptance.
INSERT_CHUNK = 500


@functools.cache
def _insert_fields() -> tuple[Any, ...]:
    return tuple(field for field in Event._meta.concrete_fields if not field.primary_key)


@functools.lru_cache(maxsize=16)
def _insert_sql(rows: int) -> str:
    row = f"({', '.join(['%s'] * len(_insert_fields()))})"
    return f"{_insert_head()} VALUES {', '.join([row] * rows)} RETURNING {_seq_column()}"


@functools.cache
def _insert_head() -> str:
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in _insert_fields())
    return f"INSERT INTO {quote(Event._meta.db_table)} ({columns})"


@functools.cache
def _seq_column() -> str:
    return connection.ops.quote_name(Event._meta.pk.column)


@functools.cache
def _casts() -> tuple[str, ...]:
    return tuple(array_cast(field, connection) for field in _insert_fields())


def event_accept_in_tx(
    *,
    envelope: Envelope,
    clock: Clock,
    parent: Event | None = None,
    accepted_by: str = "",
) -> Accepted:
    """Store ``envelope`` as an accepted Event, or return the Event already accepted under
    the same ``(source, id)`` (deduplication stores nothing new)."""
    assert_in_tx()
    existing = _accepted_under(envelope.source, envelope.id)
    if existing is not None:
        return Accepted(existing, created=False)
    acceptance_lock_in_tx()
    event = event_row(envelope, parent=parent, accepted_at=clock(), accepted_by=accepted_by)
    if connection.vendor == "sqlite":
        # BEGIN IMMEDIATE took the write lock before the read above: no concurrent acceptance
        # can insert the same (source, id) in between, so no savepoint is needed for the race.
        _insert([event])
        return _with_keys(event, envelope)
    try:
        with transaction.atomic():
            _insert([event])
    except IntegrityError:
        # A concurrent acceptance of the same (source, id) won the race.
        existing = _accepted_under(envelope.source, envelope.id)
        if existing is None:
            raise
        return Accepted(existing, created=False)
    return _with_keys(event, envelope)


def _with_keys(event: Event, envelope: Envelope) -> Accepted:
    """Store the correlation keys of the just-inserted ``event``."""
    if envelope.correlation:
        EventKey.objects.bulk_create(
            [
                EventKey(event=event, scope=envelope.scope, key=key)
                for key in dict.fromkeys(envelope.correlation)
            ]
        )
    return Accepted(event, created=True)


def events_accept_in_tx(
    *,
    envelopes: Sequence[Envelope],
    clock: Clock,
    accepted_by: str | Sequence[str] = "",
    parents: Sequence[Event | None] | None = None,
) -> list[Accepted]:
    """Accept a batch of Events in order, inside the caller's transaction, with set-based
    statements: one deduplication read, one insert of the new Events, one of their keys. Same
    results as :func:`event_accept_in_tx` called for each, in order. ``accepted_by`` is one
    name for all, or one per envelope (a group commit's); ``parents`` one parent (or ``None``)
    per envelope, roots when not given."""
    assert_in_tx()
    if not envelopes:
        return []
    by = [accepted_by] * len(envelopes) if isinstance(accepted_by, str) else list(accepted_by)
    if len(by) != len(envelopes):
        raise ValueError("accepted_by names one acceptor for all the envelopes or one for each")
    mothers = list(parents) if parents is not None else [None] * len(envelopes)
    if len(mothers) != len(envelopes):
        raise ValueError("parents names one parent (or None) for each envelope")
    existing: dict[tuple[str, str], Event] = {}
    pairs = {(e.source, e.id) for e in envelopes}
    by_source: dict[str, list[str]] = {}
    for source, envelope_id in pairs:
        by_source.setdefault(source, []).append(envelope_id)
    found: list[int] = []
    with connection.cursor() as cursor:
        for source, ids in by_source.items():
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                cursor.execute(_accepted_among_sql(len(chunk)), [source, *chunk])
                found.extend(seq for (seq,) in cursor.fetchall())
    if found:  # repeats are rare: only they are read whole
        for event in Event.objects.filter(seq__in=found):
            existing[(event.source, event.envelope_id)] = event
    acceptance_lock_in_tx()
    now = clock()
    fresh: list[Event] = []
    fresh_pairs: set[tuple[str, str]] = set()
    for envelope, acceptor, parent in zip(envelopes, by, mothers, strict=True):
        pair = (envelope.source, envelope.id)
        if pair in existing or pair in fresh_pairs:
            continue
        fresh_pairs.add(pair)
        fresh.append(event_row(envelope, parent=parent, accepted_at=now, accepted_by=acceptor))
    try:
        if connection.vendor == "sqlite":
            # Under BEGIN IMMEDIATE nobody could insert the same (source, id) since the read.
            _insert(fresh)
        else:
            with transaction.atomic():
                _insert(fresh)
    except IntegrityError:
        # A concurrent acceptance of one of them won a race: take the careful path.
        return [
            event_accept_in_tx(envelope=e, clock=clock, accepted_by=acceptor, parent=parent)
            for e, acceptor, parent in zip(envelopes, by, mothers, strict=True)
        ]
    created = fresh
    keys = [
        EventKey(event=event, scope=event.scope, key=key)
        for event in created
        for key in dict.fromkeys(event.correlation)
    ]
    if keys:
        EventKey.objects.bulk_create(keys)
    made = {(e.source, e.envelope_id): e for e in created}
    results: list[Accepted] = []
    seen: set[tuple[str, str]] = set()
    for envelope in envelopes:
        pair = (envelope.source, envelope.id)
        if pair in made and pair not in seen:
            results.append(Accepted(made[pair], created=True))
            seen.add(pair)
        else:
            results.append(Accepted(existing.get(pair) or made[pair], created=False))
    return results


def kv_put_in_tx(*, namespace: str, key: str, value: Any, clock: Clock) -> KV:
    """Create or replace a KV value, bumping its version."""
    assert_in_tx()
    entry = KV.objects.select_for_update().filter(namespace=namespace, key=key).first()
    if entry is None:
        return KV.objects.create(namespace=namespace, key=key, value=value, version=1, updated_at=clock())
    entry.value = value
    entry.version += 1
    entry.updated_at = clock()
    entry.save(update_fields=["value", "version", "updated_at"])
    return entry


def kv_replace(*, namespace: str, key: str, value: Any, clock: Clock) -> None:
    """Create or replace a KV value, bumping its version, in one statement (no read first):
    for values written often and read by others only (heartbeats, a route loop's published
    targets). Concurrent writers of one key each win in turn."""
    table = connection.ops.quote_name(KV._meta.db_table)
    columns = {
        f: connection.ops.quote_name(KV._meta.get_field(f).column)
        for f in ("namespace", "key", "value", "version", "updated_at")
    }
    params = [
        namespace,
        key,
        KV._meta.get_field("value").get_db_prep_save(value, connection),
        KV._meta.get_field("updated_at").get_db_prep_save(clock(), connection),
    ]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({columns['namespace']}, {columns['key']}, {columns['value']}, "
            f"{columns['version']}, {columns['updated_at']}) VALUES (%s, %s, %s, 1, %s) "
            f"ON CONFLICT ({columns['namespace']}, {columns['key']}) DO UPDATE SET "
            f"{columns['value']} = excluded.{columns['value']}, "
            f"{columns['version']} = {table}.{columns['version']} + 1, "
            f"{columns['updated_at']} = excluded.{columns['updated_at']}",
            params,
        )


def kv_delete_in_tx(*, namespace: str, key: str) -> int:
    assert_in_tx()
    deleted, _ = KV.objects.filter(namespace=namespace, key=key).delete()
    return deleted
