"""Single-attempt operations for tests, each the real batch service applied to one attempt
or one Work (the engine itself only ever starts, ends and completes attempts in batches)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from django.db import transaction

from causal.clock import Clock
from causal.services import assert_in_tx
from worklife.attempts import (
    AttemptSpec,
    attempt_end_in_tx,
    attempts_start_in_tx,
    current_attempt_in_tx,
    work_status_set,
)
from worklife.errors import WorkError
from worklife.lifecycle import works_complete
from worklife.models import Attempt, AttemptState, InputState, Work, WorkInput, WorkStatus


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
    spec = AttemptSpec(work_id, binding, executor, generation, tuple(capabilities), executor_path)
    with transaction.atomic():
        started = attempts_start_in_tx(
            specs=[spec], now=clock(), lease_until=lease_until, lease_owner=lease_owner
        )
    result = started[work_id]
    if isinstance(result, WorkError):
        raise result
    return result


def attempt_end(*, attempt_id: int, lease_epoch: int, state: str, clock: Clock) -> Attempt:
    """End an attempt (succeeded, failed or cancelled).

    Input held for it (R11) and input behind its unconfirmed intents now queue for the next
    attempt; the intents are superseded. The Work is ready again."""
    if state not in (AttemptState.SUCCEEDED, AttemptState.FAILED, AttemptState.CANCELLED):
        raise WorkError(f"an attempt cannot end as {state!r}")
    with transaction.atomic():
        attempt = current_attempt_in_tx(attempt_id, lease_epoch)
        now = clock()
        attempt_end_in_tx(attempt=attempt, state=state, now=now)
        work_status_set(attempt.work, status=WorkStatus.READY, now=now)
        return attempt


def attempt_renew_lease(
    *, attempt_id: int, lease_epoch: int, clock: Clock, lease_until: datetime | None = None
) -> Attempt:
    """Fence the attempt with a new lease epoch (a new holder takes it over)."""
    with transaction.atomic():
        attempt = current_attempt_in_tx(attempt_id, lease_epoch)
        attempt.lease_epoch += 1
        attempt.lease_until = lease_until
        attempt.save(update_fields=["lease_epoch", "lease_until"])
        return attempt


def work_complete(*, attempt_id: int, lease_epoch: int, clock: Clock, output: dict | None = None) -> Work:
    """Complete the attempt's Work (R47).

    Requires the current attempt and lease epoch; refuses to overtake accepted, unrouted
    input of the Work. Remaining queued or unconfirmed injected input leaves it ready;
    otherwise it becomes completed. ``output`` (result, exit status, output tails) is kept
    on the attempt in the same transaction."""
    result = works_complete(
        authorities=[(attempt_id, lease_epoch)],
        clock=clock,
        outputs={attempt_id: output} if output is not None else None,
    )[attempt_id]
    if isinstance(result, WorkError):
        raise result
    return result


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
