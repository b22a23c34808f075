"""Emit: derived acceptance for code running inside an attempt (R51), and the envelope an
attempt's ``emit`` call becomes.

Code running in an attempt never chooses its parent nor its identity. The parent is the
fenced attempt's immutable trigger; a supplied ``parent_seq`` may only repeat it. The source is
the Work's own, ``conduit.work/<work id>``, or one its binding is configured to speak for
(``emit_sources``); the id is Conduit's (``emit/<work id>/…``, :func:`emit_id`), so no Work can
impersonate another Work or a real sender, nor take an id the system writes itself (a reroute
copy's ``reroute/<id>``). An attempt cannot emit reserved ``core.*`` types or sources, nor an
Event whose explicit identity (``work_id``, ``execution_id``) names another Work or attempt.
Then the causal limits decide (``causal.limits.Causal.derive_in_tx``). Every refusal raises
:class:`~causal.limits.CausalRefused` and leaves a redacted diagnostic. A call's message that
cannot become an envelope within acceptance's limits (no type, a subject too long, data too
large or nested too deep: :mod:`causal.checks`) is refused before that, with a
:class:`~worklife.errors.WorkError` naming the field (:func:`emit_envelope`); nothing is cut.

This lives in ``worklife`` because it reads attempts; ``causal`` knows nothing of Work.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from causal.checks import (
    MAX_ID,
    MAX_SOURCE,
    MAX_SUBJECT,
    MAX_TYPE,
    EnvelopeInvalid,
    check_envelope,
    check_string,
    is_reserved,
    reserved_id_prefix,
    reserved_source_prefix,
)
from causal.limits import Causal, CausalRefused, Refusal, derived_atomic, refuse
from causal.models import DiagnosticKind, Event
from causal.services import Accepted, Envelope, acceptance_lock_in_tx, assert_in_tx
from worklife.errors import WorkError
from worklife.models import Attempt, Work

# What an emitted Event records as its acceptor when the caller names none.
EMIT_ACCEPTED_BY = "core.emit"
# The source of the Events a Work emits: conduit.work/<work id> (reserved: no sender may use it).
WORK_SOURCE_PREFIX = "conduit.work/"


def emit(
    *,
    attempt_id: int,
    lease_epoch: int,
    envelope: Envelope,
    parent_seq: int | None = None,
    causal: Causal | None = None,
    accepted_by: str = "",
    speaks_for: Collection[str] = (),
) -> Accepted:
    """Accept ``envelope`` as a child of attempt ``attempt_id``'s trigger, in its own transaction.

    ``lease_epoch`` must be the attempt's current epoch and the attempt must be active. The
    envelope's source must be the Work's own (:func:`work_source`) or one of ``speaks_for``
    (the binding's ``emit_sources``), and its id may start with a reserved prefix only as this
    Work's emits do (:func:`emit_id`). ``causal`` defaults to ``Causal()`` (the system clock
    and the configured limits). Returns the accepted (or deduplicated) Event; raises
    ``CausalRefused`` after writing the refusal's diagnostic.
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
            speaks_for=speaks_for,
        )


def emit_in_tx(
    *,
    attempt_id: int,
    lease_epoch: int,
    envelope: Envelope,
    causal: Causal,
    parent_seq: int | None = None,
    accepted_by: str = "",
    speaks_for: Collection[str] = (),
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
        refusal = _identity(attempt, envelope=envelope, parent_seq=parent_seq, speaks_for=speaks_for)
    if refusal is not None:
        raise refuse(
            refusal,
            clock=lambda: now,
            envelope=envelope,
            work_id=attempt.work_id if attempt is not None else None,
            attempt_id=attempt_id,
        )
    try:
        return causal.derive_in_tx(
            parent=attempt.trigger, envelope=envelope, accepted_by=accepted_by or EMIT_ACCEPTED_BY
        )
    except CausalRefused as refused:
        # The limits' refusal names the Work and attempt that asked, as emit's own do (its
        # diagnostic is written when the boundary ends).
        if refused.diagnostic.pk is None:
            refused.diagnostic.work_id, refused.diagnostic.attempt_id = attempt.work_id, attempt.pk
        raise


def work_source(work_id: int) -> str:
    """The source of the Events Work ``work_id`` emits: ``conduit.work/<id>``."""
    return f"{WORK_SOURCE_PREFIX}{work_id}"


def emit_id(*, work_id: int, attempt_id: int, ordinal: int, hint: str = "") -> str:
    """The id Conduit gives an emitted Event: ``emit/<work>/id/<hint>`` when the caller gave an
    id hint (the same in every attempt of the Work: emitting it again is a duplicate, not a
    second Event), else ``emit/<work>/<attempt>/<n>`` for the attempt's ``n``-th emit."""
    if hint:
        return f"{emit_id_prefix(work_id)}id/{hint}"
    return f"{emit_id_prefix(work_id)}{attempt_id}/{ordinal}"


def emit_id_prefix(work_id: int) -> str:
    """What every id of an Event Work ``work_id`` emits starts with."""
    return f"emit/{work_id}/"


def emit_envelope(*, work: Work, attempt_id: int, message: dict, ordinal: int) -> Envelope:
    """The envelope of the Event an attempt's ``emit`` call asks for, with Conduit's identity.

    Its source is the Work's own (:func:`work_source`) unless the call names a source, which
    must then be one its binding speaks for (``emit_sources``: :func:`emit_in_tx` refuses any
    other, with a diagnostic); its id is derived (:func:`emit_id`, from the call's
    ``event_id`` hint when it has one, else from ``ordinal``, the attempt's count of emits).
    The type, subject and data are held to acceptance's limits (:func:`causal.checks.check_envelope`),
    never cut. Raises :class:`~worklife.errors.WorkError` naming the field at fault.
    """
    try:
        event_type = check_string(message.get("type"), "type", MAX_TYPE)
        subject = message.get("subject")
        subject = "" if subject is None else check_string(subject, "subject", MAX_SUBJECT, allow_empty=True)
        source = message.get("source")
        source = work_source(work.pk) if source in (None, "") else check_string(source, "source", MAX_SOURCE)
        hint = message.get("event_id")
        hint = "" if hint in (None, "") else check_string(hint, "event_id", MAX_ID)
        prefix = f"{emit_id_prefix(work.pk)}id/"
        if len(prefix) + len(hint) > MAX_ID:
            raise EnvelopeInvalid(
                "event_id",
                f"event_id is {len(hint)} characters long; the limit is {MAX_ID - len(prefix)} "
                f"(the Event's id is {prefix}<event_id>, at most {MAX_ID} characters)",
            )
        event_id = emit_id(work_id=work.pk, attempt_id=attempt_id, ordinal=ordinal, hint=hint)
        return check_envelope(
            Envelope(
                id=event_id,
                source=source,
                type=event_type,
                scope=work.scope,
                subject=subject,
                data=message.get("data"),
            )
        )
    except EnvelopeInvalid as invalid:
        raise WorkError(str(invalid)) from invalid


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


def _identity(
    attempt: Attempt, *, envelope: Envelope, parent_seq: int | None, speaks_for: Collection[str]
) -> Refusal | None:
    """A refusal when the envelope claims a reserved family or identity, speaks for a sender
    its binding does not, names another Work, or another parent."""
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
    own = work_source(attempt.work_id)
    if envelope.source != own:
        if reserved_source_prefix(envelope.source) is not None:
            detail = f"source {envelope.source!r} names another Work than attempt {attempt.pk}'s Work ({own})"
        elif envelope.source not in speaks_for:
            detail = (
                f"source {envelope.source!r} is neither the Work's own ({own}) nor one its binding "
                "speaks for (emit_sources)"
            )
        else:
            detail = ""
        if detail:
            return Refusal(
                kind=DiagnosticKind.CROSS_WORK, detail=detail, root_seq=root, parent_seq=trigger_seq
            )
    prefix = reserved_id_prefix(envelope.id)
    if prefix is not None and not envelope.id.startswith(emit_id_prefix(attempt.work_id)):
        return Refusal(
            kind=DiagnosticKind.RESERVED_ID,
            detail=(
                f"id {envelope.id!r} starts with {prefix!r}, reserved for the Events Conduit writes "
                f"itself (this Work's emits have ids {emit_id_prefix(attempt.work_id)}…)"
            ),
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
