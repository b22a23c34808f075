"""Input and intents as an attempt reads and consumes them (R46): a Work's pending input,
its consumption by the current attempt (which confirms the intents behind it), and the
intents themselves.

Input arrives through the router's commit (:mod:`worklife.intake`); the input a new attempt
starts with is chosen as it starts (:func:`worklife.scheduling.presentations_in_tx`).
"""

from __future__ import annotations

from collections.abc import Sequence

from causal.clock import Clock
from causal.services import assert_in_tx
from worklife.attempts import current_attempt_in_tx
from worklife.errors import WorkError
from worklife.models import InputState, Intent, IntentState, WorkInput


def consume_inputs_in_tx(
    *, attempt_id: int, lease_epoch: int, input_ids: Sequence[int], clock: Clock
) -> list[WorkInput]:
    """Mark pending input consumed by the current attempt (R46).

    Consumption removes the entries from pending but keeps their attempt association, and
    confirms the intents behind them; the (Work, Event) uniqueness means replaying a route
    can never enqueue them again."""
    assert_in_tx()
    attempt = current_attempt_in_tx(attempt_id, lease_epoch)
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
