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

Refusals and their diagnostics (R55)
    A refusal accepts nothing, spends nothing and raises :class:`CausalRefused`. It also
    produces a durable, redacted :class:`~causal.models.CausalDiagnostic` (ids, types,
    limits, counts and times; never payload data). The refusal normally rolls the caller's
    transaction back, and ``transaction.on_commit`` does not run on rollback, so the
    diagnostic cannot be written *in* that transaction. Instead, derivation runs inside a
    refusal boundary, :func:`derived_atomic`: refusals are queued on the boundary and
    written, each in a transaction of its own, once the boundary's transaction has ended
    (committed or rolled back). :meth:`Causal.derive` and the worklife entry points
    (``emit``, ``timer_fire``) open the boundary themselves; code calling
    :meth:`Causal.derive_in_tx` opens its transaction with ``derived_atomic()`` instead of
    ``transaction.atomic()``. A boundary opened inside someone else's (non-test)
    transaction can only write into that enclosing transaction: its diagnostics then commit
    with it. A separate database connection was rejected: on SQLite it would wait on the
    caller's own write lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import F, Q

from causal.clock import Clock, system_clock
from causal.models import KV, CausalDiagnostic, DiagnosticKind, Event
from causal.services import Accepted, Envelope, acceptance_lock_in_tx, assert_in_tx, event_accept_in_tx

logger = logging.getLogger(__name__)

PINS_NAMESPACE = "core.causal.pins"
BUCKETS_NAMESPACE = "core.causal.buckets"
# What a derived Event records as its acceptor when the caller names none.
DEFAULT_ACCEPTED_BY = "core.causal"

_DETAIL_MAX = 500


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


def minute_start(when: datetime) -> datetime:
    """The start of the fixed UTC minute holding ``when`` (an aware datetime)."""
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"expected an aware datetime, got naive {when!r}")
    return when.astimezone(UTC).replace(second=0, microsecond=0)


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


def is_reserved(name: str) -> bool:
    """True for the ``core`` family of types and sources that only core code may use."""
    return name == "core" or name.startswith("core.")


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
            _persist_diagnostics(pending)


def _persist_diagnostics(pending: list[CausalDiagnostic]) -> None:
    unsaved = [diagnostic for diagnostic in pending if diagnostic.pk is None]
    if not unsaved:
        return
    try:
        with transaction.atomic():
            for diagnostic in unsaved:
                diagnostic.save(force_insert=True)
    except DatabaseError:
        # Raising here would hide the refusal (or report a committed operation as failed);
        # the refusal itself still reaches the caller. Log the redacted fields instead.
        logger.exception(
            "causal.diagnostic_lost",
            extra={"diagnostics": [_diagnostic_summary(d) for d in unsaved]},
        )


def _diagnostic_summary(diagnostic: CausalDiagnostic) -> dict:
    return {
        "kind": diagnostic.kind,
        "root_seq": diagnostic.root_seq,
        "parent_seq": diagnostic.parent_seq,
        "limit": diagnostic.limit,
        "count": diagnostic.count,
    }


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
    _boundary.pending.append(diagnostic)
    return CausalRefused(refusal.kind, refusal.detail, diagnostic=diagnostic)


def refusal_record_in_tx(refused: CausalRefused) -> CausalDiagnostic:
    """Write a refusal's diagnostic in the current transaction instead of after it.

    For callers that catch the refusal and commit a consequence with it (a timer marked
    refused): the diagnostic then commits atomically with that consequence.
    """
    assert_in_tx()
    diagnostic = refused.diagnostic
    if diagnostic.pk is None:
        diagnostic.save(force_insert=True)
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


def _bucket_count(entry: KV | None) -> int:
    return int(entry.value.get("count", 0)) if entry is not None else 0


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
        with derived_atomic():
            return self.derive_in_tx(parent=parent, envelope=envelope, accepted_by=accepted_by)

    def derive_in_tx(self, *, parent: Event | None, envelope: Envelope, accepted_by: str = "") -> Accepted:
        """Accept ``envelope`` as a child of ``parent`` inside the caller's transaction.

        ``parent`` must be chosen by trusted core code. Must run inside
        :func:`derived_atomic`; the pin, the token and the Event commit with the caller's
        transaction. A deduplicated Event is returned as it is (``created=False``) and
        spends nothing. Raises :class:`CausalRefused` (missing parent, depth or rate
        excess) having written nothing.
        """
        assert_in_tx()
        _require_boundary("Causal.derive_in_tx()")
        if not isinstance(envelope, Envelope):
            raise TypeError(f"envelope must be a causal.services.Envelope, got {type(envelope).__name__}")
        now = self.now()
        # Taken before any read that decides: on PostgreSQL every acceptance holds it until
        # commit, so deduplication, pin, bucket and insert see one order, and the lock order
        # (acceptance lock, then bucket row) is the same for every writer.
        acceptance_lock_in_tx()
        existing = Event.objects.filter(source=envelope.source, envelope_id=envelope.id).first()
        if existing is not None:
            return Accepted(existing, created=False)
        row = self._parent_row(parent)
        if isinstance(row, Refusal):
            raise refuse(row, clock=lambda: now, envelope=envelope)
        try:
            # One savepoint: a refusal or a replay found after the pin or the token was
            # written rolls them back, so the caller's transaction keeps nothing of it.
            with transaction.atomic():
                accepted = self._derive_checked_in_tx(parent=row, envelope=envelope, now=now, by=accepted_by)
        except _Refused as refused:
            raise refuse(refused.refusal, clock=lambda: now, envelope=envelope) from None
        except _Replayed as replayed:
            return replayed.accepted
        return accepted

    def would_refuse(self, *, parent: Event | None) -> Refusal | None:
        """What deriving a child of ``parent`` now would be refused for, or ``None``.

        A dry run for traces: it reads what derivation reads, and writes and locks nothing.
        """
        row = self._parent_row(parent)
        if isinstance(row, Refusal):
            return row
        minute = minute_start(self.now())
        pin, bucket = self._read_pin_and_bucket(row.root_seq, minute, lock=False)
        limits = pin_from_value(row.root_seq, pin.value).limits if pin is not None else self.limits
        refusal = _depth_refusal(parent=row, root_seq=row.root_seq, limits=limits)
        if refusal is None and _bucket_count(bucket) >= limits.rate_per_minute:
            refusal = _rate_refusal(
                parent=row, root_seq=row.root_seq, limits=limits, minute=minute, count=_bucket_count(bucket)
            )
        return refusal

    def limits_for(self, root_seq: int) -> Limits:
        """The limits a descendant of ``root_seq`` is judged by: pinned, else this object's."""
        entry = KV.objects.filter(namespace=PINS_NAMESPACE, key=pin_key(root_seq)).first()
        return pin_from_value(root_seq, entry.value).limits if entry is not None else self.limits

    # -- internals --

    @staticmethod
    def _parent_row(parent: Event | None) -> Event | Refusal:
        if parent is None or parent.pk is None:
            return Refusal(kind=DiagnosticKind.MISSING_PARENT, detail="a derived Event needs a parent")
        # The stored row is authoritative: the caller's instance may be unsaved or stale.
        row = Event.objects.only("seq", "root_id", "depth").filter(pk=parent.pk).first()
        if row is None:
            return Refusal(
                kind=DiagnosticKind.MISSING_PARENT,
                detail=f"parent #{parent.pk} does not exist",
                parent_seq=parent.pk,
            )
        return row

    @staticmethod
    def _read_pin_and_bucket(root_seq: int, minute: datetime, *, lock: bool) -> tuple[KV | None, KV | None]:
        entries = KV.objects.filter(
            Q(namespace=PINS_NAMESPACE, key=pin_key(root_seq))
            | Q(namespace=BUCKETS_NAMESPACE, key=bucket_key(root_seq, minute))
        )
        if lock:
            entries = entries.select_for_update()
        pin = bucket = None
        for entry in entries:
            if entry.namespace == PINS_NAMESPACE:
                pin = entry
            else:
                bucket = entry
        return pin, bucket

    def _derive_checked_in_tx(self, *, parent: Event, envelope: Envelope, now: datetime, by: str) -> Accepted:
        root_seq = parent.root_seq
        minute = minute_start(now)
        pin, bucket = self._read_pin_and_bucket(root_seq, minute, lock=True)
        limits = self._pin_in_tx(root_seq, now) if pin is None else pin_from_value(root_seq, pin.value).limits
        refusal = _depth_refusal(parent=parent, root_seq=root_seq, limits=limits)
        if refusal is not None:
            raise _Refused(refusal)
        count = self._take_token_in_tx(root_seq, minute, limits.rate_per_minute, bucket, now)
        if count is not None:
            raise _Refused(
                _rate_refusal(parent=parent, root_seq=root_seq, limits=limits, minute=minute, count=count)
            )
        accepted = event_accept_in_tx(
            envelope=envelope, clock=lambda: now, parent=parent, accepted_by=by or DEFAULT_ACCEPTED_BY
        )
        if not accepted.created:
            # Accepted meanwhile by a writer that skipped the acceptance lock: a duplicate
            # spends nothing, so give the token (and a fresh pin) back.
            raise _Replayed(accepted)
        return accepted

    def _pin_in_tx(self, root_seq: int, now: datetime) -> Limits:
        """Pin this object's limits for ``root_seq``, or return the pin another writer made."""
        value = {
            "max_depth": self.limits.max_depth,
            "rate_per_minute": self.limits.rate_per_minute,
            "pinned_at": now.isoformat(),
        }
        try:
            with transaction.atomic():
                KV.objects.create(
                    namespace=PINS_NAMESPACE, key=pin_key(root_seq), value=value, updated_at=now
                )
        except IntegrityError:
            entry = KV.objects.get(namespace=PINS_NAMESPACE, key=pin_key(root_seq))
            return pin_from_value(root_seq, entry.value).limits
        return self.limits

    @staticmethod
    def _take_token_in_tx(
        root_seq: int, minute: datetime, limit: int, bucket: KV | None, now: datetime
    ) -> int | None:
        """Spend one token of the (root, minute) bucket; ``None`` when spent, else the full
        bucket's count (nothing spent)."""
        key = bucket_key(root_seq, minute)
        value = {"root_seq": root_seq, "minute": minute.isoformat(), "limit": limit}
        if bucket is None:
            if limit < 1:
                return 0
            try:
                with transaction.atomic():
                    KV.objects.create(
                        namespace=BUCKETS_NAMESPACE, key=key, value={**value, "count": 1}, updated_at=now
                    )
                return None
            except IntegrityError:
                # A concurrent first token created the row: lock it and count on it.
                bucket = KV.objects.select_for_update().get(namespace=BUCKETS_NAMESPACE, key=key)
        count = _bucket_count(bucket)
        if count >= limit:
            return count
        KV.objects.filter(pk=bucket.pk).update(
            value={**value, "count": count + 1}, version=F("version") + 1, updated_at=now
        )
        return None
