"""Claims: which Work runs next and when: the Work a work loop may claim, why a dispatch was
held back, the input a new attempt starts with, backoff and parking, and the retry rule.

Failures back off (2 s doubling to 5 min) up to ``CONDUIT_MAX_ATTEMPTS``, or as the binding's
retry policy says (:mod:`worklife.retry`), then the Work is parked until an operator retries or
cancels it (W5); an attempt lost with its loop runs again at
once, up to ``CONDUIT_MAX_LOSSES`` lost in a row, then the Work is parked too. Each function runs in its caller's
transaction (``_in_tx``) or reads only.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Case, Exists, F, Max, OuterRef, Q, Value, When

from causal.models import Event
from causal.services import assert_in_tx
from infra.live import work_changed_on_commit
from worklife.errors import WorkError, WorkTerminal
from worklife.models import (
    DISPATCH_REFUSED,
    PRESENTED_KINDS,
    Attempt,
    AttemptState,
    InputState,
    Work,
    WorkInput,
    WorkStatus,
)
from worklife.pauses import active_pauses, paused_work_q

BACKOFF_START = 2.0
BACKOFF_CAP = 300.0
# A refused dispatch is tried again after this many seconds (a new input or a retry sooner).
DISPATCH_RECHECK = timedelta(seconds=30)
QUEUE_ONLY_RECHECK = timedelta(minutes=5)


def max_attempts() -> int:
    """Attempts that may fail in a row before the Work is parked (``CONDUIT_MAX_ATTEMPTS``)."""
    return int(getattr(settings, "CONDUIT_MAX_ATTEMPTS", 5))


def max_losses() -> int:
    """Attempts that may be lost in a row (their loop died) before the Work is parked
    (``CONDUIT_MAX_LOSSES``): a Work that kills its loop cannot run for ever."""
    return int(getattr(settings, "CONDUIT_MAX_LOSSES", 3))


def backoff_for(failures: int) -> timedelta:
    """The wait before the next attempt after ``failures`` failures in a row: 2 s, doubling,
    at most 5 minutes."""
    return timedelta(seconds=min(BACKOFF_START * 2 ** max(failures - 1, 0), BACKOFF_CAP))


# --- claiming ready Work -----------------------------------------------------------------------


def claimable_work_in_tx(
    *, now: datetime, limit: int, order: Sequence[Any] = ("id",), annotations: dict[str, Any] | None = None
) -> list[int]:
    """Lock and return up to ``limit`` Work that may start an attempt now: ready, not parked,
    not backing off, not held by flow control nor by a pause (:mod:`worklife.pauses`), with
    pending input or input to present again after a failure, in ``order`` (oldest first;
    ``worklife.flow.flow_claim_order`` puts priorities first). Rows another loop holds are
    skipped (``SKIP LOCKED`` on PostgreSQL; SQLite's write lock serialises loops)."""
    assert_in_tx()
    pending = WorkInput.objects.filter(
        work=OuterRef("pk"), state=InputState.PENDING, kind__in=PRESENTED_KINDS
    )
    query = (
        Work.objects.filter(status=WorkStatus.READY, parked_at__isnull=True)
        .filter(Q(retry_at__isnull=True) | Q(retry_at__lte=now))
        .filter(Q(pending_run=True) | Exists(pending))
        .filter(Q(held_until__isnull=True) | Q(held_until__lte=now))
        .annotate(**(annotations or {}))
        .order_by(*order)
    )
    # Paused scopes and bindings hold their Work: its input queues, no attempt starts.
    held = paused_work_q(active_pauses(now))
    if held is not None:
        query = query.exclude(held)
    if connection.features.has_select_for_update_skip_locked:
        query = query.select_for_update(skip_locked=True, of=("self",))
    return list(query.values_list("pk", flat=True)[:limit])


def work_hold_in_tx(*, work_id: int, reason: str, now: datetime, queue_only: bool = False) -> bool:
    """Record why a Work's dispatch was refused and when to look again (never a hot loop): it
    is then waiting for a binding that can run it (``awaiting_binding``), not backing off.
    Returns whether this is news: ``False`` when the Work was already waiting for the same
    reason (the work loop logs the refusal once, not at every look)."""
    assert_in_tx()
    until = now + (QUEUE_ONLY_RECHECK if queue_only else DISPATCH_RECHECK)
    line = (reason if reason.startswith(DISPATCH_REFUSED) else f"{DISPATCH_REFUSED}{reason}")[:1000]
    ready = Work.objects.filter(pk=work_id, status=WorkStatus.READY)
    if ready.filter(awaiting_binding=True, last_error=line).update(retry_at=until):
        return False
    ready.update(
        last_error=line, retry_at=until, awaiting_binding=True, version=F("version") + 1, updated_at=now
    )
    work_changed_on_commit([work_id])
    return True


# --- what a new attempt starts with ------------------------------------------------------------


def presentations_in_tx(*, attempts: Sequence[Attempt], now: datetime) -> dict[int, list[WorkInput]]:
    """The input new attempts (of distinct Work) start with, by attempt id, in acceptance
    order: the input failed attempts took since the last success (presented again), then the
    pending input, which the attempt consumes now (R46, W4). A fixed number of statements."""
    assert_in_tx()
    by_work = {a.work_id: a for a in attempts}
    result: dict[int, list[WorkInput]] = {a.pk: [] for a in attempts}
    # Input presented again: only Work whose last attempts failed can have any.
    again_works = [a.work_id for a in attempts if a.number > 1]
    if again_works:
        last_success = dict(
            Attempt.objects.filter(work_id__in=again_works, state=AttemptState.SUCCEEDED)
            .values("work_id")
            .annotate(n=Max("number"))
            .order_by()
            .values_list("work_id", "n")
        )
        for row in (
            WorkInput.objects.filter(
                work_id__in=again_works,
                state=InputState.CONSUMED,
                attempt__state__in=(AttemptState.FAILED, AttemptState.LOST),
            )
            .select_related("event", "attempt")
            .order_by("work_id", "seq")
        ):
            if row.attempt.number > last_success.get(row.work_id, 0):
                result[by_work[row.work_id].pk].append(row)
    pending = list(
        WorkInput.objects.select_for_update(of=("self",))
        .filter(work_id__in=list(by_work), state=InputState.PENDING, kind__in=PRESENTED_KINDS)
        .select_related("event")
        .order_by("work_id", "seq")
    )
    if pending:
        for attempt in attempts:
            mine = [row.pk for row in pending if row.work_id == attempt.work_id]
            if mine:
                WorkInput.objects.filter(pk__in=mine).update(
                    state=InputState.CONSUMED, consumed_at=now, attempt_id=attempt.pk
                )
        for row in pending:
            attempt = by_work[row.work_id]
            row.state, row.attempt_id, row.consumed_at = InputState.CONSUMED, attempt.pk, now
            result[attempt.pk].append(row)
    # The retry state ends as the attempt starts: its binding was pinned (R30); so does a flow
    # control hold (worklife.flow), in the same statement.
    Work.objects.filter(pk__in=list(by_work)).update(
        pending_run=False,
        retry_at=None,
        last_error="",
        retry_binding="",
        hold_kind="",
        hold_reason="",
        hold_gate="",
        held_until=None,
        awaiting_binding=False,
    )
    return result


def presented_events_many_in_tx(*, attempts: Sequence[Attempt], now: datetime) -> dict[int, list[Event]]:
    """The Events new attempts start with: their :func:`presentations_in_tx` input, or, for
    Work that has none (a new child or successor), the Event that created it."""
    rows = presentations_in_tx(attempts=attempts, now=now)
    result = {attempt_id: [row.event for row in inputs] for attempt_id, inputs in rows.items()}
    bare = {a.pk: a.work.trigger_id for a in attempts if not result[a.pk] and a.work.trigger_id}
    if bare:
        triggers = Event.objects.in_bulk(list(bare.values()))
        for attempt_id, seq in bare.items():
            if seq in triggers:
                result[attempt_id] = [triggers[seq]]
    return result


def event_as_input(event: Event) -> dict[str, Any]:
    """An Event as an attempt receives it (JSON)."""
    return {
        "seq": event.seq,
        "id": event.envelope_id,
        "source": event.source,
        "type": event.type,
        "subject": event.subject,
        "scope": event.scope,
        "time": event.time.isoformat() if event.time else None,
        "data": event.data,
        "work_id": event.work_id,
    }


# --- retry -------------------------------------------------------------------------------------


def works_retry_in_tx(*, works: Sequence[Work], now: datetime) -> list[int]:
    """Retry many Work at once, as :func:`work_retry_in_tx` does one, in one statement: ``works``
    are rows the caller locked and read; those retryable (:attr:`Work.is_retryable`) are
    unparked, their backoff ended and their attempt budget fresh. Returns their ids; the caller
    reports the others as refused."""
    assert_in_tx()
    retried = [w.pk for w in works if w.is_retryable]
    if not retried:
        return []
    Work.objects.filter(pk__in=retried).update(
        parked_at=None,
        retry_at=None,
        awaiting_binding=False,
        failures=0,
        losses=0,
        # Every right-hand side reads the row as it was: failures before the reset.
        pending_run=Case(
            When(Q(pending_run=True) | Q(failures__gt=0), then=Value(True)), default=Value(False)
        ),
        version=F("version") + 1,
        updated_at=now,
    )
    work_changed_on_commit(retried)
    return retried


def work_retry_in_tx(*, work_id: int, now: datetime) -> Work:
    """Unpark a Work, or end its backoff: it runs again at once with the input its failed
    attempts took and a fresh attempt budget. Refused unless the Work is retryable
    (:attr:`worklife.models.Work.is_retryable`, the rule the console's Retry button shows)."""
    assert_in_tx()
    work = Work.objects.select_for_update().get(pk=work_id)
    if work.is_terminal:
        raise WorkTerminal(f"Work {work_id} is {work.status}")
    if not work.is_retryable:
        raise WorkError(f"Work {work_id} is {work.status} and neither parked nor backing off")
    Work.objects.filter(pk=work_id).update(
        parked_at=None,
        retry_at=None,
        awaiting_binding=False,
        failures=0,
        losses=0,
        pending_run=work.pending_run or work.failures > 0,
        version=F("version") + 1,
        updated_at=now,
    )
    work_changed_on_commit([work_id])
    work.refresh_from_db()
    return work
