"""Writes on Work: attempts (the public storage operations a scheduler uses), waits, and the
scheduler-facing input APIs (R46).

The router never calls these for execution: it only writes route effects (R33). A scheduler
(or a test standing in for one) starts attempts, parks them on waits, consumes their input
and ends them here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, connection, transaction
from django.db.models import F, Max, Min, Q

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


@dataclass(frozen=True, slots=True)
class AttemptSpec:
    """What an attempt pins when it starts (R36)."""

    work_id: int
    binding: str
    executor: str
    generation: int
    capabilities: Iterable[str] = ()
    executor_path: str = ""


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


def attempts_start_in_tx(
    *,
    specs: Sequence[AttemptSpec],
    now: datetime,
    lease_until: datetime | None = None,
    lease_owner: str = "",
) -> dict[int, Attempt | WorkError]:
    """Start one attempt for each spec's Work in the caller's transaction, in a fixed number
    of statements; returns, by Work id, the attempt or why it was refused (a terminal Work,
    a live attempt already)."""
    assert_in_tx()
    ids = [spec.work_id for spec in specs]
    works = {w.pk: w for w in Work.objects.select_for_update().filter(pk__in=ids)}
    live = set(
        Attempt.objects.filter(work_id__in=ids, state__in=ACTIVE_ATTEMPT_STATES).values_list(
            "work_id", flat=True
        )
    )
    last = {
        row["work_id"]: (row["number"] or 0, row["epoch"] or 0)
        for row in Attempt.objects.filter(work_id__in=ids)
        .values("work_id")
        .annotate(number=Max("number"), epoch=Max("lease_epoch"))
        .order_by()
    }
    first_input = dict(
        WorkInput.objects.filter(work_id__in=ids, state=InputState.PENDING)
        .values("work_id")
        .annotate(first=Min("seq"))
        .order_by()
        .values_list("work_id", "first")
    )
    results: dict[int, Attempt | WorkError] = {}
    new: list[Attempt] = []
    for spec in specs:
        work = works.get(spec.work_id)
        if work is None:
            results[spec.work_id] = WorkError(f"Work {spec.work_id} does not exist")
        elif work.is_terminal:
            results[spec.work_id] = WorkTerminal(f"Work {spec.work_id} is {work.status}")
        elif spec.work_id in live:
            results[spec.work_id] = WorkError(f"Work {spec.work_id} already has an active attempt")
        else:
            number, epoch = last.get(spec.work_id, (0, 0))
            attempt = Attempt(
                work=work,
                number=number + 1,
                binding=spec.binding,
                executor=spec.executor,
                executor_path=spec.executor_path,
                generation=spec.generation,
                capabilities=sorted(set(spec.capabilities)),
                lease_epoch=epoch + 1,
                lease_until=lease_until,
                lease_owner=lease_owner,
                trigger_id=first_input.get(spec.work_id) or work.trigger_id,
                state=AttemptState.RUNNING,
                started_at=now,
            )
            new.append(attempt)
            results[spec.work_id] = attempt
    if new:
        try:
            with transaction.atomic():
                Attempt.objects.bulk_create(new)
        except IntegrityError as exc:
            raise WorkError(f"a Work already has a live attempt ({exc})") from exc
        Work.objects.filter(pk__in=[a.work_id for a in new]).update(
            status=WorkStatus.RUNNING, version=F("version") + 1, updated_at=now
        )
        for attempt in new:
            attempt.work.status = WorkStatus.RUNNING
    return results


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
    attempts_end_in_tx(attempts=[attempt], state=state, now=now)


def attempts_end_in_tx(*, attempts: Sequence[Attempt], state: str, now: datetime) -> None:
    """End ``attempts`` (of distinct Work) inside the caller's transaction, in a fixed number
    of statements: input held for them (R11) and input behind their unconfirmed intents
    queue for the next attempt, the intents are superseded, their active waits cancelled."""
    assert_in_tx()
    if not attempts:
        return
    ids = [a.pk for a in attempts]
    work_ids = [a.work_id for a in attempts]
    Attempt.objects.filter(pk__in=ids).update(state=state, ended_at=now)
    for attempt in attempts:
        attempt.state, attempt.ended_at = state, now
    pending = Intent.objects.filter(attempt_id__in=ids, state=IntentState.PENDING)
    superseded = list(pending.values_list("work_id", "event_id"))
    if superseded:
        pending.update(state=IntentState.SUPERSEDED)
        requeue = Q()
        for work_id, event_id in superseded:
            requeue |= Q(work_id=work_id, event_id=event_id)
        WorkInput.objects.filter(requeue, state=InputState.PENDING).update(kind=InputKind.QUEUE, attempt=None)
    WorkInput.objects.filter(work_id__in=work_ids, state=InputState.PENDING, kind=InputKind.HELD).update(
        kind=InputKind.QUEUE, attempt=None
    )
    Wait.objects.filter(attempt_id__in=ids, state=WaitState.ACTIVE).update(
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
    return check_authority(attempt, attempt_id=attempt_id, lease_epoch=lease_epoch)


def check_authority(attempt: Attempt | None, *, attempt_id: int, lease_epoch: int) -> Attempt:
    """``attempt`` if it is the current attempt at ``lease_epoch`` of a nonterminal Work (W2);
    else raise :class:`StaleLease` or :class:`WorkTerminal` saying why."""
    if attempt is None:
        raise StaleLease(f"no attempt {attempt_id}")
    if attempt.state not in ACTIVE_ATTEMPT_STATES:
        raise StaleLease(f"attempt {attempt_id} is {attempt.state}")
    if attempt.lease_epoch != lease_epoch:
        raise StaleLease(f"attempt {attempt_id} is at lease epoch {attempt.lease_epoch}, not {lease_epoch}")
    if attempt.work.is_terminal:
        raise WorkTerminal(f"Work {attempt.work_id} is {attempt.work.status}")
    return attempt


# How an attempt ended, as kept on its row.
OUTPUT_FIELDS = ("result", "exit_status", "error", "stdout_tail", "stderr_tail")


def attempts_output_in_tx(outputs: dict[int, dict]) -> None:
    """Keep how attempts ended (``output_fields`` of each) on their rows: one statement."""
    assert_in_tx()
    if not outputs:
        return
    meta = Attempt._meta
    columns = [meta.get_field(name) for name in OUTPUT_FIELDS]
    rows = []
    for attempt_id, output in outputs.items():
        values = output_fields(output)
        rows.append(
            [
                column.get_db_prep_save(values[column.name], connection)
                if column.name != "result"
                else connection.ops.adapt_json_value(values["result"], column.encoder)
                for column in columns
            ]
            + [attempt_id]
        )
    quote = connection.ops.quote_name
    assignments = ", ".join(f"{quote(column.column)} = %s" for column in columns)
    with connection.cursor() as cursor:
        cursor.executemany(f"UPDATE {quote(meta.db_table)} SET {assignments} WHERE {quote('id')} = %s", rows)


def output_fields(output: dict) -> dict:
    """An outcome (``result``, ``exit_status``, ``error``, ``stdout``, ``stderr``) as Attempt fields."""
    return {
        "result": output.get("result"),
        "exit_status": output.get("exit_status"),
        "error": str(output.get("error") or "")[:20000],
        "stdout_tail": output.get("stdout") or "",
        "stderr_tail": output.get("stderr") or "",
    }


def _work_touch(work: Work, *, status: str, now: datetime) -> None:
    Work.objects.filter(pk=work.pk).update(status=status, version=F("version") + 1, updated_at=now)
    work.status = status
