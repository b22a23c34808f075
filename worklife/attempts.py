"""Attempts and their leases: start an attempt with its configuration pinned, renew, end,
fail and rescue it, and keep how it ended.

Authority is the pair (attempt id, lease epoch): every write an attempt asks for is refused
once it is stale (W2), by :func:`current_attempt_in_tx` and :func:`check_authority`. A failed
attempt gives its Work back after a backoff, or parks it after ``CONDUIT_MAX_ATTEMPTS``
failures in a row (W5; the rule is :mod:`worklife.scheduling`'s). Each function is one short
transaction, or says ``_in_tx`` and runs in its caller's.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Exists, F, Min, OuterRef, Q

from causal.clock import Clock
from causal.services import assert_in_tx
from infra.live import work_changed_on_commit
from worklife.errors import StaleLease, WorkError, WorkTerminal
from worklife.models import (
    ACTIVE_ATTEMPT_STATES,
    Attempt,
    AttemptState,
    DependencySubscription,
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
from worklife.retry import FailureHint, RetryPolicy, jitter_draw, retry_decision
from worklife.scheduling import max_losses

# --- starting ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AttemptSpec:
    """What an attempt pins when it starts (R36)."""

    work_id: int
    binding: str
    executor: str
    generation: int
    capabilities: Iterable[str] = ()
    executor_path: str = ""
    # The flow control gates the attempt counts towards (``worklife.flow``), "" for none.
    concurrency_key: str = ""
    throttle_key: str = ""


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
    # Each Work's latest attempt (it holds the highest number and epoch): a new attempt follows
    # it, and takes its idempotency key when it presents the same input again (after it failed
    # or was lost: scheduling.presentations_in_tx).
    later = Attempt.objects.filter(work_id=OuterRef("work_id"), number__gt=OuterRef("number"))
    last = {
        work_id: (number, epoch, state, key)
        for work_id, number, epoch, state, key in Attempt.objects.filter(work_id__in=ids)
        .filter(~Exists(later))
        .values_list("work_id", "number", "lease_epoch", "state", "idempotency_key")
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
            number, epoch, state, key = last.get(spec.work_id, (0, 0, "", ""))
            if not key or state not in PRESENTED_AGAIN_AFTER:
                key = idempotency_key_new(work_id=spec.work_id, number=number + 1)
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
                idempotency_key=key,
                trigger_id=first_input.get(spec.work_id) or work.trigger_id,
                state=AttemptState.RUNNING,
                started_at=now,
                concurrency_key=spec.concurrency_key,
                throttle_key=spec.throttle_key,
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
        work_changed_on_commit(a.work_id for a in new)
        for attempt in new:
            attempt.work.status = WorkStatus.RUNNING
    return results


# An attempt after one that ended so presents its input again: it keeps its idempotency key.
PRESENTED_AGAIN_AFTER = frozenset({AttemptState.FAILED, AttemptState.LOST})


def idempotency_key_new(*, work_id: int, number: int) -> str:
    """A new idempotency key: the Work, the first attempt that presents the input, and 64
    random bits (unique across databases too, for an outside service that dedupes on it)."""
    return f"conduit-{work_id}-{number}-{secrets.token_hex(8)}"


# --- leases ------------------------------------------------------------------------------------


def attempts_renew(*, owner: str, held: dict[int, int], until: datetime) -> None:
    """Extend the leases of the attempts ``owner`` holds (id -> epoch), fenced by epoch."""
    if not held:
        return
    fence = Q()
    for attempt_id, epoch in held.items():
        fence |= Q(pk=attempt_id, lease_epoch=epoch)
    with transaction.atomic():
        Attempt.objects.filter(fence, state__in=ACTIVE_ATTEMPT_STATES, lease_owner=owner).update(
            lease_until=until
        )


def attempts_pid(pids: dict[int, tuple[int, int | None] | None]) -> None:
    """Record the process each attempt runs in and when it started (one statement): ``{attempt
    id: (pid, start time)}``, so that a loop of the same host can end it when the attempt is
    lost, and only it."""
    rows = [
        (process[0], process[1], attempt_id) for attempt_id, process in pids.items() if process is not None
    ]
    if rows:
        quote = connection.ops.quote_name
        with connection.cursor() as cursor:
            cursor.executemany(
                f"UPDATE {quote(Attempt._meta.db_table)} SET {quote('pid')} = %s, {quote('pid_started')} = %s "
                f"WHERE {quote('id')} = %s",
                rows,
            )


@dataclass(frozen=True, slots=True)
class Rescued:
    """An attempt whose lease lapsed, marked lost: its process may still run somewhere."""

    attempt_id: int
    work_id: int
    owner: str
    pid: int | None
    pid_started: int | None = None


def attempts_rescue(
    *, now: datetime, owners_gone: Iterable[str] = (), limit: int = 100, clock: Clock
) -> list[Rescued]:
    """Mark lost the active attempts whose lease lapsed (or whose owner is known gone): each
    counts as a loss, not a failure, and its Work is ready again at once (parked after
    ``CONDUIT_MAX_LOSSES`` in a row: :func:`attempt_fail`); the old process, if it still runs,
    can no longer change anything (W2, W3)."""
    gone = list(owners_gone)
    lapsed = Q(lease_until__lt=now) | (Q(lease_owner__in=gone) if gone else Q(pk__in=[]))
    candidates = list(
        Attempt.objects.filter(lapsed, state__in=ACTIVE_ATTEMPT_STATES).values_list(
            "pk", "lease_epoch", "lease_owner", "pid", "pid_started", "work_id"
        )[:limit]
    )
    rescued = []
    for attempt_id, epoch, owner, pid, pid_started, work_id in candidates:
        try:
            attempt_fail(
                attempt_id=attempt_id,
                lease_epoch=epoch,
                error=f"lost: the lease of {owner or 'its work loop'} lapsed",
                state=AttemptState.LOST,
                clock=clock,
            )
        except WorkError:
            continue  # it moved on meanwhile (completed, renewed, cancelled)
        rescued.append(Rescued(attempt_id, work_id, owner, pid, pid_started))
    return rescued


# --- ending ------------------------------------------------------------------------------------


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
    DependencySubscription.objects.filter(
        wait__attempt_id__in=ids, wait__state=WaitState.ACTIVE, active=True
    ).update(active=False)
    Wait.objects.filter(attempt_id__in=ids, state=WaitState.ACTIVE).update(
        state=WaitState.CANCELLED, ended_at=now
    )


def attempt_refused_in_tx(*, attempt: Attempt, reason: str, now: datetime) -> None:
    """End, inside the caller's transaction, an attempt whose dispatch was refused once it was
    started (it ran nothing, consumed nothing): it failed with ``reason``, and its Work is
    ready again with no failure counted, for the caller to hold
    (:func:`worklife.scheduling.work_hold_in_tx`)."""
    assert_in_tx()
    attempt_end_in_tx(attempt=attempt, state=AttemptState.FAILED, now=now)
    Attempt.objects.filter(pk=attempt.pk).update(error=reason[:20000])
    Work.objects.filter(pk=attempt.work_id, status=WorkStatus.RUNNING).update(
        status=WorkStatus.READY, version=F("version") + 1, updated_at=now
    )
    attempt.work.status = WorkStatus.READY
    work_changed_on_commit([attempt.work_id])


def attempt_fail(
    *,
    attempt_id: int,
    lease_epoch: int,
    error: str,
    clock: Clock,
    state: str = AttemptState.FAILED,
    output: dict | None = None,
    count: bool = True,
    policy: RetryPolicy | None = None,
    hint: FailureHint | None = None,
) -> Work:
    """Fail the attempt (an exception, a non-zero exit, a timeout): the Work is ready again
    after a backoff, or parked after ``CONDUIT_MAX_ATTEMPTS`` failures in a row (W5). Fenced
    by the attempt's authority.

    ``state=LOST`` (its loop died, or stopped renewing its lease: not the Work's doing) gives
    the Work back at once, no failure counted, but counts a loss: after ``CONDUIT_MAX_LOSSES``
    attempts lost in a row the Work is parked, so a Work that kills its loop cannot run for
    ever (W5). ``count=False`` (its loop stopped) gives the Work back at once, counting
    nothing.

    ``policy`` is the binding's retry policy (``None``: the defaults) and ``hint`` what the
    attempt's end says about retrying it (:func:`worklife.retry.retry_decision`)."""
    with transaction.atomic():
        attempt = current_attempt_in_tx(attempt_id, lease_epoch)
        now = clock()
        attempt_end_in_tx(attempt=attempt, state=state, now=now)
        if output is not None:
            attempt_output_in_tx(attempt_id=attempt_id, **output)
        else:
            Attempt.objects.filter(pk=attempt_id).update(error=error[:20000])
        work = Work.objects.select_for_update().get(pk=attempt.work_id)
        failures, losses, retry_at, parked, why = work.failures, work.losses, None, False, ""
        if count and state == AttemptState.LOST:
            losses += 1
            parked = losses >= max_losses()
        elif count:
            failures, losses = failures + 1, 0
            decision = retry_decision(
                policy, failures=failures, hint=hint or FailureHint(), draw=jitter_draw()
            )
            retry_at, parked = now + decision.delay, decision.park
            # A failure parked before its budget ran out says which rule parked it.
            why = f" (parked: {decision.why})" if decision.park and decision.why else ""
        line = f"attempt {attempt.number} {state}: {error}".replace("\n", " ")[: 1000 - len(why)] + why
        Work.objects.filter(pk=work.pk).update(
            status=WorkStatus.READY,
            failures=failures,
            losses=losses,
            pending_run=True,
            retry_at=None if parked else retry_at,
            parked_at=now if parked else None,
            awaiting_binding=False,
            last_error=line,
            version=F("version") + 1,
            updated_at=now,
        )
        work_changed_on_commit([work.pk])
        work.refresh_from_db()
        return work


# --- how an attempt ended, kept on its row ------------------------------------------------------

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


def attempt_output_in_tx(
    *,
    attempt_id: int,
    result: Any = None,
    exit_status: int | None = None,
    error: str = "",
    stdout: str = "",
    stderr: str = "",
) -> None:
    """Keep how an attempt ended on its row: result, exit status, error and output tails."""
    assert_in_tx()
    Attempt.objects.filter(pk=attempt_id).update(
        **output_fields(
            {"result": result, "exit_status": exit_status, "error": error, "stdout": stdout, "stderr": stderr}
        )
    )


def output_fields(output: dict) -> dict:
    """An outcome (``result``, ``exit_status``, ``error``, ``stdout``, ``stderr``) as Attempt fields."""
    return {
        "result": output.get("result"),
        "exit_status": output.get("exit_status"),
        "error": str(output.get("error") or "")[:20000],
        "stdout_tail": output.get("stdout") or "",
        "stderr_tail": output.get("stderr") or "",
    }


# --- authority ---------------------------------------------------------------------------------


def current_attempt_in_tx(attempt_id: int, lease_epoch: int) -> Attempt:
    """Lock and return the attempt, with its Work, if it holds the authority ``lease_epoch``
    (:func:`check_authority`), in the caller's transaction."""
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


def work_status_set(work: Work, *, status: str, now: datetime) -> None:
    """Set the status of the Work an attempt moved (and bump its version), in the caller's
    transaction."""
    Work.objects.filter(pk=work.pk).update(status=status, version=F("version") + 1, updated_at=now)
    work.status = status
    work_changed_on_commit([work.pk])
