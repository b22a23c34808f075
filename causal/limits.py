"""Causal limits: derived acceptance with depth and per-root rate limits (R51–R55).

An Event that another Event caused is *derived*: it is accepted only through
:class:`Causal`, with a parent chosen by trusted core code. External ingress only ever
creates roots (depth 0) through ``causal.services.event_accept_in_tx``.

The limits
    A child's depth is its parent's plus one; a depth above ``max_depth`` is refused. Each
    root may gain ``rate_per_minute`` new derived Events per fixed UTC minute, counted in a
    token bucket per (root, minute) in the KV namespace ``core.causal.buckets`` under the
    key ``"<root seq>:<YYYY-MM-DDTHH:MM>"``. A deduplicated Event (its ``(source, id)`` was
    already accepted) is returned as it is and spends no token.

Pinning (R53)
    The limits in force are pinned in ``core.causal.pins`` (key: the root's seq) on the
    root's first derived acceptance. From then on every descendant is judged by the pinned
    limits, whatever limits a later :class:`Causal` (another process, changed settings) was
    built with. A pin is never rewritten and retention never prunes it.

Atomicity (R54)
    :meth:`Causal.derive_in_tx` runs inside the caller's transaction: the pin, the token and
    the Event commit with the caller's own effects, or not at all. Writers serialise: on
    PostgreSQL the acceptance advisory lock (taken first, so lock order is always "acceptance
    lock, then bucket row") and a row lock on the bucket; on SQLite ``BEGIN IMMEDIATE``.
    The check is a few plain SQL statements (see "the limit check's statements" below) so
    that it costs little beside the acceptance it guards.

Refusals and their diagnostics (R55)
    A refusal accepts nothing, spends nothing and raises :class:`CausalRefused`. It also
    produces a durable, redacted :class:`~causal.models.CausalDiagnostic` (ids, types,
    limits, counts and times; never payload data), counted on one row per root, kind and
    UTC minute (:func:`diagnostic_key`): a Work refused in a loop adds to a count. The refusal normally rolls the caller's
    transaction back, and ``transaction.on_commit`` does not run on rollback, so the
    diagnostic cannot be written *in* that transaction. Instead, derivation runs inside a
    refusal boundary, :func:`derived_atomic`: refusals are queued on the boundary and
    written in a transaction of their own once the boundary's transaction has ended
    (committed or rolled back). :meth:`Causal.derive` and the worklife entry points
    (``emit``, ``timer_fire``) open the boundary themselves; code calling
    :meth:`Causal.derive_in_tx` opens its transaction with ``derived_atomic()`` instead of
    ``transaction.atomic()``. A boundary opened inside someone else's (non-test)
    transaction can only write into that enclosing transaction: its diagnostics then commit
    with it. A separate database connection was rejected: on SQLite it would wait on the
    caller's own write lock.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, connection, transaction

from causal.checks import is_reserved  # noqa: F401 - the rule is causal.checks'; named here too
from causal.clock import Clock, minute_start, system_clock
from causal.diagnostics import (
    count_diagnostics_in_tx,
    diagnostic_key,
    persist_diagnostics,
)
from causal.metrics import causal_refused
from causal.models import KV, CausalDiagnostic, DiagnosticKind, Event
from causal.services import Accepted, Envelope, acceptance_lock_in_tx, assert_in_tx, event_accept_in_tx

logger = logging.getLogger(__name__)

PINS_NAMESPACE = "core.causal.pins"
BUCKETS_NAMESPACE = "core.causal.buckets"
# What a derived Event records as its acceptor when the caller names none.
DEFAULT_ACCEPTED_BY = "core.causal"

_DETAIL_MAX = 500
# A derivation that met a concurrent writer's KV row is checked again once, on fresh reads.
_ATTEMPTS = 2
_PARENT_FIELD = Event._meta.get_field("parent")


@dataclass(frozen=True, slots=True)
class Limits:
    """The causal limits: the deepest derived Event and derived Events per root per minute."""

    max_depth: int
    rate_per_minute: int

    def __post_init__(self) -> None:
        for name in ("max_depth", "rate_per_minute"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"Limits.{name} must be a non-negative integer, got {value!r}")

    @classmethod
    def from_settings(cls) -> Limits:
        """The limits configured by ``CONDUIT_CAUSAL_MAX_DEPTH`` and ``CONDUIT_CAUSAL_RATE_PER_MINUTE``."""
        values = {}
        for field, setting in (
            ("max_depth", "CONDUIT_CAUSAL_MAX_DEPTH"),
            ("rate_per_minute", "CONDUIT_CAUSAL_RATE_PER_MINUTE"),
        ):
            value = getattr(settings, setting, None)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ImproperlyConfigured(f"{setting} must be a non-negative integer, got {value!r}")
            values[field] = value
        return cls(**values)


@dataclass(frozen=True, slots=True)
class Pin:
    """The limits pinned for a root on its first derived acceptance."""

    root_seq: int
    limits: Limits
    pinned_at: datetime


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why derived acceptance would be refused: redacted, no payload data."""

    kind: str
    detail: str
    root_seq: int | None = None
    parent_seq: int | None = None
    limit: int | None = None
    count: int | None = None
    minute: datetime | None = None


class CausalRefused(Exception):
    """Derived acceptance was refused; nothing was accepted and no token was spent.

    ``kind`` is a :class:`~causal.models.DiagnosticKind` value; ``diagnostic`` is the
    redacted record, saved (it has a ``pk``) once its boundary has written it.
    """

    def __init__(self, kind: str, detail: str, *, diagnostic: CausalDiagnostic) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.diagnostic = diagnostic

    @property
    def root_seq(self) -> int | None:
        return self.diagnostic.root_seq

    @property
    def parent_seq(self) -> int | None:
        return self.diagnostic.parent_seq

    @property
    def limit(self) -> int | None:
        return self.diagnostic.limit

    @property
    def count(self) -> int | None:
        return self.diagnostic.count


# --- keys and time ---------------------------------------------------------------------------


def bucket_key(root_seq: int, minute: datetime) -> str:
    """The ``core.causal.buckets`` key of a root's token bucket for one UTC minute."""
    return f"{root_seq}:{minute_start(minute):%Y-%m-%dT%H:%M}"


def pin_key(root_seq: int) -> str:
    """The ``core.causal.pins`` key of a root's pinned limits."""
    return str(root_seq)


def pin_from_value(root_seq: int, value: dict) -> Pin:
    """Decode a stored pin value (``{max_depth, rate_per_minute, pinned_at}``)."""
    return Pin(
        root_seq=root_seq,
        limits=Limits(max_depth=int(value["max_depth"]), rate_per_minute=int(value["rate_per_minute"])),
        pinned_at=datetime.fromisoformat(value["pinned_at"]),
    )


def _aware_utc(clock: Clock) -> datetime:
    now = clock()
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError(f"the clock must return an aware datetime, got naive {now!r}")
    return now.astimezone(UTC)


# --- the refusal boundary --------------------------------------------------------------------


class _Boundary(threading.local):
    """Per-thread (so per-connection) refusal boundary state."""

    def __init__(self) -> None:
        self.depth = 0
        self.pending: list[CausalDiagnostic] = []


_boundary = _Boundary()


def in_refusal_boundary() -> bool:
    """True inside :func:`derived_atomic` (where derived acceptance may run)."""
    return _boundary.depth > 0


@contextmanager
def derived_atomic() -> Iterator[None]:
    """A ``transaction.atomic()`` block in which refusals' diagnostics survive a rollback.

    Use it instead of ``transaction.atomic()`` around code that calls
    :meth:`Causal.derive_in_tx`. When the outermost such block ends, committed or rolled
    back, the diagnostics of the refusals raised in it are written, each batch in its own
    transaction. Nested blocks are plain savepoints.
    """
    outermost = _boundary.depth == 0
    if outermost:
        _boundary.pending = []
    _boundary.depth += 1
    try:
        with transaction.atomic():
            yield
    finally:
        _boundary.depth -= 1
        if outermost:
            pending, _boundary.pending = _boundary.pending, []
            persist_diagnostics(pending)


def _require_boundary(what: str) -> None:
    if not in_refusal_boundary():
        raise RuntimeError(
            f"{what} must run inside causal.limits.derived_atomic() (use it instead of "
            "transaction.atomic()) so that a refusal's diagnostic survives the rollback"
        )


def refuse(
    refusal: Refusal,
    *,
    clock: Clock,
    envelope: Envelope | None = None,
    work_id: int | None = None,
    attempt_id: int | None = None,
) -> CausalRefused:
    """Queue the redacted diagnostic of ``refusal`` on the current boundary and return the
    :class:`CausalRefused` to raise.

    Only ids, types, limits, counts and times are copied from ``envelope``: never its data,
    subject or extensions. Must run inside :func:`derived_atomic`.
    """
    _require_boundary("refuse()")
    diagnostic = CausalDiagnostic(
        kind=DiagnosticKind(refusal.kind).value,
        at=_aware_utc(clock),
        root_seq=refusal.root_seq,
        parent_seq=refusal.parent_seq,
        work_id=work_id if work_id is not None else (envelope.work_id if envelope else None),
        attempt_id=attempt_id,
        source=(envelope.source if envelope else "")[:512],
        type=(envelope.type if envelope else "")[:255],
        envelope_id=(envelope.id if envelope else "")[:512],
        limit=refusal.limit,
        count=refusal.count,
        minute=refusal.minute,
        detail=refusal.detail[:_DETAIL_MAX],
    )
    diagnostic.last_at = diagnostic.at
    diagnostic.aggregate_key = diagnostic_key(
        root_seq=refusal.root_seq, kind=diagnostic.kind, at=diagnostic.at
    )
    _boundary.pending.append(diagnostic)
    causal_refused(diagnostic.kind)
    return CausalRefused(refusal.kind, refusal.detail, diagnostic=diagnostic)


def refusal_record_in_tx(refused: CausalRefused) -> CausalDiagnostic:
    """Write a refusal's diagnostic in the current transaction instead of after it.

    For callers that catch the refusal and commit a consequence with it (a timer marked
    refused): the diagnostic then commits atomically with that consequence.
    """
    assert_in_tx()
    diagnostic = refused.diagnostic
    if diagnostic.pk is None:
        count_diagnostics_in_tx([diagnostic])
    _boundary.pending = [d for d in _boundary.pending if d is not diagnostic]
    return diagnostic


# --- derived acceptance ----------------------------------------------------------------------


class _Refused(Exception):
    """Internal: a check failed inside the derivation's savepoint (rolled back on the way out)."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.detail)
        self.refusal = refusal


class _Replayed(Exception):
    """Internal: the Event turned out to be a duplicate after the token was taken."""

    def __init__(self, accepted: Accepted) -> None:
        super().__init__("replayed")
        self.accepted = accepted


def _depth_refusal(*, parent: Event, root_seq: int, limits: Limits) -> Refusal | None:
    depth = parent.depth + 1
    if depth <= limits.max_depth:
        return None
    return Refusal(
        kind=DiagnosticKind.DEPTH_EXCEEDED,
        detail=f"depth {depth} exceeds the limit {limits.max_depth} for root #{root_seq}",
        root_seq=root_seq,
        parent_seq=parent.seq,
        limit=limits.max_depth,
        count=depth,
    )


def _rate_refusal(*, parent: Event, root_seq: int, limits: Limits, minute: datetime, count: int) -> Refusal:
    return Refusal(
        kind=DiagnosticKind.RATE_EXCEEDED,
        detail=(
            f"root #{root_seq} already has {count} of {limits.rate_per_minute} derived Events "
            f"in the minute {minute:%Y-%m-%dT%H:%M}Z"
        ),
        root_seq=root_seq,
        parent_seq=parent.seq,
        limit=limits.rate_per_minute,
        count=count,
        minute=minute,
    )


@dataclass(frozen=True, slots=True)
class _Row:
    """A KV row as the limit check reads it."""

    id: int
    value: dict


def _bucket_count(entry: _Row | None) -> int:
    return int(entry.value.get("count", 0)) if entry is not None else 0


# --- the limit check's statements -------------------------------------------------------------
# The check runs on every derived acceptance, so it is written as a handful of plain SQL
# statements on the ORM's connection: building each through the ORM cost more than the
# acceptance it guards (bench/causal_throughput.py). They read and write the same KV rows as
# the ORM does (``version`` and ``updated_at`` kept), in the caller's transaction.


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


def _fetchall(sql: str, params: list) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _execute(sql: str, params: list) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def _json_param() -> str:
    # A JSON text parameter, cast where the column is jsonb.
    return "%s::jsonb" if connection.vendor == "postgresql" else "%s"


def _json_value(raw: object) -> dict:
    return raw if isinstance(raw, dict) else json.loads(raw)


def _event_seq(source: str, envelope_id: str) -> int | None:
    rows = _fetchall(
        f"SELECT {_q('seq')} FROM {_q(Event._meta.db_table)} WHERE {_q('source')} = %s AND {_q('envelope_id')} = %s",
        [source, envelope_id],
    )
    return rows[0][0] if rows else None


def _event_stub(seq: int) -> Event | None:
    """The parent's ancestry (seq, root, depth) as an Event instance to link a child to."""
    rows = _fetchall(
        f"SELECT {_q('root_id')}, {_q('depth')} FROM {_q(Event._meta.db_table)} WHERE {_q('seq')} = %s",
        [seq],
    )
    if not rows:
        return None
    root_id, depth = rows[0]
    return Event(seq=seq, root_id=root_id, depth=depth)


def _read_pin_and_bucket(root_seq: int, minute: datetime, *, lock: bool) -> tuple[_Row | None, _Row | None]:
    """The root's pin and its bucket for ``minute`` in one statement; ``lock`` locks the rows
    (PostgreSQL; SQLite's writers are already serialised by ``BEGIN IMMEDIATE``)."""
    sql = (
        f"SELECT {_q('id')}, {_q('namespace')}, {_q('value')} FROM {_q(KV._meta.db_table)} "
        f"WHERE ({_q('namespace')} = %s AND {_q('key')} = %s) OR ({_q('namespace')} = %s AND {_q('key')} = %s)"
    )
    if lock and connection.features.has_select_for_update:
        sql += " FOR UPDATE"
    pin = bucket = None
    for row_id, namespace, raw in _fetchall(
        sql, [PINS_NAMESPACE, pin_key(root_seq), BUCKETS_NAMESPACE, bucket_key(root_seq, minute)]
    ):
        row = _Row(id=row_id, value=_json_value(raw))
        if namespace == PINS_NAMESPACE:
            pin = row
        else:
            bucket = row
    return pin, bucket


def _kv_insert(rows: list[tuple[str, str, dict]], now: datetime) -> None:
    """Insert KV rows ``(namespace, key, value)`` at version 1 in one statement; raises
    ``IntegrityError`` when a key exists."""
    values = ", ".join([f"(%s, %s, {_json_param()}, 1, %s)"] * len(rows))
    updated_at = connection.ops.adapt_datetimefield_value(now)
    params: list = []
    for namespace, key, value in rows:
        params += [namespace, key, json.dumps(value), updated_at]
    _execute(
        f"INSERT INTO {_q(KV._meta.db_table)} ({_q('namespace')}, {_q('key')}, {_q('value')}, "
        f"{_q('version')}, {_q('updated_at')}) VALUES {values}",
        params,
    )


def _kv_update(row_id: int, value: dict, now: datetime) -> None:
    _execute(
        f"UPDATE {_q(KV._meta.db_table)} SET {_q('value')} = {_json_param()}, "
        f"{_q('version')} = {_q('version')} + 1, {_q('updated_at')} = %s WHERE {_q('id')} = %s",
        [json.dumps(value), connection.ops.adapt_datetimefield_value(now), row_id],
    )


class Causal:
    """Derived acceptance under the causal limits, built from a trusted clock and limits.

    ``limits`` defaults to :meth:`Limits.from_settings`; they apply to roots that have no
    pinned limits yet (R53).
    """

    def __init__(self, clock: Clock = system_clock, limits: Limits | None = None) -> None:
        self.clock = clock
        self.limits = limits if limits is not None else Limits.from_settings()

    def __repr__(self) -> str:
        return f"Causal(limits={self.limits!r})"

    def now(self) -> datetime:
        """The trusted clock's now, checked to be aware, in UTC."""
        return _aware_utc(self.clock)

    # -- public API --

    def derive(self, *, parent: Event | None, envelope: Envelope, accepted_by: str = "") -> Accepted:
        """Accept ``envelope`` as a child of ``parent`` in a transaction of its own.

        Returns the accepted (or deduplicated) Event; raises :class:`CausalRefused` after
        the refusal's diagnostic has been written.
        """
        for attempt in range(_ATTEMPTS):
            try:
                with derived_atomic():
                    # The transaction holds nothing else: it is this derivation's savepoint.
                    return self._derive_in_tx(
                        parent=parent, envelope=envelope, accepted_by=accepted_by, savepoint=False
                    )
            except IntegrityError:
                # A KV row appeared between the check and the write (a writer that skipped
                # the acceptance lock): the whole transaction is retried, never a part.
                if attempt == _ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def derive_in_tx(self, *, parent: Event | None, envelope: Envelope, accepted_by: str = "") -> Accepted:
        """Accept ``envelope`` as a child of ``parent`` inside the caller's transaction.

        ``parent`` must be chosen by trusted core code. Must run inside
        :func:`derived_atomic`; the pin, the token and the Event commit with the caller's
        transaction. A deduplicated Event is returned as it is (``created=False``) and
        spends nothing. Raises :class:`CausalRefused` (missing parent, depth or rate
        excess) having written nothing.
        """
        for attempt in range(_ATTEMPTS):
            try:
                return self._derive_in_tx(
                    parent=parent, envelope=envelope, accepted_by=accepted_by, savepoint=True
                )
            except IntegrityError:
                # Rolled back to this derivation's savepoint: check again on fresh reads.
                if attempt == _ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def would_refuse(self, *, parent: Event | None, pending: int = 0) -> Refusal | None:
        """What deriving a child of ``parent`` now would be refused for, or ``None``.

        A dry run for traces and for the router's settlement: it reads what derivation reads,
        and writes and locks nothing. ``pending`` counts derived Events of the same root the
        caller plans to accept before this one (in the same transaction), each spending a token.
        """
        row = self._parent_row(parent)
        if isinstance(row, Refusal):
            return row
        return self.would_refuse_child(
            parent_seq=row.seq, root_seq=row.root_seq, depth=row.depth, pending=pending
        )

    def would_refuse_child(
        self, *, parent_seq: int, root_seq: int | None, depth: int, pending: int = 0
    ) -> Refusal | None:
        """:meth:`would_refuse` for a parent given by its ancestry; ``root_seq`` ``None`` is a
        parent not accepted yet that would be a root (a trace's hypothetical Event): it has no
        pin and no spent token."""
        parent = Event(seq=parent_seq, root_id=root_seq if root_seq != parent_seq else None, depth=depth)
        minute = minute_start(self.now())
        pin = bucket = None
        if root_seq is not None:
            pin, bucket = _read_pin_and_bucket(root_seq, minute, lock=False)
        root = root_seq if root_seq is not None else parent_seq
        limits = pin_from_value(root, pin.value).limits if pin is not None else self.limits
        refusal = _depth_refusal(parent=parent, root_seq=root, limits=limits)
        count = _bucket_count(bucket) + pending
        if refusal is None and count >= limits.rate_per_minute:
            refusal = _rate_refusal(parent=parent, root_seq=root, limits=limits, minute=minute, count=count)
        return refusal

    # -- internals --

    def _derive_in_tx(
        self, *, parent: Event | None, envelope: Envelope, accepted_by: str, savepoint: bool
    ) -> Accepted:
        """Derive inside the current transaction. Without ``savepoint`` the caller promises
        that the innermost atomic block holds nothing but this derivation."""
        assert_in_tx()
        _require_boundary("Causal.derive_in_tx()")
        if not isinstance(envelope, Envelope):
            raise TypeError(f"envelope must be a causal.services.Envelope, got {type(envelope).__name__}")
        now = self.now()
        # Taken before any read that decides: on PostgreSQL every acceptance holds it until
        # commit, so deduplication, pin, bucket and insert see one order, and the lock order
        # (acceptance lock, then bucket row) is the same for every writer.
        acceptance_lock_in_tx()
        existing = _event_seq(envelope.source, envelope.id)
        if existing is not None:
            return Accepted(Event.objects.get(seq=existing), created=False)
        row = self._parent_row(parent)
        if isinstance(row, Refusal):
            raise refuse(row, clock=lambda: now, envelope=envelope)
        try:
            # A refusal or a replay found after the pin or the token was written rolls them
            # back with the savepoint (or the derivation's own transaction).
            with transaction.atomic() if savepoint else nullcontext():
                return self._derive_checked_in_tx(parent=row, envelope=envelope, now=now, by=accepted_by)
        except _Refused as refused:
            raise refuse(refused.refusal, clock=lambda: now, envelope=envelope) from None
        except _Replayed as replayed:
            if not savepoint:
                transaction.set_rollback(True)
            return replayed.accepted

    @staticmethod
    def _parent_row(parent: Event | None) -> Event | Refusal:
        if parent is None or parent.pk is None:
            return Refusal(kind=DiagnosticKind.MISSING_PARENT, detail="a derived Event needs a parent")
        # The stored row is authoritative: the caller's instance may be unsaved or stale.
        row = _event_stub(parent.pk)
        if row is None:
            return Refusal(
                kind=DiagnosticKind.MISSING_PARENT,
                detail=f"parent #{parent.pk} does not exist",
                parent_seq=parent.pk,
            )
        return row

    def _derive_checked_in_tx(self, *, parent: Event, envelope: Envelope, now: datetime, by: str) -> Accepted:
        root_seq = parent.root_seq
        minute = minute_start(now)
        pin, bucket = _read_pin_and_bucket(root_seq, minute, lock=True)
        limits = pin_from_value(root_seq, pin.value).limits if pin is not None else self.limits
        refusal = _depth_refusal(parent=parent, root_seq=root_seq, limits=limits)
        if refusal is None and _bucket_count(bucket) >= limits.rate_per_minute:
            refusal = _rate_refusal(
                parent=parent, root_seq=root_seq, limits=limits, minute=minute, count=_bucket_count(bucket)
            )
        if refusal is not None:
            raise _Refused(refusal)
        # Spend the token; a root's first derived acceptance also pins its limits (R53).
        token = {"root_seq": root_seq, "minute": minute.isoformat(), "limit": limits.rate_per_minute}
        inserts: list[tuple[str, str, dict]] = []
        if pin is None:
            pin_value = {
                "max_depth": limits.max_depth,
                "rate_per_minute": limits.rate_per_minute,
                "pinned_at": now.isoformat(),
            }
            inserts.append((PINS_NAMESPACE, pin_key(root_seq), pin_value))
        if bucket is None:
            inserts.append((BUCKETS_NAMESPACE, bucket_key(root_seq, minute), {**token, "count": 1}))
        else:
            _kv_update(bucket.id, {**token, "count": _bucket_count(bucket) + 1}, now)
        if inserts:
            _kv_insert(inserts, now)
        accepted = event_accept_in_tx(
            envelope=envelope, clock=lambda: now, parent=parent, accepted_by=by or DEFAULT_ACCEPTED_BY
        )
        if not accepted.created:
            # Accepted meanwhile by a writer that skipped the acceptance lock: a duplicate
            # spends nothing, so give the token (and a fresh pin) back.
            raise _Replayed(accepted)
        # The child was linked through a stub holding only the parent's ancestry: forget it,
        # so that ``event.parent`` loads the real parent when asked for.
        if _PARENT_FIELD.is_cached(accepted.event):
            _PARENT_FIELD.delete_cached_value(accepted.event)
        return accepted
