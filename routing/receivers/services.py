"""Receiving a delivery: verified, mapped, accepted (each Event through
``routing.acceptance.services``), and every refusal counted per receiver.

:func:`delivery_accept` is what ``POST /hooks/<name>`` calls; :func:`delivery_map` is the same
verification and mapping without accepting (``manage.py receivers test``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F

from causal.clock import Clock
from causal.models import Event
from routing.acceptance.envelopes import (
    BatchConflict,
    EnvelopeInvalid,
    EventConflict,
    EventTooLarge,
    check_size,
)
from routing.acceptance.services import event_accept, events_accept
from routing.config.receivers import ReceiverSpec
from routing.models import ReceiverCount
from routing.receivers.kinds import kind_get
from routing.receivers.mapping import Mapped
from routing.receivers.selectors import HANDSHAKE, receiver_find
from routing.receivers.verify import Delivery, Refusal, Refused, secret_read

logger = logging.getLogger("conduit.receivers")

_MESSAGE_MAX = ReceiverCount._meta.get_field("last_message").max_length


@dataclass(frozen=True, slots=True)
class Received:
    """One Event a delivery was accepted as: new (``created``) or the duplicate of one
    accepted before (a redelivery)."""

    event: Event
    created: bool


@dataclass(frozen=True, slots=True)
class DeliveryResult:
    """What became of a delivery: the Events it was accepted as, in order, or the reply the
    sender expects instead (nothing stored)."""

    receiver: str
    received: tuple[Received, ...] = ()
    reply: dict[str, Any] | None = None

    @property
    def created(self) -> bool:
        """Whether any Event is new."""
        return any(item.created for item in self.received)


def delivery_accept(*, name: str, delivery: Delivery, clock: Clock) -> DeliveryResult:
    """Verify a delivery to receiver ``name`` of the live configuration, map it and accept its
    Events (``accepted_by`` ``receiver:<name>``).

    Raises :class:`~routing.receivers.selectors.ReceiverNotFound` (no such receiver; nothing
    counted), :class:`~routing.receivers.verify.Refused` (a wrong or missing signature, a stale
    timestamp, an unreadable secret, a body that cannot be mapped) and the acceptance's
    :class:`~routing.acceptance.envelopes.EnvelopeInvalid` (a body too large, an Event
    acceptance refuses, a delivery id seen with another body). Each refusal is counted for the
    receiver and nothing else is stored. A redelivery is the duplicate it is
    (``created=False``); a handshake (GitHub's ping, Slack's ``url_verification``) is answered
    with ``reply`` and counted.
    """
    spec = receiver_find(name)
    try:
        check_size(len(delivery.body), settings.CONDUIT_MAX_EVENT_BYTES, what="the delivery")
        mapped = _verified(spec, delivery, clock=clock, replay_window=True)
        if mapped.reply is not None:
            receiver_count(
                receiver=spec.name, outcome=HANDSHAKE, message=_handshake(mapped.reply), clock=clock
            )
            return DeliveryResult(receiver=spec.name, reply=mapped.reply)
        received = _accepted(spec, mapped.events, clock=clock)
    except Refused as exc:
        _refused(spec, exc.refusal, exc.detail, clock=clock)
        raise
    except EnvelopeInvalid as exc:
        if isinstance(exc, EventTooLarge):
            refusal = Refusal.EVENT_TOO_LARGE
        elif isinstance(exc, EventConflict | BatchConflict):
            refusal = Refusal.CONFLICTING_DUPLICATE
        else:
            refusal = Refusal.INVALID_EVENT
        _refused(spec, refusal, str(exc), clock=clock)
        raise
    return DeliveryResult(receiver=spec.name, received=received)


def delivery_map(*, spec: ReceiverSpec, delivery: Delivery, clock: Clock, verify: bool = True) -> Mapped:
    """What ``spec`` makes of a saved delivery, accepting nothing and counting nothing: verified
    with the secret (unless ``verify`` is off; a timestamp outside the replay window is a note,
    not a refusal), then mapped. Raises :class:`~routing.receivers.verify.Refused`."""
    if not verify:
        return kind_get(spec.kind).map(spec, delivery)
    return _verified(spec, delivery, clock=clock, replay_window=False)


def _verified(spec: ReceiverSpec, delivery: Delivery, *, clock: Clock, replay_window: bool) -> Mapped:
    kind = kind_get(spec.kind)
    secret = secret_read(spec.secret)
    notes = kind.verify(spec, delivery, secret, now=clock(), replay_window=replay_window)
    mapped = kind.map(spec, delivery)
    return Mapped(events=mapped.events, reply=mapped.reply, notes=(*notes, *mapped.notes))


def _accepted(
    spec: ReceiverSpec, events: tuple[dict[str, Any], ...], *, clock: Clock
) -> tuple[Received, ...]:
    """Accept the mapped Events: one through the shared group commit, several as one batch
    (all or nothing). Where the kind's sender repeats an Event with details changed, an id
    accepted before stands as a duplicate."""
    repeats_may_differ = kind_get(spec.kind).repeats_may_differ
    if len(events) == 1:
        try:
            accepted = event_accept(
                payload=events[0], clock=clock, accepted_by=spec.accepted_by, depth_checked=True
            )
        except EventConflict as exc:
            if not repeats_may_differ:
                raise
            return (Received(Event.objects.get(seq=exc.seq), created=False),)
        return (Received(accepted.event, accepted.created),)
    try:
        results = events_accept(
            payloads=list(events), clock=clock, accepted_by=spec.accepted_by, depth_checked=True
        )
    except BatchConflict as exc:
        if not repeats_may_differ:
            raise
        standing = {error.index: error.seq for error in exc.errors if isinstance(error, EventConflict)}
        rest = [event for index, event in enumerate(events) if index not in standing]
        fresh = iter(
            events_accept(payloads=rest, clock=clock, accepted_by=spec.accepted_by, depth_checked=True)
            if rest
            else ()
        )
        stood = Event.objects.in_bulk(list(standing.values()))
        return tuple(
            Received(stood[standing[index]], created=False) if index in standing else _received(next(fresh))
            for index in range(len(events))
        )
    return tuple(_received(result) for result in results)


def _received(accepted: Any) -> Received:
    return Received(accepted.event, accepted.created)


def _handshake(reply: dict[str, Any]) -> str:
    if "challenge" in reply:
        return "answered Slack's url_verification challenge"
    return str(reply.get("message") or reply.get("status") or "handshake")


def _refused(spec: ReceiverSpec, refusal: Refusal, message: str, *, clock: Clock) -> None:
    logger.warning(
        "receiver.refused",
        extra={"receiver": spec.name, "kind": spec.kind, "reason": str(refusal), "detail": message},
    )
    receiver_count(receiver=spec.name, outcome=refusal, message=message, clock=clock)


def receiver_count(*, receiver: str, outcome: str, message: str, clock: Clock) -> None:
    """Count one ``outcome`` (a :class:`~routing.receivers.verify.Refusal`, or ``handshake``) for
    ``receiver``, with its message and time, in one transaction."""
    now = clock()
    message = message[:_MESSAGE_MAX]
    with transaction.atomic():
        counted = ReceiverCount.objects.filter(receiver=receiver, outcome=outcome).update(
            count=F("count") + 1, last_at=now, last_message=message
        )
        if counted:
            return
        try:
            with transaction.atomic():
                ReceiverCount.objects.create(
                    receiver=receiver,
                    outcome=outcome,
                    count=1,
                    first_at=now,
                    last_at=now,
                    last_message=message,
                )
        except IntegrityError:
            # Another request counted the first one meanwhile: count this one on its row.
            ReceiverCount.objects.filter(receiver=receiver, outcome=outcome).update(
                count=F("count") + 1, last_at=now, last_message=message
            )
