"""The Work engine's writes: what ``work_loop`` commits as attempts start, run and end.

Every function here is one short transaction (or says ``_in_tx``). Authority is the pair
(attempt id, lease epoch): every call an attempt makes is refused once it is stale (W2).
Failures back off (2 s doubling to 5 min) up to ``CONDUIT_MAX_ATTEMPTS``, then the Work is
parked until an operator retries or cancels it (W5). Waits and their timeouts, timers and
the wake bridge of a wait the causal limits blocked are here too, so the router and the loop
share one implementation of each transition (W7: the router still makes no execution call).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, F, Max, OuterRef, Q

from causal.clock import Clock
from causal.limits import Causal, CausalRefused, derived_atomic, is_reserved
from causal.models import Event
from causal.services import Envelope, assert_in_tx
from worklife.models import (
    ACTIVE_ATTEMPT_STATES,
    DISPATCH_REFUSED,
    PRESENTED_KINDS,
    Attempt,
    AttemptState,
    DependencySubscription,
    InputKind,
    InputState,
    Timer,
    Wait,
    WaitState,
    Work,
    WorkInput,
    WorkStatus,
)
from worklife.services import (
    WorkError,
    WorkTerminal,
    _current_attempt_in_tx,
    attempt_end_in_tx,
    output_fields,
)

WAIT_WOKEN = "core.wait.woken"
BRIDGE_SOURCE = "core.routing"
BACKOFF_START = 2.0
BACKOFF_CAP = 300.0
# A refused dispatch is tried again after this many seconds (a new input or a retry sooner).
DISPATCH_RECHECK = timedelta(seconds=30)
QUEUE_ONLY_RECHECK = timedelta(minutes=5)


def max_attempts() -> int:
    """Attempts that may fail in a row before the Work is parked (``CONDUIT_MAX_ATTEMPTS``)."""
    return int(getattr(settings, "CONDUIT_MAX_ATTEMPTS", 5))


def backoff_for(failures: int) -> timedelta:
    """The wait before the next attempt after ``failures`` failures in a row: 2 s, doubling,
    at most 5 minutes."""
    return timedelta(seconds=min(BACKOFF_START * 2 ** max(failures - 1, 0), BACKOFF_CAP))


# --- claiming ready Work -------------------------------------------------------------------------


def claimable_work_in_tx(*, now: datetime, limit: int) -> list[int]:
    """Lock and return up to ``limit`` Work that may start an attempt now: ready, not parked,
    not backing off, with pending input or input to present again after a failure. Rows
    another loop holds are skipped (``SKIP LOCKED`` on PostgreSQL; SQLite's write lock
    serialises loops)."""
    assert_in_tx()
    pending = WorkInput.objects.filter(
        work=OuterRef("pk"), state=InputState.PENDING, kind__in=PRESENTED_KINDS
    )
    query = (
        Work.objects.filter(status=WorkStatus.READY, parked_at__isnull=True)
        .filter(Q(retry_at__isnull=True) | Q(retry_at__lte=now))
        .filter(Q(pending_run=True) | Exists(pending))
        .order_by("id")
    )
    if connection.features.has_select_for_update_skip_locked:
        query = query.select_for_update(skip_locked=True, of=("self",))
    return list(query.values_list("pk", flat=True)[:limit])


def work_hold_in_tx(*, work_id: int, reason: str, now: datetime, queue_only: bool = False) -> None:
    """Record why a Work's dispatch was refused and when to look again (never a hot loop)."""
    assert_in_tx()
    until = now + (QUEUE_ONLY_RECHECK if queue_only else DISPATCH_RECHECK)
    line = reason if reason.startswith(DISPATCH_REFUSED) else f"{DISPATCH_REFUSED}{reason}"
    Work.objects.filter(pk=work_id, status=WorkStatus.READY).update(
        last_error=line[:1000], retry_at=until, version=F("version") + 1, updated_at=now
    )


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
    # The retry state ends as the attempt starts: its binding was pinned (R30).
    Work.objects.filter(pk__in=list(by_work)).update(
        pending_run=False, retry_at=None, last_error="", retry_binding=""
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


# --- leases ----------------------------------------------------------------------------------


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


def attempts_pid(pids: dict[int, int | None]) -> None:
    """Record the process each attempt runs in (one statement), so that a loop of the same
    host can end it when the attempt is lost."""
    rows = [(pid, attempt_id) for attempt_id, pid in pids.items() if pid is not None]
    if rows:
        quote = connection.ops.quote_name
        with connection.cursor() as cursor:
            cursor.executemany(
                f"UPDATE {quote(Attempt._meta.db_table)} SET {quote('pid')} = %s WHERE {quote('id')} = %s",
                rows,
            )


@dataclass(frozen=True, slots=True)
class Rescued:
    """An attempt whose lease lapsed, marked lost: its process may still run somewhere."""

    attempt_id: int
    work_id: int
    owner: str
    pid: int | None


def attempts_rescue(
    *, now: datetime, owners_gone: Iterable[str] = (), limit: int = 100, clock: Clock
) -> list[Rescued]:
    """Mark lost the active attempts whose lease lapsed (or whose owner is known gone): each
    counts as a failure and its Work is ready again (backing off), so the old process, if it
    still runs, can no longer change anything (W2, W3)."""
    gone = list(owners_gone)
    lapsed = Q(lease_until__lt=now) | (Q(lease_owner__in=gone) if gone else Q(pk__in=[]))
    candidates = list(
        Attempt.objects.filter(lapsed, state__in=ACTIVE_ATTEMPT_STATES).values_list(
            "pk", "lease_epoch", "lease_owner", "pid", "work_id"
        )[:limit]
    )
    rescued = []
    for attempt_id, epoch, owner, pid, work_id in candidates:
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
        rescued.append(Rescued(attempt_id, work_id, owner, pid))
    return rescued


# --- outcomes ------------------------------------------------------------------------------


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


def attempt_fail(
    *,
    attempt_id: int,
    lease_epoch: int,
    error: str,
    clock: Clock,
    state: str = AttemptState.FAILED,
    output: dict | None = None,
    count: bool = True,
) -> Work:
    """Fail the attempt (an exception, a non-zero exit, a timeout, a lost lease): the Work is
    ready again after a backoff, or parked after ``CONDUIT_MAX_ATTEMPTS`` failures in a row
    (W5). Fenced by the attempt's authority. ``count=False`` (its loop stopped) gives the
    Work back at once without counting a failure."""
    with transaction.atomic():
        attempt = _current_attempt_in_tx(attempt_id, lease_epoch)
        now = clock()
        attempt_end_in_tx(attempt=attempt, state=state, now=now)
        if output is not None:
            attempt_output_in_tx(attempt_id=attempt_id, **output)
        else:
            Attempt.objects.filter(pk=attempt_id).update(error=error[:20000])
        work = Work.objects.select_for_update().get(pk=attempt.work_id)
        failures = work.failures + (1 if count else 0)
        parked = count and failures >= max_attempts()
        line = f"attempt {attempt.number} {state}: {error}".replace("\n", " ")[:1000]
        Work.objects.filter(pk=work.pk).update(
            status=WorkStatus.READY,
            failures=failures,
            pending_run=True,
            retry_at=None if parked or not count else now + backoff_for(failures),
            parked_at=now if parked else None,
            last_error=line,
            version=F("version") + 1,
            updated_at=now,
        )
        work.refresh_from_db()
        return work


def work_retry_in_tx(*, work_id: int, now: datetime) -> Work:
    """Unpark a Work, or end its backoff: it runs again at once with the input its failed
    attempts took and a fresh attempt budget."""
    assert_in_tx()
    work = Work.objects.select_for_update().get(pk=work_id)
    if work.is_terminal:
        raise WorkTerminal(f"Work {work_id} is {work.status}")
    if work.status != WorkStatus.READY or (work.parked_at is None and work.retry_at is None):
        raise WorkError(f"Work {work_id} is {work.status} and neither parked nor backing off")
    Work.objects.filter(pk=work_id).update(
        parked_at=None,
        retry_at=None,
        failures=0,
        pending_run=work.pending_run or work.failures > 0,
        version=F("version") + 1,
        updated_at=now,
    )
    work.refresh_from_db()
    return work


# --- waits ----------------------------------------------------------------------------------


def attempt_wait_for(
    *,
    attempt_id: int,
    lease_epoch: int,
    match: dict,
    timeout: float | None,
    name: str,
    clock: Clock,
) -> Wait:
    """Park the attempt until an Event of its Work matches ``match`` or ``timeout`` seconds
    pass (R41). Fenced by the attempt's authority."""
    from worklife.services import attempt_wait

    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0
    ):
        raise WorkError(f"timeout must be a non-negative number of seconds, got {timeout!r}")
    clean = {k: match[k] for k in ("type", "source") if isinstance(match.get(k), str) and match.get(k)}
    keys = match.get("keys")
    if keys:
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise WorkError("keys must be a list of strings")
        clean["keys"] = keys
    return attempt_wait(
        attempt_id=attempt_id,
        lease_epoch=lease_epoch,
        match=clean,
        name=str(name or "")[:128],
        timeout_at=clock() + timedelta(seconds=timeout) if timeout is not None else None,
        clock=clock,
    )


def wait_wake_in_tx(*, wait_id: int, event_seq: int, now: datetime) -> bool:
    """Wake an active wait with the Event that won it: the parked attempt runs again."""
    assert_in_tx()
    wait = (
        Wait.objects.filter(pk=wait_id, state=WaitState.ACTIVE).values_list("work_id", "attempt_id").first()
    )
    if wait is None:
        return False
    work_id, attempt_id = wait
    Wait.objects.filter(pk=wait_id).update(
        state=WaitState.WOKEN, woken_by_id=event_seq, ended_at=now, blocked_reason=""
    )
    DependencySubscription.objects.filter(wait_id=wait_id, active=True).update(active=False)
    _resume_in_tx(work_id=work_id, attempt_id=attempt_id, now=now)
    return True


def wait_time_out_in_tx(*, wait_id: int, now: datetime) -> bool:
    """End an active wait at its timeout: the parked attempt runs again and learns that
    nothing came (the wait returns ``None``)."""
    assert_in_tx()
    wait = (
        Wait.objects.filter(pk=wait_id, state=WaitState.ACTIVE).values_list("work_id", "attempt_id").first()
    )
    if wait is None:
        return False
    work_id, attempt_id = wait
    Wait.objects.filter(pk=wait_id).update(state=WaitState.TIMED_OUT, ended_at=now)
    DependencySubscription.objects.filter(wait_id=wait_id, active=True).update(active=False)
    _resume_in_tx(work_id=work_id, attempt_id=attempt_id, now=now)
    return True


def wait_block_in_tx(*, wait_id: int, reason: str, event_seq: int) -> None:
    """The causal limits refused the wake bridge: the wait is blocked with the reason and the
    Event is kept to try the wake again once capacity returns."""
    assert_in_tx()
    Wait.objects.filter(pk=wait_id, state=WaitState.ACTIVE).update(blocked_reason=reason[:500])
    Wait.objects.filter(pk=wait_id, state=WaitState.ACTIVE, blocked_event__isnull=True).update(
        blocked_event_id=event_seq
    )


def _resume_in_tx(*, work_id: int, attempt_id: int | None, now: datetime) -> None:
    if attempt_id is not None:
        Attempt.objects.filter(pk=attempt_id, state=AttemptState.WAITING).update(state=AttemptState.RUNNING)
    running = Attempt.objects.filter(work_id=work_id, state=AttemptState.RUNNING).exists()
    Work.objects.filter(pk=work_id, status=WorkStatus.WAITING).update(
        status=WorkStatus.RUNNING if running else WorkStatus.READY, version=F("version") + 1, updated_at=now
    )


def wake_bridge_envelope(*, wait_id: int, work_id: int, scope: str, event_seq: int) -> Envelope:
    """The ``core.wait.woken`` bridge Event that wakes ``wait_id`` from Event ``event_seq``."""
    return Envelope(
        id=f"wait-woken/{wait_id}",
        source=BRIDGE_SOURCE,
        type=WAIT_WOKEN,
        scope=scope,
        work_id=work_id,
        data={"work": work_id, "wait": wait_id, "event": event_seq},
    )


def wake_bridge_in_tx(*, causal: Causal, wait_id: int, work_id: int, scope: str, event_seq: int) -> None:
    """Derive the ``core.wait.woken`` bridge that wakes a parked attempt from the Event that
    won its wait, through the causal limits; raises ``CausalRefused`` when they refuse it."""
    assert_in_tx()
    envelope = wake_bridge_envelope(wait_id=wait_id, work_id=work_id, scope=scope, event_seq=event_seq)
    causal.derive_in_tx(parent=Event(seq=event_seq), envelope=envelope)


def waits_expire(*, clock: Clock, limit: int = 100) -> list[int]:
    """Time out the active waits whose timeout is due; returns their ids."""
    now = clock()
    due = list(
        Wait.objects.filter(state=WaitState.ACTIVE, timeout_at__lte=now)
        .order_by("timeout_at")
        .values_list("pk", flat=True)[:limit]
    )
    expired = []
    for wait_id in due:
        with transaction.atomic():
            if wait_time_out_in_tx(wait_id=wait_id, now=now):
                expired.append(wait_id)
    return expired


def waits_retry_blocked(*, causal: Causal, clock: Clock, limit: int = 50) -> list[int]:
    """Try again the wakes the causal limits refused (R41): a rate refusal passes once the
    next minute restores capacity. Returns the ids of the waits woken."""
    blocked = list(
        Wait.objects.filter(state=WaitState.ACTIVE, blocked_event__isnull=False)
        .select_related("work")
        .order_by("pk")[:limit]
    )
    woken = []
    for wait in blocked:
        now = clock()
        try:
            with derived_atomic():
                wake_bridge_in_tx(
                    causal=causal,
                    wait_id=wait.pk,
                    work_id=wait.work_id,
                    scope=wait.work.scope,
                    event_seq=wait.blocked_event_id,
                )
                WorkInput.objects.filter(
                    work_id=wait.work_id, event_id=wait.blocked_event_id, state=InputState.PENDING
                ).update(kind=InputKind.QUEUE)
                if wait_wake_in_tx(wait_id=wait.pk, event_seq=wait.blocked_event_id, now=now):
                    woken.append(wait.pk)
        except CausalRefused as refused:
            with transaction.atomic():
                Wait.objects.filter(pk=wait.pk, state=WaitState.ACTIVE).update(
                    blocked_reason=f"causal limits refuse the wake ({refused.kind}): {refused.detail}"[:500]
                )
    return woken


# --- timers --------------------------------------------------------------------------------


def timer_schedule(
    *, attempt_id: int, lease_epoch: int, after: float, type: str, data: Any, clock: Clock
) -> Timer:
    """A timer owned by the attempt's Work, derived from the attempt's trigger (R56)."""
    if isinstance(after, bool) or not isinstance(after, int | float) or after < 0:
        raise WorkError(f"after must be a non-negative number of seconds, got {after!r}")
    if not isinstance(type, str) or not type or is_reserved(type):
        raise WorkError(f"type {type!r} is empty or reserved for core code")
    with transaction.atomic():
        attempt = _current_attempt_in_tx(attempt_id, lease_epoch)
        now = clock()
        return Timer.objects.create(
            work_id=attempt.work_id,
            due_at=now + timedelta(seconds=after),
            type=type[:255],
            data=data,
            parent_id=attempt.trigger_id,
            created_at=now,
        )


def timers_due(*, now: datetime, limit: int = 100) -> list[int]:
    """Pending timers due now, oldest first."""
    return list(
        Timer.objects.filter(state="pending", due_at__lte=now)
        .order_by("due_at")
        .values_list("pk", flat=True)[:limit]
    )


# --- emit ------------------------------------------------------------------------------------


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
