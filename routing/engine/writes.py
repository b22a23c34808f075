"""Writes: a window's settlements, written with set-based statements at the end of the commit."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection, connections

from causal.limits import Causal, refuse
from causal.models import Event, EventKey
from infra.frozen import frozen
from infra.queries import (
    JsonPreparer,
    array_cast,
    dumps_json_text,
    in_list_chunks,
    padded_length,
    shared_columns,
    unnest_select,
    update_rows,
)
from routing.engine.decide import (
    INPUT_EFFECTS,
    Decision,
    Reason,
)
from routing.engine.evaluate import (
    Evaluation,
)
from routing.engine.failures import (
    RouteFailure,
    failure_put_in_tx,
    failures_forget_in_tx,
)
from routing.engine.live import publish_routed
from routing.engine.settle import Bridge, Settlement
from routing.extension import EventSnapshot
from routing.models import Disposition, RouteRecord
from worklife.models import (
    TERMINAL_STATUSES,
    CorrelationKey,
    Intent,
    Work,
    WorkInput,
)
from worklife.scheduling import (
    wait_block_in_tx,
    wait_time_out_in_tx,
    wait_wake_in_tx,
    wake_bridge_envelope,
)

# A settled Event's disposition, as its route record stores it (read once, not through the
# enum's descriptor for every Event).
_ROUTED, _FAILED = Disposition.ROUTED.value, Disposition.FAILED.value


@dataclass
class Writes:
    """The window's effects, written with set-based statements at the end of the commit.

    Rows are plain lists inserted with one statement per table (:func:`_insert`: ``INSERT …
    SELECT … FROM (VALUES …)`` on SQLite, ``… FROM UNNEST`` on PostgreSQL): building a model
    instance per row costs more than the database does on this path."""

    now: datetime
    generation: str
    causal: Causal
    # The window's Events that wait behind an earlier one, as the commit read them.
    waiting: set[int] = field(default_factory=set)
    new_works: dict[int, tuple] = field(default_factory=dict)
    keys: list[list] = field(default_factory=list)
    inputs: list[list] = field(default_factory=list)
    intents: list[list] = field(default_factory=list)
    records: list[list] = field(default_factory=list)
    settled: dict[str, list[int]] = field(default_factory=dict)
    touched_works: set[int] = field(default_factory=set)
    shown_works: set[int] = field(default_factory=set)  # terminal: refreshed on pages, never written
    wakes: list[tuple[int, int, int]] = field(default_factory=list)  # (work, wait, event)
    timeouts: list[tuple[int, int]] = field(default_factory=list)  # (work, wait)
    reasons: dict[int, tuple[str, int | None, datetime | None]] = field(default_factory=dict)
    failures: dict[int, tuple[RouteFailure, datetime | None, str]] = field(default_factory=dict)
    bridges: list[Bridge] = field(default_factory=list)
    cleared_failures: list[int] = field(default_factory=list)
    decided_keys: list[EventKey] = field(default_factory=list)
    released: list[int] = field(default_factory=list)
    blocked_waits: dict[int, tuple[str, int]] = field(default_factory=dict)  # wait -> (reason, event)

    def write(self, event: EventSnapshot, settlement: Settlement, evaluation: Evaluation | None) -> None:
        """Queue exactly what ``settlement`` says happens to ``event``."""
        if settlement.settled:
            self.settle(event, settlement.decision, forget_failure=settlement.forget_failure)
            for bridge in settlement.bridges:
                if bridge.refusal is not None:
                    self.blocked_waits[bridge.wait.id] = (bridge.blocked_reason, event.seq)
                self.bridges.append(bridge)
            return
        if settlement.failure is not None:
            self.failure(
                event.seq, settlement.failure, retry_at=settlement.retry_at, reason=settlement.stored_reason
            )
        elif settlement.stored_reason is not None:
            self.unrouted(
                event.seq,
                settlement.stored_reason,
                waiting_on=settlement.waiting_on,
                retry_at=settlement.retry_at,
            )
        if settlement.remember_keys:
            self.remember_keys(event, evaluation)

    def release(self, seq: int) -> None:
        self.released.append(seq)

    def remember_keys(self, event: EventSnapshot, evaluation: Evaluation | None) -> None:
        """Keep the keys an unsettled Event's route decided, so later input for them waits
        behind it even in another route loop."""
        if evaluation is None or evaluation.decision is None:
            return
        for key in evaluation.decision.keys:
            if key not in event.correlation:
                self.decided_keys.append(
                    EventKey(event_id=event.seq, scope=event.scope, key=key, decided=True)
                )

    def unrouted(self, seq: int, reason: str, *, waiting_on: int | None, retry_at: datetime | None) -> None:
        self.reasons[seq] = (reason, waiting_on, retry_at)

    def failure(self, seq: int, failure: RouteFailure, *, retry_at: datetime | None, reason: str) -> None:
        self.failures[seq] = (failure, retry_at, reason)

    def settle(self, event: EventSnapshot, decision: Decision, *, forget_failure: bool) -> None:
        work_id = decision.work_id
        seq = event.seq
        if decision.new_work:
            self.new_works[work_id] = (event.scope, decision.binding, seq)
        elif decision.reason == Reason.TERMINAL:
            # Terminal Work never changes (R49, I5): the record names it, its row stays as it is;
            # its open pages still refresh to show the record.
            self.shown_works.add(work_id)
        elif work_id is not None:
            self.touched_works.add(work_id)
        for key in decision.attach_keys:
            self.keys.append([event.scope, key, work_id, seq, self.now])
        if decision.effect in INPUT_EFFECTS and work_id is not None and not decision.error:
            attempt = decision.intent_attempt
            self.inputs.append(
                [
                    work_id,
                    seq,
                    seq,
                    decision.binding,
                    decision.input_kind or "queue",
                    "pending",
                    attempt.id if attempt else None,
                    self.now,
                ]
            )
            if attempt is not None:
                self.intents.append(
                    [work_id, attempt.id, attempt.lease_epoch, seq, decision.intent_kind, "pending", self.now]
                )
        if decision.wake_wait is not None:
            self.wakes.append((work_id, decision.wake_wait.id, seq))
        for sub in decision.also_wakes:
            self.wakes.append((sub.work_id, sub.wait.id, seq))
            self.touched_works.add(sub.work_id)
        if decision.timed_out_wait is not None:
            self.timeouts.append((work_id, decision.timed_out_wait.id))
        error = decision.error
        disposition = _FAILED if error else _ROUTED
        self.records.append(
            [
                seq,
                work_id,
                event.scope,
                decision.route,
                decision.binding,
                self.generation,
                "failed" if error else decision.policy,
                decision.reason[:500],
                disposition,
                list(decision.refusals),
                list(decision.keys),
                error.error_text if error else "",
                error.attempts if error else 0,
                self.now,
                "",
            ]
        )
        self.settled.setdefault(disposition, []).append(seq)
        if forget_failure:
            self.cleared_failures.append(seq)

    def flush(self) -> dict[int, int]:
        """Write everything; returns the ids of the Work this window created, by temporary id."""
        ids: dict[int, int] = {}
        if self.new_works:
            temp = list(self.new_works)
            created = _insert(
                Work,
                ("scope", "status", "binding", "trigger", "created_at", "updated_at"),
                [
                    [scope, "ready", binding, seq, self.now, self.now]
                    for scope, binding, seq in (self.new_works[t] for t in temp)
                ],
                returning=True,
            )
            ids = dict(zip(temp, created, strict=True))

        def resolve(rows: list[list], column: int) -> list[list]:
            for row in rows:
                row[column] = ids.get(row[column], row[column])
            return rows

        _insert(CorrelationKey, ("scope", "key", "work", "attached_by", "attached_at"), resolve(self.keys, 2))
        _insert(
            WorkInput,
            ("work", "event", "seq", "binding", "kind", "state", "attempt", "created_at"),
            resolve(self.inputs, 0),
        )
        _insert(
            Intent,
            ("work", "attempt", "lease_epoch", "event", "kind", "state", "created_at"),
            resolve(self.intents, 0),
        )
        _insert(
            RouteRecord,
            (
                "event",
                "work",
                "scope",
                "route",
                "binding",
                "generation",
                "policy",
                "reason",
                "disposition",
                "refusals",
                "keys",
                "error",
                "attempts",
                "decided_at",
                "decided_by",
            ),
            resolve(self.records, 1),
        )
        for state, seqs in self.settled.items():
            update_rows(
                Event,
                seqs,
                route_state=state,
                routed_at=self.now,
                unrouted_reason="",
                retry_at=None,
                claimed_by="",
                claimed_until=None,
            )
            # Settled Events wait behind no one: a statement of its own, for those the commit
            # read waiting. Naming the column in the UPDATE above made SQLite check its foreign
            # key on every row (about 10 µs an Event, two thirds of that UPDATE), though most
            # settled Events never waited; a statement for the whole window filtered on the
            # column cost PostgreSQL a scan of the table.
            update_rows(Event, [seq for seq in seqs if seq in self.waiting], waiting_on=None)
        if self.touched_works:
            # Never a terminal Work's row (R49), even one another process ended since it was read.
            _touch_works(self.touched_works, self.now)
        # The wake bridges the settlements planned, derived through the causal limits; a
        # refused one leaves its diagnostic (R55). A limit spent meanwhile by another writer
        # raises CausalRefused: the window is settled again on fresh reads.
        for bridge in self.bridges:
            envelope = wake_bridge_envelope(
                wait_id=bridge.wait.id, work_id=bridge.work_id, scope=bridge.scope, event_seq=bridge.event_seq
            )
            if bridge.refusal is None:
                self.causal.derive_in_tx(parent=Event(seq=bridge.event_seq), envelope=envelope)
            else:
                refuse(bridge.refusal, clock=lambda: self.now, envelope=envelope)
        # Wait transitions are worklife's (W7: the router records, it runs nothing).
        for _work_id, wait_id, seq in self.wakes:
            wait_wake_in_tx(wait_id=wait_id, event_seq=seq, now=self.now)
        for _work_id, wait_id in self.timeouts:
            wait_time_out_in_tx(wait_id=wait_id, now=self.now)
        failures_forget_in_tx(self.cleared_failures)
        if self.decided_keys:
            EventKey.objects.bulk_create(self.decided_keys, ignore_conflicts=True)
        for wait_id, (reason, seq) in self.blocked_waits.items():
            wait_block_in_tx(wait_id=wait_id, reason=reason, event_seq=seq)
        if self.released:
            update_rows(Event, self.released, claimed_by="", claimed_until=None)
        by_reason: dict[tuple[str, int | None, datetime | None], list[int]] = {}
        for seq, reason in self.reasons.items():
            by_reason.setdefault(reason, []).append(seq)
        for (reason, waiting_on, retry_at), seqs in by_reason.items():
            update_rows(
                Event,
                seqs,
                unrouted_reason=reason[:1000],
                waiting_on=waiting_on,
                retry_at=retry_at,
                claimed_by="",
                claimed_until=None,
            )
        for seq, (failure, retry_at, reason) in self.failures.items():
            failure_put_in_tx(seq, failure, self.now)
            Event.objects.filter(seq=seq).update(
                unrouted_reason=reason, waiting_on=None, retry_at=retry_at, claimed_by="", claimed_until=None
            )
        # Open console pages refresh once this window commits (bounded; never raises).
        publish_routed(
            [row[0] for row in self.records] + [*self.reasons, *self.failures],
            self.touched_works | self.shown_works | set(ids.values()),
        )
        return ids


def _touch_works(work_ids: set[int], now: datetime) -> None:
    """``Work.objects.filter(pk__in=work_ids).exclude(status__in=TERMINAL_STATUSES)
    .update(version=F("version") + 1, updated_at=now)``, through a statement written once per
    padded number of Works, in chunks as :func:`update_rows` writes (every routed window touches Work)."""
    updated_at = Work._meta.get_field("updated_at").get_db_prep_save(now, connection)
    terminal = sorted(str(status) for status in TERMINAL_STATUSES)
    for keys, params in in_list_chunks(connection, sorted(work_ids)):
        with connection.cursor() as cursor:
            cursor.execute(_touch_works_sql(connection.alias, keys), [updated_at, *params, *terminal])


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


def _insert(model: type, fields: Sequence[str], rows: list[list], *, returning: bool = False) -> list[int]:
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
    """What :func:`_insert` needs of a model's columns, worked out once per model and fields:
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
