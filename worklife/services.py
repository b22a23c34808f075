"""Writes on Work: attempts (the public storage operations a scheduler uses), waits, and the
scheduler-facing input APIs (R46).

The router never calls these for execution: it only writes route effects (R33). A scheduler
(or a test standing in for one) starts attempts, parks them on waits, consumes their input
and ends them here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import F

from causal.clock import Clock
from causal.services import assert_in_tx
from worklife.models import (
    ACTIVE_ATTEMPT_STATES,
    Attempt,
    AttemptState,
    InputKind,
    InputState,
    Intent,
    IntentState,
    Wait,
    WaitState,
    Work,
    WorkInput,
    WorkStatus,
)


class WorkError(Exception):
    """A Work operation was refused; the message says why."""


class StaleLease(WorkError):
    """The attempt is not the Work's current one, or its lease epoch moved on."""


class WorkTerminal(WorkError):
    """The Work is completed or cancelled: its records are immutable (R49)."""


# --- attempts ------------------------------------------------------------------------------------


def attempt_start(
    *,
    work_id: int,
    binding: str,
    executor: str,
    generation: int,
    capabilities: Iterable[str],
    clock: Clock,
    lease_until: datetime | None = None,
    executor_path: str = "",
    lease_owner: str = "",
) -> Attempt:
    """Start the next attempt of a Work with its configuration pinned (R36).

    The attempt's trigger is the Work's oldest pending input (else the Work's trigger). Its
    lease epoch is one more than the Work's last attempt's, so authority never repeats; the
    database refuses a second live attempt of one Work (W1)."""
    with transaction.atomic():
        work = Work.objects.select_for_update().get(pk=work_id)
        if work.is_terminal:
            raise WorkTerminal(f"Work {work_id} is {work.status}")
        if Attempt.objects.filter(work=work, state__in=ACTIVE_ATTEMPT_STATES).exists():
            raise WorkError(f"Work {work_id} already has an active attempt")
        last, last_epoch = (
            Attempt.objects.filter(work=work).order_by("-number").values_list("number", "lease_epoch").first()
        ) or (0, 0)
        first_input = (
            WorkInput.objects.filter(work=work, state=InputState.PENDING)
            .order_by("seq")
            .values_list("event_id", flat=True)
            .first()
        )
        now = clock()
        try:
            with transaction.atomic():
                attempt = Attempt.objects.create(
                    work=work,
                    number=last + 1,
                    binding=binding,
                    executor=executor,
                    executor_path=executor_path,
                    generation=generation,
                    capabilities=sorted(set(capabilities)),
                    lease_epoch=last_epoch + 1,
                    lease_until=lease_until,
                    lease_owner=lease_owner,
                    trigger_id=first_input or work.trigger_id,
                    state=AttemptState.RUNNING,
                    started_at=now,
                )
        except IntegrityError as exc:
            raise WorkError(f"Work {work_id} already has a live attempt") from exc
        _work_touch(work, status=WorkStatus.RUNNING, now=now)
        return attempt


def attempt_renew_lease(
    *, attempt_id: int, lease_epoch: int, clock: Clock, lease_until: datetime | None = None
) -> Attempt:
    """Fence the attempt with a new lease epoch (a new holder takes it over)."""
    with transaction.atomic():
        attempt = _current_attempt_in_tx(attempt_id, lease_epoch)
        attempt.lease_epoch += 1
        attempt.lease_until = lease_until
        attempt.save(update_fields=["lease_epoch", "lease_until"])
        return attempt


def attempt_wait(
    *,
    attempt_id: int,
    lease_epoch: int,
    match: dict,
    clock: Clock,
    name: str = "",
    timeout_at: datetime | None = None,
) -> Wait:
    """Park the attempt on a wait: the Work waits for an Event matching ``match`` (type and
    source globs, and optionally ``keys``) or for ``timeout_at``."""
    with transaction.atomic():
        attempt = _current_attempt_in_tx(attempt_id, lease_epoch)
        now = clock()
        wait = Wait.objects.create(
            work_id=attempt.work_id,
            attempt=attempt,
            name=name,
            match=dict(match),
            timeout_at=timeout_at,
            created_at=now,
        )
        attempt.state = AttemptState.WAITING
        attempt.save(update_fields=["state"])
        _work_touch(attempt.work, status=WorkStatus.WAITING, now=now)
        return wait


def attempt_end(*, attempt_id: int, lease_epoch: int, state: str, clock: Clock) -> Attempt:
    """End an attempt (succeeded, failed or cancelled).

    Input held for it (R11) and input behind its unconfirmed intents now queue for the next
    attempt; the intents are superseded. The Work is ready again."""
    if state not in (AttemptState.SUCCEEDED, AttemptState.FAILED, AttemptState.CANCELLED):
        raise WorkError(f"an attempt cannot end as {state!r}")
    with transaction.atomic():
        attempt = _current_attempt_in_tx(attempt_id, lease_epoch)
        now = clock()
        attempt_end_in_tx(attempt=attempt, state=state, now=now)
        _work_touch(attempt.work, status=WorkStatus.READY, now=now)
        return attempt


def attempt_end_in_tx(*, attempt: Attempt, state: str, now: datetime) -> None:
    """End ``attempt`` inside the caller's transaction, releasing its held and injected input."""
    assert_in_tx()
    attempt.state = state
    attempt.ended_at = now
    attempt.save(update_fields=["state", "ended_at"])
    superseded = list(
        Intent.objects.filter(attempt=attempt, state=IntentState.PENDING).values_list("event_id", flat=True)
    )
    Intent.objects.filter(attempt=attempt, state=IntentState.PENDING).update(state=IntentState.SUPERSEDED)
    WorkInput.objects.filter(work_id=attempt.work_id, state=InputState.PENDING, kind=InputKind.HELD).update(
        kind=InputKind.QUEUE, attempt=None
    )
    if superseded:
        WorkInput.objects.filter(
            work_id=attempt.work_id, state=InputState.PENDING, event_id__in=superseded
        ).update(kind=InputKind.QUEUE, attempt=None)
    Wait.objects.filter(attempt=attempt, state=WaitState.ACTIVE).update(
        state=WaitState.CANCELLED, ended_at=now
    )


# --- scheduler-facing input APIs (R46) -------------------------------------------------------------


def pending_inputs(*, work_id: int) -> list[WorkInput]:
    """A Work's pending input (queued, injected, held, context) in acceptance order."""
    return list(
        WorkInput.objects.filter(work_id=work_id, state=InputState.PENDING)
        .select_related("event")
        .order_by("seq")
    )


def pending_inputs_in_tx(
    *, work_id: int, kinds: Sequence[str] | None = None, limit: int | None = None
) -> list[WorkInput]:
    """Select and lock a Work's pending input in acceptance order, inside the caller's
    transaction, so selection and claim happen in one guarded transaction (R46)."""
    assert_in_tx()
    query = WorkInput.objects.select_for_update().filter(work_id=work_id, state=InputState.PENDING)
    if kinds is not None:
        query = query.filter(kind__in=list(kinds))
    query = query.order_by("seq")
    return list(query[:limit] if limit else query)


def consume_inputs_in_tx(
    *, attempt_id: int, lease_epoch: int, input_ids: Sequence[int], clock: Clock
) -> list[WorkInput]:
    """Mark pending input consumed by the current attempt (R46).

    Consumption removes the entries from pending but keeps their attempt association, and
    confirms the intents behind them; the (Work, Event) uniqueness means replaying a route
    can never enqueue them again."""
    assert_in_tx()
    attempt = _current_attempt_in_tx(attempt_id, lease_epoch)
    rows = list(
        WorkInput.objects.select_for_update()
        .filter(pk__in=list(input_ids), work_id=attempt.work_id)
        .order_by("seq")
    )
    if len(rows) != len(set(input_ids)):
        raise WorkError("some input does not belong to this attempt's Work")
    not_pending = [r.pk for r in rows if r.state != InputState.PENDING]
    if not_pending:
        raise WorkError(f"input {not_pending} is not pending")
    now = clock()
    WorkInput.objects.filter(pk__in=[r.pk for r in rows]).update(
        state=InputState.CONSUMED, attempt=attempt, consumed_at=now
    )
    Intent.objects.filter(
        attempt=attempt,
        lease_epoch=lease_epoch,
        event_id__in=[r.event_id for r in rows],
        state=IntentState.PENDING,
    ).update(state=IntentState.CONFIRMED, confirmed_at=now)
    for row in rows:
        row.state, row.attempt_id, row.consumed_at = InputState.CONSUMED, attempt.pk, now
    return rows


def intents(*, work_id: int | None = None, attempt_id: int | None = None) -> list[Intent]:
    """Inspect durable inject/interrupt intents."""
    query = Intent.objects.all()
    if work_id is not None:
        query = query.filter(work_id=work_id)
    if attempt_id is not None:
        query = query.filter(attempt_id=attempt_id)
    return list(query.order_by("event_id"))


# --- helpers ---------------------------------------------------------------------------------------


def _current_attempt_in_tx(attempt_id: int, lease_epoch: int) -> Attempt:
    attempt = Attempt.objects.select_for_update().select_related("work").filter(pk=attempt_id).first()
    if attempt is None:
        raise StaleLease(f"no attempt {attempt_id}")
    if attempt.state not in ACTIVE_ATTEMPT_STATES:
        raise StaleLease(f"attempt {attempt_id} is {attempt.state}")
    if attempt.lease_epoch != lease_epoch:
        raise StaleLease(f"attempt {attempt_id} is at lease epoch {attempt.lease_epoch}, not {lease_epoch}")
    if attempt.work.is_terminal:
        raise WorkTerminal(f"Work {attempt.work_id} is {attempt.work.status}")
    return attempt


def _work_touch(work: Work, *, status: str, now: datetime) -> None:
    Work.objects.filter(pk=work.pk).update(status=status, version=F("version") + 1, updated_at=now)
    work.status = status
