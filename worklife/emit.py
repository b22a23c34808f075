"""Emit: derived acceptance for code running inside an attempt (R51), and the envelope an
attempt's ``emit`` call becomes.

Code running in an attempt never chooses its parent. The parent is the fenced attempt's
immutable trigger; a supplied ``parent_seq`` may only repeat it. An attempt cannot emit
reserved ``core.*`` types or sources, nor an Event whose explicit identity (``work_id``,
``execution_id``) names another Work or attempt. Then the causal limits decide
(``causal.limits.Causal.derive_in_tx``). Every refusal raises
:class:`~causal.limits.CausalRefused` and leaves a redacted diagnostic. A call's message that
cannot become an envelope (no type, data nested too deep) is refused before that, with a
:class:`~worklife.errors.WorkError` (:func:`emit_envelope`).

This lives in ``worklife`` because it reads attempts; ``causal`` knows nothing of Work.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.conf import settings

from causal.limits import Causal, Refusal, derived_atomic, is_reserved, refuse
from causal.models import DiagnosticKind, Event
from causal.services import Accepted, Envelope, acceptance_lock_in_tx, assert_in_tx
from worklife.errors import WorkError
from worklife.models import Attempt, Work

# What an emitted Event records as its acceptor when the caller names none.
EMIT_ACCEPTED_BY = "core.emit"


def emit(
    *,
    attempt_id: int,
    lease_epoch: int,
    envelope: Envelope,
    parent_seq: int | None = None,
    causal: Causal | None = None,
    accepted_by: str = "",
) -> Accepted:
    """Accept ``envelope`` as a child of attempt ``attempt_id``'s trigger, in its own transaction.

    ``lease_epoch`` must be the attempt's current epoch and the attempt must be active.
    ``causal`` defaults to ``Causal()`` (the system clock and the configured limits).
    Returns the accepted (or deduplicated) Event; raises ``CausalRefused`` after writing
    the refusal's diagnostic.
    """
    causal = causal if causal is not None else Causal()
    with derived_atomic():
        return emit_in_tx(
            attempt_id=attempt_id,
            lease_epoch=lease_epoch,
            envelope=envelope,
            parent_seq=parent_seq,
            causal=causal,
            accepted_by=accepted_by,
        )


def emit_in_tx(
    *,
    attempt_id: int,
    lease_epoch: int,
    envelope: Envelope,
    causal: Causal,
    parent_seq: int | None = None,
    accepted_by: str = "",
) -> Accepted:
    """:func:`emit` inside the caller's transaction, which must be a
    ``causal.limits.derived_atomic()`` block: the Event commits with the caller's effects."""
    assert_in_tx()
    if not isinstance(envelope, Envelope):
        raise TypeError(f"envelope must be a causal.services.Envelope, got {type(envelope).__name__}")
    for name, value in (("attempt_id", attempt_id), ("lease_epoch", lease_epoch)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an integer, got {value!r}")
    if parent_seq is not None and (isinstance(parent_seq, bool) or not isinstance(parent_seq, int)):
        raise TypeError(f"parent_seq must be an integer or None, got {parent_seq!r}")
    # Lock order everywhere: the acceptance lock first, then rows (here the attempt, so its
    # epoch cannot move while the Event is accepted).
    acceptance_lock_in_tx()
    attempt = (
        Attempt.objects.select_for_update(of=("self",))
        .select_related("trigger")
        .filter(pk=attempt_id)
        .first()
    )
    now = causal.now()
    refusal = _fence(attempt, attempt_id=attempt_id, lease_epoch=lease_epoch, now=now)
    if refusal is None:
        refusal = _identity(attempt, envelope=envelope, parent_seq=parent_seq)
    if refusal is not None:
        raise refuse(
            refusal,
            clock=lambda: now,
            envelope=envelope,
            work_id=attempt.work_id if attempt is not None else None,
            attempt_id=attempt_id,
        )
    return causal.derive_in_tx(
        parent=attempt.trigger, envelope=envelope, accepted_by=accepted_by or EMIT_ACCEPTED_BY
    )


def emit_envelope(*, work: Work, attempt_id: int, message: dict) -> Envelope:
    """The envelope of an Event an attempt emits: its Work's scope, a source naming the Work
    unless the call names one, a fresh id unless it names one."""
    event_id = message.get("event_id") or f"emit/{attempt_id}/{uuid.uuid4().hex}"
    event_type = message.get("type")
    if not isinstance(event_type, str) or not event_type:
        raise WorkError("emit needs a type")
    limit = int(getattr(settings, "CONDUIT_MAX_JSON_DEPTH", 64))
    if json_depth(message.get("data")) > limit:
        raise WorkError(f"data nests deeper than {limit} levels (CONDUIT_MAX_JSON_DEPTH)")
    return Envelope(
        id=str(event_id)[:255],
        source=str(message.get("source") or f"conduit.work/{work.pk}")[:255],
        type=event_type[:255],
        scope=work.scope,
        subject=str(message.get("subject") or "")[:255],
        data=message.get("data"),
    )


def json_depth(value: Any) -> int:
    """How deep JSON-like data nests (a scalar is 0), counted without recursion."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _root_of(attempt: Attempt | None) -> int | None:
    trigger: Event | None = attempt.trigger if attempt is not None else None
    return trigger.root_seq if trigger is not None else None


def _fence(attempt: Attempt | None, *, attempt_id: int, lease_epoch: int, now: datetime) -> Refusal | None:
    """A stale-lease refusal unless ``attempt`` is active under ``lease_epoch``."""
    stale = DiagnosticKind.STALE_LEASE
    if attempt is None:
        return Refusal(kind=stale, detail=f"attempt {attempt_id} does not exist")
    root = _root_of(attempt)
    if not attempt.is_active:
        return Refusal(
            kind=stale, detail=f"attempt {attempt_id} is {attempt.state}, not active", root_seq=root
        )
    if attempt.lease_epoch != lease_epoch:
        return Refusal(
            kind=stale,
            detail=f"lease epoch {lease_epoch} is stale: attempt {attempt_id} holds epoch {attempt.lease_epoch}",
            root_seq=root,
        )
    if attempt.lease_until is not None and attempt.lease_until <= now:
        return Refusal(
            kind=stale,
            detail=f"attempt {attempt_id}'s lease expired at {attempt.lease_until:%Y-%m-%dT%H:%M:%S}Z",
            root_seq=root,
        )
    return None


def _identity(attempt: Attempt, *, envelope: Envelope, parent_seq: int | None) -> Refusal | None:
    """A refusal when the envelope claims a reserved family, another Work or another parent."""
    root = _root_of(attempt)
    trigger_seq = attempt.trigger_id
    for field, value in (("type", envelope.type), ("source", envelope.source)):
        if is_reserved(value):
            return Refusal(
                kind=DiagnosticKind.RESERVED_TYPE,
                detail=f"{field} {value!r} is reserved for core code",
                root_seq=root,
                parent_seq=trigger_seq,
            )
    if envelope.work_id is not None and envelope.work_id != attempt.work_id:
        return Refusal(
            kind=DiagnosticKind.CROSS_WORK,
            detail=f"work_id {envelope.work_id} names another Work than attempt {attempt.pk}'s Work {attempt.work_id}",
            root_seq=root,
            parent_seq=trigger_seq,
        )
    if envelope.execution_id is not None and envelope.execution_id != attempt.pk:
        return Refusal(
            kind=DiagnosticKind.CROSS_WORK,
            detail=f"execution_id {envelope.execution_id} names another attempt than attempt {attempt.pk}",
            root_seq=root,
            parent_seq=trigger_seq,
        )
    if parent_seq is not None and parent_seq != trigger_seq:
        return Refusal(
            kind=DiagnosticKind.FORGED_PARENT,
            detail=(
                f"parent #{parent_seq} conflicts with attempt {attempt.pk}'s trigger "
                + (f"#{trigger_seq}" if trigger_seq is not None else "(none)")
            ),
            root_seq=root,
            parent_seq=parent_seq,
        )
    if trigger_seq is None:
        return Refusal(
            kind=DiagnosticKind.MISSING_PARENT,
            detail=f"attempt {attempt.pk} has no trigger to derive from",
        )
    return None
