"""Timers (R56): an attempt schedules one for its Work, the work loop finds the due ones and
fires them.

A timer with a causation parent fires through the same derived boundary as any derived
Event (``causal.limits.Causal.derive_in_tx``): the causal limits may refuse it, and then
the timer is marked refused with its diagnostic, atomically. A timer without a parent
fires as a root (source ``core.timer``). Either way the timer's state and its Event commit
together: a timer is fired (``fired_event`` set) or refused, never half of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from causal.checks import EnvelopeInvalid, check_envelope, is_reserved
from causal.clock import Clock
from causal.limits import Causal, CausalRefused, derived_atomic, refusal_record_in_tx
from causal.models import CausalDiagnostic, Event
from causal.services import Envelope, acceptance_lock_in_tx, event_accept_in_tx
from worklife.attempts import current_attempt_in_tx
from worklife.errors import WorkError
from worklife.models import Timer, TimerState

TIMER_SOURCE = "core.timer"


class TimerError(Exception):
    """The timer cannot fire: it does not exist, is not due yet, or was cancelled."""


@dataclass(frozen=True, slots=True)
class TimerOutcome:
    """What firing a timer did: ``state`` is the timer's state afterwards.

    ``event`` is the fired Event (``created`` says whether this call accepted it);
    ``diagnostic`` is the refusal's record when the causal limits refused the timer.
    """

    timer_id: int
    state: str
    event: Event | None = None
    created: bool = False
    diagnostic: CausalDiagnostic | None = None


def timer_schedule(
    *, attempt_id: int, lease_epoch: int, after: float, type: str, data: Any, clock: Clock
) -> Timer:
    """A timer owned by the attempt's Work, derived from the attempt's trigger (R56).

    The Event it fires is held to acceptance's limits now (a type within the limit and not
    reserved, data within ``CONDUIT_MAX_EVENT_BYTES``: :mod:`causal.checks`); raises
    :class:`~worklife.errors.WorkError` naming the field, never cuts anything."""
    if isinstance(after, bool) or not isinstance(after, int | float) or after < 0:
        raise WorkError(f"after must be a non-negative number of seconds, got {after!r}")
    if not isinstance(type, str) or not type or is_reserved(type):
        raise WorkError(f"type {type!r} is empty or reserved for core code")
    with transaction.atomic():
        attempt = current_attempt_in_tx(attempt_id, lease_epoch)
        now = clock()
        timer = Timer(
            work_id=attempt.work_id,
            due_at=now + timedelta(seconds=after),
            type=type,
            data=data,
            parent_id=attempt.trigger_id,
            created_at=now,
        )
        try:
            check_envelope(timer_envelope(timer, scope=attempt.work.scope))
        except EnvelopeInvalid as invalid:
            raise WorkError(str(invalid)) from invalid
        timer.save(force_insert=True)
        return timer


def timers_due(*, now: datetime, limit: int = 100) -> list[int]:
    """Pending timers due now, oldest first."""
    return list(
        Timer.objects.filter(state=TimerState.PENDING, due_at__lte=now)
        .order_by("due_at")
        .values_list("pk", flat=True)[:limit]
    )


def timer_envelope(timer: Timer, *, scope: str | None = None) -> Envelope:
    """The Event a timer fires: ``core.timer`` source, the timer's type and data, its Work
    (in ``scope``, by default read from it) as the explicit target. Its id is stable, so
    firing twice accepts it once."""
    return Envelope(
        id=f"timer/{timer.pk}",
        source=TIMER_SOURCE,
        type=timer.type,
        scope=scope if scope is not None else timer.work.scope,
        time=timer.due_at,
        data=timer.data,
        work_id=timer.work_id,
    )


def timer_fire(*, timer_id: int, clock: Clock, causal: Causal | None = None) -> TimerOutcome:
    """Fire a due timer: accept its Event (derived from its parent when it has one) and mark
    it fired, or mark it refused when the causal limits refuse it, in one transaction.

    Firing a timer that already fired or was refused returns that outcome again. Raises
    :class:`TimerError` for an unknown, cancelled or not yet due timer. ``causal`` defaults
    to ``Causal(clock)``.
    """
    causal = causal if causal is not None else Causal(clock)
    with derived_atomic():
        # The acceptance lock first, then the timer row: the order every writer uses.
        acceptance_lock_in_tx()
        timer = (
            Timer.objects.select_for_update(of=("self",))
            .select_related("work", "parent", "fired_event")
            .filter(pk=timer_id)
            .first()
        )
        if timer is None:
            raise TimerError(f"timer {timer_id} does not exist")
        if timer.state == TimerState.FIRED:
            return TimerOutcome(timer_id=timer.pk, state=timer.state, event=timer.fired_event)
        if timer.state == TimerState.REFUSED:
            return TimerOutcome(timer_id=timer.pk, state=timer.state)
        if timer.state != TimerState.PENDING:
            raise TimerError(f"timer {timer_id} is {timer.state}; only a pending timer fires")
        now = causal.now()
        if timer.due_at > now:
            raise TimerError(f"timer {timer_id} is not due until {timer.due_at:%Y-%m-%dT%H:%M:%S}Z")
        if timer.work.is_terminal:
            # Terminal Work takes no new input (R49); a timer Cancel missed just ends.
            timer.state = TimerState.CANCELLED
            timer.save(update_fields=["state"])
            return TimerOutcome(timer_id=timer.pk, state=timer.state)
        envelope = timer_envelope(timer)
        if timer.parent_id is None:
            accepted = event_accept_in_tx(envelope=envelope, clock=lambda: now, accepted_by=TIMER_SOURCE)
        else:
            try:
                accepted = causal.derive_in_tx(
                    parent=timer.parent, envelope=envelope, accepted_by=TIMER_SOURCE
                )
            except CausalRefused as refused:
                # The refusal wrote nothing; the timer's refusal and its diagnostic commit
                # together in this transaction.
                diagnostic = refusal_record_in_tx(refused)
                timer.state = TimerState.REFUSED
                timer.save(update_fields=["state"])
                return TimerOutcome(timer_id=timer.pk, state=timer.state, diagnostic=diagnostic)
        timer.state = TimerState.FIRED
        timer.fired_event = accepted.event
        timer.save(update_fields=["state", "fired_event"])
        return TimerOutcome(
            timer_id=timer.pk, state=timer.state, event=accepted.event, created=accepted.created
        )
