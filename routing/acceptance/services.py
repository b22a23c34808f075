"""Acceptance: an offered Event (or a batch) validated, its scope checked against the live
configuration and committed, one transaction each (concurrent offers of one process share a
commit: :class:`GroupCommit`)."""

from __future__ import annotations

import copy
import functools
import threading
from collections.abc import Sequence
from typing import Any

from django.db import connection, transaction

from causal.checks import check_event_size
from causal.clock import Clock
from causal.models import Event
from causal.services import (
    Accepted,
    Envelope,
    envelope_digest,
    event_accept_in_tx,
    event_envelope,
    events_accept_in_tx,
)
from routing.acceptance.envelopes import (
    BatchConflict,
    BatchInvalid,
    EnvelopeInvalid,
    EventConflict,
    parse_envelope,
    parse_envelopes,
)
from routing.config.selectors import live_default_scope, live_generation
from routing.models import Generation, GenerationKind, Scope

# What addressing a Work needs, by ``work_id``/``execution_id`` or by correlation keys the sender
# chooses: the right to send it input.
SEND_INPUT = "worklife.send_input"


class WorkAddressRefused(EnvelopeInvalid):
    """An Event names its own targets, a Work (``work_id``), an attempt (``execution_id``) or
    correlation keys (``correlation``: each key's owner Work), but its sender may not send input
    to Work (``worklife.send_input``): acceptance rights alone address no Work. The keys of such
    a sender's Events are its routes' (their key templates)."""

    code = "forbidden"

    def details(self) -> dict[str, Any]:
        return {**super().details(), "permission": SEND_INPUT}


def _refuse_work_addresses(envelopes: Sequence[Envelope], *, batch: bool) -> None:
    """The one rule of a sender without the send permission: it names no Work, by id or by key."""
    for index, envelope in enumerate(envelopes):
        if envelope.work_id is not None or envelope.execution_id is not None:
            field = "work_id" if envelope.work_id is not None else "execution_id"
            what, instead = f"addressing a Work by {field}", ""
        elif envelope.correlation:
            field, what = "correlation", "choosing correlation keys"
            instead = " (leave correlation out: the Event's routes choose its keys)"
        else:
            continue
        raise WorkAddressRefused(
            field,
            f"{what} needs the permission {SEND_INPUT} (an API token's 'send' scope), which this "
            f"sender lacks{instead}: nothing was accepted",
            index=index if batch else None,
        )


# --- acceptance -----------------------------------------------------------------------------


def event_accept(
    *,
    payload: Any,
    clock: Clock,
    accepted_by: str = "",
    trusted: bool = False,
    depth_checked: bool = False,
    default_scope: str | None = None,
    may_address_work: bool = False,
) -> Accepted:
    """Validate one offered Event (a decoded structured-mode CloudEvent) and accept it.

    An Event without ``scope`` takes ``default_scope`` (its sender's: an API token's, a
    receiver's), else the live configuration's ``default_scope``; without either it is refused
    saying how to set one (:data:`~routing.acceptance.envelopes.NO_SCOPE`).

    The durable commit is the acknowledgement. The same ``(source, id)`` accepted before with
    the same body returns that Event with ``created=False`` and stores nothing; with another
    body it raises :class:`~routing.acceptance.envelopes.EventConflict` (both digests). Raises
    :class:`~routing.acceptance.envelopes.EnvelopeInvalid` naming the field at fault (nothing stored):
    a malformed envelope, a reserved ``core`` type or source unless ``trusted``, an Event
    larger than ``CONDUIT_MAX_EVENT_BYTES``, or a scope not in the live configuration.
    ``depth_checked``: the payload was decoded from JSON text whose depth was checked
    (:func:`routing.acceptance.envelopes.parse_envelope`). An Event that names a Work
    (``work_id``, ``execution_id``) or chooses its correlation keys (``correlation``) is refused
    with :class:`WorkAddressRefused` unless the sender may send input to Work
    (``may_address_work``; ``trusted`` callers may).
    """
    envelope = _validated(
        payload,
        trusted=trusted,
        depth_checked=depth_checked,
        default_scope=scope_default_for([payload], default_scope),
    )
    if not (trusted or may_address_work):
        _refuse_work_addresses([envelope], batch=False)
    if not connection.in_atomic_block:
        return ACCEPTANCES.accept(envelope, clock=clock, accepted_by=accepted_by)
    with transaction.atomic():
        _refuse_unknown_scopes_in_tx([envelope], batch=False)
        accepted = event_accept_in_tx(envelope=envelope, clock=clock, accepted_by=accepted_by)
        conflicts = _conflicts([envelope], [accepted])
        if conflicts:
            raise conflicts[0]
        return accepted


class _Offer:
    """One caller's Event waiting in a group commit, and what became of it."""

    __slots__ = ("accepted", "accepted_by", "done", "envelope", "error")

    def __init__(self, envelope: Envelope, accepted_by: str) -> None:
        self.envelope = envelope
        self.accepted_by = accepted_by
        self.accepted: Accepted | None = None
        self.error: BaseException | None = None
        self.done = False


class GroupCommit:
    """Acceptances of one process's concurrent callers (the web server's request threads)
    committed together: one transaction, one flush to disk, for every Event offered while
    the previous commit was being made.

    A caller offers its validated Event and waits. When no commit is in progress, the caller
    whose Event is still waiting takes every waiting Event and commits them in arrival order
    (``seq`` follows it), as one batch acceptance does: each Event keeps its own answer
    (created, duplicate, conflict, unknown scope), and every caller returns only after the
    commit that holds its Event; when the commit fails, every caller of the group raises.
    The flush dominates an acceptance (SQLite ``synchronous=FULL`` and PostgreSQL alike);
    alone, a caller forms a group of one at the cost it had before.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._waiting: list[_Offer] = []
        self._committing = False

    def accept(self, envelope: Envelope, *, clock: Clock, accepted_by: str) -> Accepted:
        offer = _Offer(envelope, accepted_by)
        group: list[_Offer] = []
        with self._changed:
            self._waiting.append(offer)
            while not offer.done and self._committing:
                self._changed.wait()
            if not offer.done:
                group, self._waiting = self._waiting, []
                self._committing = True
        if group:
            try:
                _commit_group(group, clock=clock)
            except BaseException as exc:
                for other in group:
                    other.error = exc if other is offer else _copied(exc)
                raise
            finally:
                with self._changed:
                    for other in group:
                        other.done = True
                    self._committing = False
                    self._changed.notify_all()
        if offer.error is not None:
            raise offer.error
        assert offer.accepted is not None
        return offer.accepted


def _copied(exc: BaseException) -> BaseException:
    """The same error for another thread to raise (one exception object raised in several
    threads would share, and tangle, one traceback)."""
    try:
        return copy.copy(exc).with_traceback(None)
    except Exception:  # noqa: BLE001 - an exception class that cannot be copied
        return RuntimeError(f"the group commit holding this Event failed: {exc!r}")


def _commit_group(group: list[_Offer], *, clock: Clock) -> None:
    """Accept the group's Events in one transaction, each with its own answer."""
    with transaction.atomic():
        known = live_scopes_among(sorted({offer.envelope.scope for offer in group}))
        admitted: list[_Offer] = []
        for offer in group:
            if offer.envelope.scope not in known:
                try:
                    _refuse_unknown_scopes_in_tx([offer.envelope], batch=False)
                except EnvelopeInvalid as exc:
                    offer.error = exc
                    continue
            admitted.append(offer)
        if not admitted:
            return
        envelopes = [offer.envelope for offer in admitted]
        results = events_accept_in_tx(
            envelopes=envelopes, clock=clock, accepted_by=[offer.accepted_by for offer in admitted]
        )
        conflicts = _conflicts(envelopes, results)
        for index, (offer, result) in enumerate(zip(admitted, results, strict=True)):
            if index in conflicts:
                offer.error = conflicts[index]
            else:
                offer.accepted = result


# The group commit of this process's acceptances (event_accept).
ACCEPTANCES = GroupCommit()


def events_accept(
    *,
    payloads: Sequence[Any],
    clock: Clock,
    accepted_by: str = "",
    trusted: bool = False,
    depth_checked: bool = False,
    default_scope: str | None = None,
    may_address_work: bool = False,
) -> list[Accepted]:
    """Validate every Event of a batch, then accept them all in one transaction, in order.

    All or nothing: when any Event is refused, :class:`~routing.acceptance.envelopes.BatchInvalid` lists
    every refusal (each with its ``index``) and nothing is stored. Duplicates (of earlier
    Events or of an earlier Event in the same batch) come back with ``created=False``; one
    with another body than the Event it repeats refuses the batch with
    :class:`~routing.acceptance.envelopes.BatchConflict`. ``depth_checked``, ``default_scope`` and
    ``may_address_work`` as for :func:`event_accept`.
    """
    if not payloads:
        raise EnvelopeInvalid(None, "the batch is empty: it holds no Event")
    envelopes = _validated_batch(
        payloads,
        trusted=trusted,
        depth_checked=depth_checked,
        default_scope=scope_default_for(payloads, default_scope),
    )
    if not (trusted or may_address_work):
        _refuse_work_addresses(envelopes, batch=True)
    with transaction.atomic():
        _refuse_unknown_scopes_in_tx(envelopes, batch=True)
        results = events_accept_in_tx(envelopes=envelopes, clock=clock, accepted_by=accepted_by)
        conflicts = _conflicts(envelopes, results)
        if conflicts:
            raise BatchConflict([conflict.at(index) for index, conflict in conflicts.items()])
        return results


def _conflicts(envelopes: Sequence[Envelope], results: Sequence[Accepted]) -> dict[int, EventConflict]:
    """The duplicates whose body differs from the Event they repeat, by position."""
    conflicts: dict[int, EventConflict] = {}
    for index, (envelope, result) in enumerate(zip(envelopes, results, strict=True)):
        if not result.created:
            conflict = duplicate_conflict(envelope, result.event)
            if conflict is not None:
                conflicts[index] = conflict
    return conflicts


def duplicate_conflict(envelope: Envelope, accepted_event: Event) -> EventConflict | None:
    """Why acceptance answers 409 to ``envelope``, which repeats the ``(source, id)`` of
    ``accepted_event`` with another body; ``None`` when it is the same Event (stored once)."""
    accepted, offered = envelope_digest(event_envelope(accepted_event)), envelope_digest(envelope)
    if accepted == offered:
        return None
    return EventConflict(
        f"source {envelope.source!r} already sent an Event with id {envelope.id!r} "
        f"(#{accepted_event.seq}) with another body: the digest accepted is {accepted}, this "
        f"one is {offered}; send a new id for a new Event",
        seq=accepted_event.seq,
        accepted=accepted,
        offered=offered,
    )


def scope_default_for(payloads: Sequence[Any], given: str | None) -> str | None:
    """The default scope of ``payloads``: ``given`` (the sender's), else, when one of them has
    no scope, the live configuration's ``default_scope`` (one query, only then)."""
    if given:
        return given
    if any(isinstance(payload, dict) and payload.get("scope") is None for payload in payloads):
        return live_default_scope()
    return None


def _validated(
    payload: Any, *, trusted: bool, depth_checked: bool = False, default_scope: str | None = None
) -> Envelope:
    envelope = parse_envelope(
        payload, trusted=trusted, depth_checked=depth_checked, default_scope=default_scope
    )
    check_event_size(payload)
    return envelope


def _validated_batch(
    payloads: Sequence[Any], *, trusted: bool, depth_checked: bool = False, default_scope: str | None = None
) -> list[Envelope]:
    errors: list[EnvelopeInvalid] = []
    try:
        envelopes = parse_envelopes(
            list(payloads), trusted=trusted, depth_checked=depth_checked, default_scope=default_scope
        )
    except BatchInvalid as exc:
        errors.extend(exc.errors)
        envelopes = []
    failed = {error.index for error in errors}
    for index, payload in enumerate(payloads):
        if index in failed:
            continue
        try:
            check_event_size(payload)
        except EnvelopeInvalid as exc:
            errors.append(exc.at(index))
    if errors:
        raise BatchInvalid(sorted(errors, key=lambda error: error.index or 0))
    return envelopes


def _refuse_unknown_scopes_in_tx(envelopes: Sequence[Envelope], *, batch: bool) -> None:
    """Refuse Events whose scope is not in the live generation (the newest applied one).

    A retry of an Event already accepted is not refused: it is acknowledged as the
    duplicate it is, whatever the configuration says now.
    """
    paths = sorted({envelope.scope for envelope in envelopes})
    known = live_scopes_among(paths)
    if all(envelope.scope in known for envelope in envelopes):
        return
    live = live_generation()
    errors = []
    for index, envelope in enumerate(envelopes):
        if envelope.scope in known:
            continue
        if Event.objects.filter(source=envelope.source, envelope_id=envelope.id).exists():
            continue
        if live is None:
            message = f"unknown scope {envelope.scope!r}: no configuration has been applied yet"
        else:
            message = (
                f"unknown scope {envelope.scope!r}: it is not in the live configuration "
                f"(generation {live.number})"
            )
        errors.append(EnvelopeInvalid("scope", message, index=index if batch else None))
    if errors:
        raise BatchInvalid(errors) if batch else errors[0]


def live_scopes_among(paths: Sequence[str]) -> set[str]:
    """Those of ``paths`` that are scopes of the live generation (the newest applied one).

    One statement on the way of every acceptance, written out once: the ORM's building and
    compiling of the same query cost several times its run on SQLite.
    """
    known: set[str] = set()
    with connection.cursor() as cursor:
        for start in range(0, len(paths), 500):
            chunk = paths[start : start + 500]
            cursor.execute(_live_scope_paths_sql(len(chunk)), [GenerationKind.APPLIED, *chunk])
            known.update(path for (path,) in cursor.fetchall())
    return known


@functools.cache
def _live_scope_paths_sql(count: int) -> str:
    quote = connection.ops.quote_name
    scope, generation = Scope._meta, Generation._meta
    return (
        f"SELECT {quote(scope.get_field('path').column)} FROM {quote(scope.db_table)} "
        f"WHERE {quote(scope.get_field('generation').column)} = ("
        f"SELECT {quote(generation.pk.column)} FROM {quote(generation.db_table)} "
        f"WHERE {quote(generation.get_field('kind').column)} = %s "
        f"ORDER BY {quote(generation.get_field('number').column)} DESC LIMIT 1) "
        f"AND {quote(scope.get_field('path').column)} IN ({', '.join(['%s'] * count)})"
    )
