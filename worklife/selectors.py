"""Reads of Work and what belongs to it, with explicit joins (no N+1)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from django.db.models import Count, Exists, F, OuterRef, Q, QuerySet, Subquery

from causal.clock import system_clock
from causal.models import Event, RouteState
from causal.selectors import COUNT_CAP, PAGE_SIZE, KeysetPage, ListTotal, count_capped, keyset_page
from infra.queries import starts_with
from infra.words import counted
from worklife.flow import flow_held_at, flow_hold_active, flow_hold_text
from worklife.models import (
    DISPATCH_REFUSED,
    PRESENTED_KINDS,
    Attempt,
    AttemptState,
    CorrelationKey,
    DependencySubscription,
    InputState,
    Intent,
    Pause,
    Timer,
    Wait,
    WaitState,
    Work,
    WorkInput,
    WorkStatus,
    awaiting_binding_q,
    backing_off_at,
)
from worklife.pauses import active_pauses, hold_line, pause_holding, paused_work_q

# The Work page's engine lists (attempts, waits, timers, intents, children) show the newest
# this many; older rows are not shown (the page says so).
ENGINE_LIST_LIMIT = 20
# The Work list's status filter also takes these: ready Work parked after too many failures,
# and ready Work backing off (its next try is later); ``ready`` then means neither.
PARKED = "parked"
BACKING_OFF = "backing_off"
# Ready Work whose dispatch was refused (a queue-only binding, one that cannot run): it waits for
# a binding that can run it; neither backing off nor ready to run.
AWAITING_BINDING = "awaiting_binding"
# Ready Work flow control holds (a concurrency limit, a throttle, debounce, batch: worklife.flow).
FLOW_HELD = "flow_held"
# Ready Work an operator's pause of its scope or binding holds (worklife.pauses).
PAUSED = "paused"
# The Work states as people read them: a status, or one of the holds of a ready Work.
WORK_STATES = (*WorkStatus.values, PARKED, BACKING_OFF, AWAITING_BINDING, FLOW_HELD, PAUSED)
# The longest scope path Work stores (Work.scope).
SCOPE_MAX_LENGTH = Work._meta.get_field("scope").max_length
BINDING_MAX_LENGTH = Work._meta.get_field("binding").max_length
KEY_MAX_LENGTH = CorrelationKey._meta.get_field("key").max_length

# --- console --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkFilter:
    """What the Work list is filtered by (the console, ``work list`` and the API); empty
    strings mean "any". ``key`` is the start of a correlation key the Work owns (``pr:acme/web``
    finds the Work of every pull request of acme/web)."""

    scope: str = ""
    status: str = ""
    binding: str = ""
    key: str = ""

    def __post_init__(self) -> None:
        if self.status and self.status not in WORK_STATES:
            raise ValueError(f"status: unknown status {self.status!r}")
        for name, most in (
            ("scope", SCOPE_MAX_LENGTH),
            ("binding", BINDING_MAX_LENGTH),
            ("key", KEY_MAX_LENGTH),
        ):
            value = getattr(self, name)
            # No stored value has either; PostgreSQL refuses a NUL in a query outright.
            if "\x00" in value or len(value) > most:
                raise ValueError(f"{name}: at most {most} characters, no NUL")


def work_filtered(
    filters: WorkFilter, *, now: datetime | None = None, pauses: Sequence[Pause] | None = None
) -> QuerySet[Work]:
    """Work matching ``filters`` (exact scope, status, binding, an owned key's start), unordered. The
    status ``parked`` is ready Work parked after too many failures, ``backing_off`` ready Work
    whose next try is after ``now``, ``paused`` ready Work a pause of its scope or binding holds,
    and ``ready`` ready Work that is none of the holds. ``pauses``: the pauses in force at
    ``now``, when the caller has read them already."""
    now = now or system_clock()
    queryset = Work.objects.all()
    if filters.scope:
        queryset = queryset.filter(scope=filters.scope)
    if filters.status == PARKED:
        queryset = queryset.filter(status=WorkStatus.READY, parked_at__isnull=False)
    elif filters.status == BACKING_OFF:
        queryset = queryset.filter(backing_off_at(now))
    elif filters.status == AWAITING_BINDING:
        queryset = queryset.filter(awaiting_binding_q())
    elif filters.status == FLOW_HELD:
        queryset = queryset.filter(flow_held_at(now))
    elif filters.status == PAUSED:
        held = paused_work_q(active_pauses(now) if pauses is None else pauses)
        queryset = queryset.filter(held, status=WorkStatus.READY) if held is not None else queryset.none()
    elif filters.status == WorkStatus.READY:
        queryset = queryset.filter(
            status=WorkStatus.READY, parked_at__isnull=True, awaiting_binding=False
        ).exclude(backing_off_at(now))
        held = paused_work_q(active_pauses(now) if pauses is None else pauses)
        if held is not None:
            queryset = queryset.exclude(held)
    elif filters.status:
        queryset = queryset.filter(status=filters.status)
    if filters.binding:
        queryset = queryset.filter(binding=filters.binding)
    if filters.key:
        keys = CorrelationKey.objects.filter(starts_with("key", filters.key))
        if filters.scope:
            keys = keys.filter(scope=filters.scope)  # a range of the (scope, key) unique index
        queryset = queryset.filter(pk__in=keys.values("work_id"))
    return queryset


def work_page(
    filters: WorkFilter,
    *,
    before: int | None = None,
    limit: int = PAGE_SIZE,
    oldest: bool = False,
    now: datetime | None = None,
    pauses: Sequence[Pause] | None = None,
) -> KeysetPage:
    """One page of Work, newest (highest id) first below ``before`` when given, or oldest
    first above it (``oldest``)."""
    queryset = work_filtered(filters, now=now, pauses=pauses)
    return keyset_page(queryset, key="id", cursor=before, limit=limit, descending=not oldest)


def work_total(
    filters: WorkFilter,
    *,
    cap: int = COUNT_CAP,
    now: datetime | None = None,
    pauses: Sequence[Pause] | None = None,
) -> ListTotal:
    """How many Work match ``filters``, counted up to ``cap`` (one query)."""
    return count_capped(work_filtered(filters, now=now, pauses=pauses), cap=cap)


def work_get(work_id: int) -> Work:
    """The Work with its parent, predecessor, successor and trigger, or ``Work.DoesNotExist``."""
    return Work.objects.select_related("parent", "predecessor", "successor", "trigger").get(pk=work_id)


@dataclass(frozen=True, slots=True)
class WorkCounts:
    """How many Work records are in each state as the Work list filters them (every state
    present): ``ready`` counts ready Work neither parked nor backing off, which
    ``parked`` and ``backing_off`` count apart."""

    by_status: dict[str, int]
    parked: int
    backing_off: int = 0
    awaiting_binding: int = 0

    @property
    def running(self) -> int:
        return self.by_status[WorkStatus.RUNNING]

    @property
    def by_state(self) -> dict[str, int]:
        """Each status, with parked and backing-off Work after ready."""
        states: dict[str, int] = {}
        for status, n in self.by_status.items():
            states[status] = n
            if status == WorkStatus.READY:
                states[PARKED] = self.parked
                states[BACKING_OFF] = self.backing_off
                states[AWAITING_BINDING] = self.awaiting_binding
        return states


def work_counts(*, now: datetime | None = None) -> WorkCounts:
    """Work by status, parked and backing-off Work counted apart from ready, in one query."""
    now = now or system_clock()
    by_status = {status: 0 for status in WorkStatus.values}
    parked = backing_off = awaiting = 0
    rows = (
        Work.objects.values("status")
        .annotate(
            n=Count("id"),
            parked=Count("id", filter=Q(parked_at__isnull=False)),
            backing_off=Count("id", filter=backing_off_at(now)),
            awaiting=Count("id", filter=awaiting_binding_q()),
        )
        .order_by()
    )
    for row in rows:
        by_status[row["status"]] = row["n"]
        if row["status"] == WorkStatus.READY:
            parked, backing_off, awaiting = row["parked"], row["backing_off"], row["awaiting"]
            by_status[row["status"]] = row["n"] - parked - backing_off - awaiting
    return WorkCounts(by_status=by_status, parked=parked, backing_off=backing_off, awaiting_binding=awaiting)


def work_keys(work_id: int, *, limit: int = 100) -> KeysetPage:
    """The correlation keys the Work owns, in the order they were attached."""
    queryset = CorrelationKey.objects.filter(work_id=work_id)
    return keyset_page(queryset, key="id", limit=limit, descending=False)


def work_attempts(work_id: int, *, limit: int = PAGE_SIZE) -> KeysetPage:
    """The Work's attempts, newest first."""
    return keyset_page(Attempt.objects.filter(work_id=work_id), key="number", limit=limit)


def work_inputs_page(
    work_id: int, *, after: int | None = None, limit: int = PAGE_SIZE, newest: bool = False
) -> KeysetPage:
    """The Work's input (WorkInput rows joined with their Events and attempts) in acceptance
    order after the Event seq ``after`` when given, or newest first below it (``newest``)."""
    queryset = WorkInput.objects.filter(work_id=work_id).select_related("event", "attempt")
    return keyset_page(queryset, key="seq", cursor=after, limit=limit, descending=newest)


def work_input_presentations(work_id: int, inputs: list[WorkInput]) -> dict[int, tuple[int, int]]:
    """Which attempts each consumed input of ``inputs`` was presented to, by its seq, as
    (first, last) attempt numbers: the attempt that consumed it, and, when that one failed or
    was lost, every later attempt up to the next success (or the latest attempt), as a retry
    presents a failed attempt's input again (``worklife.scheduling.presentations_in_tx``).
    One query, none when no input was consumed."""
    numbers = [row.attempt.number for row in inputs if row.attempt_id is not None]
    if not numbers:
        return {}
    attempts = Attempt.objects.filter(work_id=work_id)
    latest = attempts.order_by("-number").values("pk")[:1]
    rows = list(
        attempts.filter(Q(state=AttemptState.SUCCEEDED, number__gte=min(numbers)) | Q(pk=Subquery(latest)))
        .order_by("number")
        .values_list("number", "state")
    )
    latest_number = max([*numbers, *(number for number, _ in rows)])
    success_numbers = [number for number, state in rows if state == AttemptState.SUCCEEDED]
    result: dict[int, tuple[int, int]] = {}
    for row in inputs:
        if row.attempt_id is None:
            continue
        first = row.attempt.number
        if row.attempt.state not in (AttemptState.FAILED, AttemptState.LOST):
            result[row.seq] = (first, first)
            continue
        later = [n for n in success_numbers if n > first]
        result[row.seq] = (first, later[0] if later else latest_number)
    return result


def presented_text(span: tuple[int, int] | None) -> str:
    """An input's attempts in words: "attempt 1", "attempts 1–14", or "" for none."""
    if span is None:
        return ""
    first, last = span
    return f"attempt {first}" if first == last else f"attempts {first}–{last}"


def work_inputs_total(work_id: int, *, cap: int = COUNT_CAP) -> ListTotal:
    """How many inputs the Work has, counted up to ``cap`` (one query)."""
    return count_capped(WorkInput.objects.filter(work_id=work_id), cap=cap)


def work_unrouted_events(work: Work, *, limit: int = PAGE_SIZE) -> KeysetPage:
    """Unrouted Events that target this Work explicitly (its id, or a key it owns), in
    acceptance order: they hold the Work's later input and its Complete (R19)."""
    owned = CorrelationKey.objects.filter(work_id=work.pk).values("key")
    queryset = (
        Event.objects.filter(route_state=RouteState.UNROUTED)
        .filter(Q(work_id=work.pk) | Q(keys__scope=work.scope, keys__key__in=owned))
        .distinct()
    )
    return keyset_page(queryset, key="seq", limit=limit, descending=False)


# --- the engine: what the Work page and doctor show of work_loop's view -------------------------


def work_waits(work_id: int, *, limit: int = ENGINE_LIST_LIMIT) -> KeysetPage:
    """The Work's waits, newest first, each with its attempt's number and the scope it also
    waits on (``subscribed_scope``: its dependency subscription's, R42; ``None`` without)."""
    subscribed = DependencySubscription.objects.filter(wait=OuterRef("pk")).order_by("pk").values("scope")[:1]
    queryset = Wait.objects.filter(work_id=work_id).annotate(
        attempt_number=F("attempt__number"), subscribed_scope=Subquery(subscribed)
    )
    return keyset_page(queryset, key="id", limit=limit)


def work_timers(work_id: int, *, limit: int = ENGINE_LIST_LIMIT) -> KeysetPage:
    """The Work's timers, newest first."""
    return keyset_page(Timer.objects.filter(work_id=work_id), key="id", limit=limit)


def work_intents(work_id: int, *, limit: int = ENGINE_LIST_LIMIT) -> KeysetPage:
    """The Work's inject and interrupt intents, newest first, each with its Event's type and
    its attempt's number."""
    queryset = Intent.objects.filter(work_id=work_id).annotate(
        attempt_number=F("attempt__number"), event_type=F("event__type")
    )
    return keyset_page(queryset, key="id", limit=limit)


def work_children(work_id: int, *, limit: int = ENGINE_LIST_LIMIT) -> KeysetPage:
    """The Work's children, newest first."""
    return keyset_page(Work.objects.filter(parent_id=work_id), key="id", limit=limit)


def work_runnable(*, now: datetime) -> QuerySet[Work]:
    """Work a work_loop may start an attempt of at ``now``: ready, not parked, not backing
    off, not paused, with pending input or input to present again (a retry). The same rule as
    ``worklife.scheduling.claimable_work_in_tx``, without its locks."""
    pending = WorkInput.objects.filter(
        work=OuterRef("pk"), state=InputState.PENDING, kind__in=PRESENTED_KINDS
    )
    query = (
        Work.objects.filter(status=WorkStatus.READY, parked_at__isnull=True)
        .filter(Q(retry_at__isnull=True) | Q(retry_at__lte=now))
        .filter(Q(pending_run=True) | Exists(pending))
        .filter(Q(held_until__isnull=True) | Q(held_until__lte=now))
    )
    held = paused_work_q(active_pauses(now))
    return query.exclude(held) if held is not None else query


def work_parked() -> QuerySet[Work]:
    """Ready Work parked after too many failures in a row, longest parked first."""
    return Work.objects.filter(status=WorkStatus.READY, parked_at__isnull=False).order_by("parked_at", "id")


class NotRunning(StrEnum):
    """Why a Work runs no attempt now (or that it runs one): the Work page's one line."""

    RUNNING = "running"  # an attempt runs
    WAITING = "waiting"  # its attempt is parked on a wait
    COMPLETED = "completed"  # terminal
    CANCELLED = "cancelled"  # terminal
    PARKED = "parked"  # too many failures in a row: an operator retries or cancels it
    BACKING_OFF = "backing_off"  # an attempt failed; the next one starts after retry_at
    QUEUE_ONLY = "queue_only"  # its binding has no executor: its input waits in the queue
    DISPATCH_REFUSED = "dispatch_refused"  # the configuration refused its next attempt
    # Either of the two above, as the Work list marks it (work_hold, from the row alone).
    AWAITING_BINDING = "awaiting_binding"
    HELD = "held"  # nothing to run; its next input is held behind an unrouted Event (R19)
    FLOW_HELD = "flow_held"  # flow control holds it: a concurrency limit, a throttle, debounce, batch
    PAUSED = "paused"  # an operator paused its scope or its binding: its input queues
    NO_INPUT = "no_input"  # nothing to run and nothing on the way
    CLAIMABLE = "claimable"  # runnable now: a work_loop claims it on its next pass


@dataclass(frozen=True, slots=True)
class WhyNotRunning:
    """The reason, one line saying it, and what it names: the time it lasts until, the
    attempt, the unrouted Event or the wait."""

    reason: NotRunning
    text: str
    until: datetime | None = None
    attempt: int | None = None
    event_seq: int | None = None
    wait_id: int | None = None


def work_why_not_running(work: Work, *, now: datetime) -> WhyNotRunning:
    """Why ``work`` runs no attempt at ``now`` (or which attempt it runs), in one line.
    At most two queries: the Work's latest attempt, pending input and active wait in one, then
    the unrouted Event holding it when it has nothing to run, or the pauses in force when it has."""
    if work.status == WorkStatus.COMPLETED:
        return WhyNotRunning(NotRunning.COMPLETED, "completed")
    if work.status == WorkStatus.CANCELLED:
        return WhyNotRunning(NotRunning.CANCELLED, "cancelled")
    facts = _engine_facts(work.pk)
    number, state = facts.get("attempt_number"), facts.get("attempt_state")
    if state == AttemptState.RUNNING:
        return WhyNotRunning(NotRunning.RUNNING, f"running attempt {number}", attempt=number)
    if state == AttemptState.WAITING:
        name = facts.get("wait_name")
        if facts.get("wait_id") is None:
            return WhyNotRunning(
                NotRunning.WAITING, f"waiting: attempt {number} is parked on no active wait", attempt=number
            )
        text = f"waiting on wait {name or '#' + str(facts['wait_id'])}"
        if facts.get("wait_blocked"):
            text += f" (blocked: {facts['wait_blocked']})"
        return WhyNotRunning(NotRunning.WAITING, text, attempt=number, wait_id=facts["wait_id"])
    if work.status != WorkStatus.READY:
        # Running or waiting with no live attempt: the moment between two commits.
        return WhyNotRunning(NotRunning(work.status), f"{work.status}, with no live attempt")
    failures = failures_text(work.failures)
    # A failure's line names the latest attempt ("attempt 3 failed: ..."); any other line is
    # a refused dispatch.
    failed = bool(number) and work.last_error.startswith(f"attempt {number} {state}:")
    if work.parked_at is not None:
        # Parked after attempts lost with their loop, or after failures of its own. (Imported
        # here: reads such as ``events get`` do not load the scheduler's writes.)
        from worklife.scheduling import max_losses

        lost = counted(work.losses, "attempts")
        after = f"{lost} lost in a row" if work.losses >= max_losses() else failures
        return WhyNotRunning(
            NotRunning.PARKED, f"parked after {after} ({work.last_error or 'no error recorded'})"
        )
    if not (work.pending_run or facts.get("pending")):
        held = work_unrouted_events(work, limit=1)
        if held:
            seq = held.items[0].seq
            return WhyNotRunning(
                NotRunning.HELD,
                f"held by unrouted #{seq}: its later input waits until that Event is routed",
                event_seq=seq,
            )
        return WhyNotRunning(NotRunning.NO_INPUT, "no input: nothing is queued for it")
    # It has something to run: a pause of its scope or binding holds it back first.
    binding = work.retry_binding or work.binding
    pause = pause_holding(scope=work.scope, binding=binding, pauses=active_pauses(now))
    if pause is not None:
        return WhyNotRunning(NotRunning.PAUSED, hold_line(pause), until=pause.until)
    if flow_hold_active(work, now):
        return WhyNotRunning(NotRunning.FLOW_HELD, flow_hold_text(work), until=work.held_until)
    again = f" (checked again at {_when(work.retry_at)})" if work.retry_at else ""
    if work.last_error and not failed:
        if "queue-only" in work.last_error:
            refusal = work.last_error.removeprefix(DISPATCH_REFUSED)
            return WhyNotRunning(
                NotRunning.QUEUE_ONLY,
                f"waiting for a binding that can run it: queue-only binding: {refusal}{again}",
                until=work.retry_at,
            )
        error = work.last_error.removeprefix(DISPATCH_REFUSED)
        return WhyNotRunning(
            NotRunning.DISPATCH_REFUSED,
            f"waiting for a binding that can run it: dispatch refused: {error}{again}",
            until=work.retry_at,
        )
    after = f" after {failures}: {work.last_error}" if work.failures else ""
    if work.retry_at is not None and work.retry_at > now:
        return WhyNotRunning(
            NotRunning.BACKING_OFF, f"backing off until {_when(work.retry_at)}{after}", until=work.retry_at
        )
    retry = f" (a retry{after})" if work.failures else ""
    return WhyNotRunning(NotRunning.CLAIMABLE, f"ready to run{retry}: waiting for a work_loop to claim it")


def _engine_facts(work_id: int) -> dict[str, Any]:
    """The Work's latest attempt (number, state), whether it has input to run, and its active
    wait (id, name, blocked reason), in one query."""
    latest = Attempt.objects.filter(work=OuterRef("pk")).order_by("-number")
    wait = Wait.objects.filter(work=OuterRef("pk"), state=WaitState.ACTIVE).order_by("-id")
    pending = WorkInput.objects.filter(
        work=OuterRef("pk"), state=InputState.PENDING, kind__in=PRESENTED_KINDS
    )
    row = (
        Work.objects.filter(pk=work_id)
        .annotate(
            attempt_number=Subquery(latest.values("number")[:1]),
            attempt_state=Subquery(latest.values("state")[:1]),
            pending=Exists(pending),
            wait_id=Subquery(wait.values("pk")[:1]),
            wait_name=Subquery(wait.values("name")[:1]),
            wait_blocked=Subquery(wait.values("blocked_reason")[:1]),
        )
        .values("attempt_number", "attempt_state", "pending", "wait_id", "wait_name", "wait_blocked")
        .first()
    )
    return row or {}


def failures_text(n: int) -> str:
    """The count of failures in words, as the Work pages say it: "1 failure", "3 failures"."""
    return f"{n} failure{'s' if n != 1 else ''}"


def work_hold(work: Work, *, now: datetime) -> NotRunning | None:
    """What holds a Work's next attempt back, from its row alone (no query): ``PARKED``, or
    ``BACKING_OFF`` until its ``retry_at``, or ``None``; the marks the console's Work list
    shows beside the status (:func:`work_why_not_running` says the whole why, with queries)."""
    if work.is_parked:
        return NotRunning.PARKED
    if work.is_awaiting_binding:
        return NotRunning.AWAITING_BINDING
    if work.is_backing_off(now):
        return NotRunning.BACKING_OFF
    if flow_hold_active(work, now):
        return NotRunning.FLOW_HELD
    return None


def work_pauses(
    works: Iterable[Work], *, now: datetime, pauses: Sequence[Pause] | None = None
) -> dict[int, Pause]:
    """The pause holding each ready Work of ``works`` a scope or binding pause holds, by Work id:
    the mark the Work list shows beside its status (one query for a page of Work, none when the
    caller passes the ``pauses`` in force)."""
    ready = [work for work in works if work.status == WorkStatus.READY]
    if pauses is None:
        pauses = active_pauses(now) if ready else []
    holding = {
        work.pk: pause_holding(scope=work.scope, binding=work.retry_binding or work.binding, pauses=pauses)
        for work in ready
    }
    return {pk: pause for pk, pause in holding.items() if pause is not None}


def _when(moment: datetime | None) -> str:
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC" if moment is not None else "-"
