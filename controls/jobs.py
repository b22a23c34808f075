"""Bulk jobs: retry or cancel many Work, replay many Events, in the background with progress.

A bulk control is stored first (:func:`work_bulk_job`, :func:`events_replay_job`): the job and
its targets in the order they will be acted on, after the count check (the number of targets
the operator saw, required on every path: the console, ``POST /api/work/bulk`` and the CLI).
Storing is all the request does (one row, the targets in it), so it returns at once with the job.

The job then runs in batches of :data:`BATCH_SIZE` targets (:func:`bulk_job_step`), each batch
one transaction with a fixed number of statements whatever the job's size: the targets read and
locked in one statement, the effect written set-based (``worklife.scheduling.works_retry_in_tx``,
``worklife.lifecycle.works_cancel_in_tx``, one acceptance of all the replay copies), one control
Event per target accepted together (:func:`controls.common.control_events_in_tx`), each target's
outcome and the job's progress stored. A batch locks the job's row first, so two runners (the
route loop, a command running the job in the foreground) take batches in turn and never twice;
a runner that stops leaves the job where its last batch committed, and the next one resumes it.

Who runs them: every route loop (``manage.py route_loop``, which ``make run`` starts) runs a
batch of the oldest unfinished job between its routing passes, and ``manage.py work retry
--filter …`` / ``events replay --filter …`` run their job in the foreground with a progress bar.

A job is cancellable (:func:`bulk_job_cancel`): the batch in progress commits, the targets left
are not acted on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from causal.checks import is_reserved
from causal.clock import Clock
from causal.models import Event, RouteState
from causal.services import event_envelope, events_accept_in_tx
from controls.bulk import BulkCountChanged, work_bulk_count_check, work_bulk_ids
from controls.common import ControlNote, actor_name, control_events_in_tx, live_label
from controls.events import REPLAY_EVENT
from controls.models import FINISHED_JOB_STATES, BulkJob, BulkJobItem, ItemOutcome, JobKind, JobState
from controls.replay import (
    REPLAY_LIMIT,
    ReplayInvalid,
    next_replay_number_in_tx,
    replay_envelope_id,
    replay_seqs,
)
from controls.work import WRONG_STATE, WorkControl, WorkControlInvalid, cancel_reason
from infra.wakeup import ACCEPTED, notify_on_commit
from routing.engine.claims import commit_lock_alone_in_tx
from routing.engine.live import publish_routed
from routing.models import RouteRecord
from routing.records.filters import EventListFilter
from routing.records.selectors import events_listed
from worklife.lifecycle import works_cancel_in_tx
from worklife.models import Work
from worklife.scheduling import works_retry_in_tx
from worklife.selectors import WorkFilter

logger = logging.getLogger("conduit.routing")

# Targets acted on in one batch (one transaction, a fixed number of statements).
BATCH_SIZE = 200
# The Work control each Work job applies.
WORK_JOBS = {WorkControl.RETRY: JobKind.RETRY_WORK, WorkControl.CANCEL: JobKind.CANCEL_WORK}
# The permission each job's control needs (to store one, and to cancel it).
JOB_PERMISSIONS = {
    JobKind.RETRY_WORK: "worklife.retry_work",
    JobKind.CANCEL_WORK: "worklife.cancel_work",
    JobKind.REPLAY_EVENT: "routing.replay_event",
}
# Replay copies' numbers looked for at once per Event (beyond, the Event is looked at alone).
_NUMBERS_AT_ONCE = 4
_ENVELOPE_ID_MAX = Event._meta.get_field("envelope_id").max_length


@dataclass(frozen=True, slots=True)
class Outcome:
    """One target's outcome in a batch."""

    outcome: str
    message: str
    control_seq: int | None = None
    copy_seq: int | None = None


# --- storing a job ---------------------------------------------------------------------------------


def work_bulk_job(
    *,
    action: WorkControl,
    count: Any,
    user: AbstractBaseUser | str,
    clock: Clock,
    ids: Sequence[int] | None = None,
    filters: WorkFilter | None = None,
    reason: str | None = None,
) -> BulkJob:
    """Store a job retrying or cancelling the Work named by ``ids`` or ``filters`` (see
    :func:`controls.bulk.work_bulk_ids`), after checking ``count``, the number of Work the
    caller confirmed: required, and equal to the number named now (:class:`BulkCountChanged`
    otherwise; nothing is stored). Raises :class:`WorkControlInvalid` for malformed input."""
    if action not in WORK_JOBS:
        raise WorkControlInvalid("action", f"{action} is not a bulk control")
    by = actor_name(user)
    reason = cancel_reason(reason) if action == WorkControl.CANCEL else ""
    chosen = work_bulk_ids(ids=ids, filters=filters, now=clock())
    work_bulk_count_check(work_ids=chosen, count=count)
    description = (
        f"{len(chosen)} Work matching {_filter_words(filters)}"
        if filters is not None
        else f"{len(chosen)} Work by id"
    )
    return _job_store(
        kind=WORK_JOBS[action], targets=chosen, by=by, description=description, reason=reason, clock=clock
    )


def events_replay_job(
    *, seqs: Sequence[Any], count: Any, user: AbstractBaseUser | str, clock: Clock, description: str = ""
) -> BulkJob:
    """Store a job replaying the Events ``seqs`` (see :func:`controls.replay.replay_seqs`), after
    checking ``count``, the number of Events the caller confirmed (required; another number
    raises :class:`BulkCountChanged`, nothing stored)."""
    by = actor_name(user)
    chosen = replay_seqs(seqs)
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise ReplayInvalid(
            "count",
            f"replaying several Events needs the number of Events confirmed (count, a whole number), got {count!r}",
        )
    if count != len(chosen):
        raise BulkCountChanged(confirmed=count, count=len(chosen), noun="Events")
    return _job_store(
        kind=JobKind.REPLAY_EVENT,
        targets=chosen,
        by=by,
        description=description or f"{len(chosen)} Events",
        reason="",
        clock=clock,
    )


def _job_store(
    *, kind: str, targets: Sequence[int], by: str, description: str, reason: str, clock: Clock
) -> BulkJob:
    now = clock()
    with transaction.atomic():
        job = BulkJob.objects.create(
            kind=kind,
            created_by=by,
            description=description[:500],
            reason=reason,
            targets=list(targets),
            total=len(targets),
            created_at=now,
            updated_at=now,
            # Nothing to act on (a filter matching no Work, confirmed as 0): done as it is stored.
            state=JobState.DONE if not targets else JobState.PENDING,
            finished_at=now if not targets else None,
        )
        # The route loops run jobs between their passes: wake one.
        notify_on_commit(ACCEPTED)
    logger.info("bulk_job.stored", extra={"job": job.pk, "kind": kind, "total": job.total, "by": by})
    return job


def _filter_words(filters: WorkFilter) -> str:
    words = [
        f"{name}={getattr(filters, name)}"
        for name in ("scope", "status", "binding", "key")
        if getattr(filters, name)
    ]
    return " ".join(words) or "no filter (all Work)"


def replay_seqs_matching(filters: EventListFilter, *, limit: int = REPLAY_LIMIT) -> list[int]:
    """The seqs of the Events ``filters`` selects (paging aside), oldest first; more than
    ``limit`` is refused (:class:`ReplayInvalid`)."""
    seqs = list(
        events_listed(filters).select_related(None).order_by("seq").values_list("seq", flat=True)[: limit + 1]
    )
    if len(seqs) > limit:
        raise ReplayInvalid("filter", f"at most {limit:,} Events can be replayed at once; narrow the filter")
    if not seqs:
        raise ReplayInvalid("filter", "no Event matches the filter: nothing to do")
    return seqs


# --- running it ---------------------------------------------------------------------------------------


def bulk_job_next() -> int | None:
    """The id of the oldest job not finished, or ``None``."""
    return (
        BulkJob.objects.filter(state__in=[JobState.PENDING, JobState.RUNNING])
        .order_by("id")
        .values_list("pk", flat=True)
        .first()
    )


def bulk_job_step(*, clock: Clock, job_id: int | None = None, batch_size: int = BATCH_SIZE) -> BulkJob | None:
    """Run the next batch of the job ``job_id`` (the oldest unfinished job when not given), in
    one transaction; returns the job as the batch left it, or ``None`` when there was no batch
    to run (no job, or it is finished)."""
    job_id = job_id if job_id is not None else bulk_job_next()
    if job_id is None:
        return None
    with transaction.atomic():
        job = BulkJob.objects.select_for_update().filter(pk=job_id).first()
        if job is None or job.state in FINISHED_JOB_STATES:
            return None
        targets = job.targets[job.position : job.position + batch_size]
        by, now = job.created_by, clock()
        if job.kind == JobKind.REPLAY_EVENT:
            outcomes = _replay_batch_in_tx(targets, by=by, clock=clock, job=job)
        else:
            outcomes = _work_batch_in_tx(job, targets, by=by, clock=clock)
        items = [
            BulkJobItem(
                job=job,
                position=job.position + i,
                target=target,
                outcome=outcomes[target].outcome,
                message=outcomes[target].message[:500],
                control_seq=outcomes[target].control_seq,
                copy_seq=outcomes[target].copy_seq,
            )
            for i, target in enumerate(targets)
        ]
        BulkJobItem.objects.bulk_create(items)
        job.position += len(items)
        job.succeeded += sum(1 for i in items if i.outcome == ItemOutcome.DONE)
        job.refused += sum(1 for i in items if i.outcome != ItemOutcome.DONE)
        job.state = JobState.DONE if job.position >= job.total else JobState.RUNNING
        job.updated_at = now
        job.finished_at = now if job.state == JobState.DONE else None
        job.save(update_fields=["position", "succeeded", "refused", "state", "updated_at", "finished_at"])
    if job.state == JobState.DONE:
        logger.info(
            "bulk_job.done",
            extra={"job": job.pk, "kind": job.kind, "done": job.succeeded, "refused": job.refused, "by": by},
        )
    return job


def bulk_job_run(
    *,
    job_id: int,
    clock: Clock,
    progress: Callable[[BulkJob], None] | None = None,
    batch_size: int = BATCH_SIZE,
) -> BulkJob:
    """Run the job ``job_id`` batch after batch until it is finished (or cancelled), calling
    ``progress`` after each batch; returns the job as it ended."""
    while bulk_job_step(clock=clock, job_id=job_id, batch_size=batch_size) is not None:
        if progress is not None:
            progress(bulk_job_get(job_id))
    return bulk_job_get(job_id)


def bulk_job_cancel(*, job_id: int, user: AbstractBaseUser | str, clock: Clock) -> BulkJob:
    """Stop the job ``job_id``: the batch in progress commits, the targets left (from its
    ``position``) are not acted on. A finished job is left as it is. ``BulkJob.DoesNotExist`` for
    an unknown id."""
    by = actor_name(user)
    with transaction.atomic():
        job = BulkJob.objects.select_for_update().get(pk=job_id)
        if job.state in FINISHED_JOB_STATES:
            return job
        now = clock()
        skipped = job.total - job.position
        job.state, job.cancelled_by, job.updated_at, job.finished_at = JobState.CANCELLED, by, now, now
        job.save(update_fields=["state", "cancelled_by", "updated_at", "finished_at"])
    logger.info("bulk_job.cancelled", extra={"job": job.pk, "by": by, "skipped": skipped})
    return job


# --- reads ---------------------------------------------------------------------------------------------


def bulk_job_get(job_id: int) -> BulkJob:
    return BulkJob.objects.get(pk=job_id)


def bulk_job_items(
    job: BulkJob, *, refused_only: bool = False, after: int = -1, limit: int = 100
) -> list[BulkJobItem]:
    """The job's first ``limit`` targets acted on after the position ``after``, with their
    outcome (only those not done when ``refused_only``), in the job's order."""
    items = job.items.filter(position__gt=after).order_by("position")
    if refused_only:
        items = items.exclude(outcome=ItemOutcome.DONE)
    return list(items[:limit])


def bulk_job_as_dict(job: BulkJob, items: Sequence[BulkJobItem] = ()) -> dict[str, Any]:
    """The job and its progress as JSON-ready data (the API, ``--json``)."""
    return {
        "id": job.pk,
        "kind": job.kind,
        "state": job.state,
        "description": job.description,
        "created_by": job.created_by,
        "created_at": job.created_at.isoformat(),
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
        "cancelled_by": job.cancelled_by,
        "total": job.total,
        "position": job.position,
        "done": job.succeeded,
        "refused": job.refused,
        "items": [
            {
                "position": item.position,
                "target": item.target,
                "outcome": item.outcome,
                "message": item.message,
                "control_seq": item.control_seq,
                "copy_seq": item.copy_seq,
            }
            for item in items
        ],
    }


# --- one batch, inside its transaction --------------------------------------------------------------


def _work_batch_in_tx(job: BulkJob, targets: Sequence[int], *, by: str, clock: Clock) -> dict[int, Outcome]:
    action = WorkControl.RETRY if job.kind == JobKind.RETRY_WORK else WorkControl.CANCEL
    now = clock()
    works = {w.pk: w for w in Work.objects.select_for_update().filter(pk__in=list(targets))}
    if action == WorkControl.RETRY:
        acted = works_retry_in_tx(works=list(works.values()), now=now)
    else:
        acted, _ = works_cancel_in_tx(works=list(works.values()), now=now)
    extra: dict[str, Any] = {"job": job.pk}
    if job.reason:
        extra["reason"] = job.reason
    notes = [
        ControlNote(target=str(pk), scope=works[pk].scope, data={"work": pk, "by": by, **extra}, work_id=pk)
        for pk in acted
    ]
    controls = control_events_in_tx(action.value, notes, by=by, clock=clock, generation=live_label())
    publish_routed([c.seq for c in controls], acted)
    verb = "retried" if action == WorkControl.RETRY else "cancelled"
    outcomes = {
        pk: Outcome(ItemOutcome.DONE, f"Work {pk} {verb} by {by}", control_seq=c.seq)
        for pk, c in zip(acted, controls, strict=True)
    }
    for pk in targets:
        if pk in outcomes:
            continue
        work = works.get(pk)
        if work is None:
            outcomes[pk] = Outcome(ItemOutcome.NOT_FOUND, f"no Work has id {pk}")
        elif work.is_terminal:
            outcomes[pk] = Outcome(ItemOutcome.REFUSED, f"Work {pk} is {work.status}: {WRONG_STATE[action]}")
        else:
            outcomes[pk] = Outcome(
                ItemOutcome.REFUSED,
                f"Work {pk} is {work.status} and neither parked nor backing off: {WRONG_STATE[action]}",
            )
    return outcomes


def _replay_batch_in_tx(targets: Sequence[int], *, by: str, clock: Clock, job: BulkJob) -> dict[int, Outcome]:
    # The router's commit lock, once for the batch: the states read below are the ones route
    # commits leave (as each replay reads them: controls.events.locked_event_in_tx).
    commit_lock_alone_in_tx()
    events = {
        e.seq: e
        for e in Event.objects.select_for_update(of=("self",))
        .select_related("parent")
        .filter(seq__in=list(targets))
    }
    outcomes: dict[int, Outcome] = {}
    replayable: list[Event] = []
    for seq in targets:
        event = events.get(seq)
        if event is None:
            outcomes[seq] = Outcome(ItemOutcome.NOT_FOUND, f"no Event has seq {seq}")
        elif event.route_state == RouteState.UNROUTED:
            outcomes[seq] = Outcome(ItemOutcome.REFUSED, f"Event #{seq} is not routed yet")
        elif is_reserved(event.type):
            outcomes[seq] = Outcome(
                ItemOutcome.REFUSED,
                f"Event #{seq} is one Conduit wrote for itself ({event.type}): it cannot be replayed",
            )
        else:
            replayable.append(event)
    numbers = _next_numbers_in_tx(replayable)
    copies_of: list[Event] = []
    envelopes = []
    for event in replayable:
        copy_id = replay_envelope_id(event.envelope_id, numbers[event.seq])
        if len(copy_id) > _ENVELOPE_ID_MAX:
            outcomes[event.seq] = Outcome(
                ItemOutcome.REFUSED,
                f"Event #{event.seq} cannot be replayed: its copy's id would be longer than {_ENVELOPE_ID_MAX} characters",
            )
            continue
        copies_of.append(event)
        envelopes.append(replace(event_envelope(event), id=copy_id))
    copies = [
        a.event
        for a in events_accept_in_tx(
            envelopes=envelopes, clock=clock, accepted_by=by, parents=[e.parent for e in copies_of]
        )
    ]
    work_of: dict[int, int | None] = {}
    for event_id, work_id in (
        RouteRecord.objects.filter(event_id__in=[e.seq for e in copies_of])
        .order_by("id")
        .values_list("event_id", "work_id")
    ):
        work_of.setdefault(event_id, work_id)
    notes = [
        ControlNote(
            target=str(event.seq),
            scope=event.scope,
            data={
                "event": event.seq,
                "envelope_id": event.envelope_id,
                "source": event.source,
                "copy": copy.seq,
                "copy_id": copy.envelope_id,
                "by": by,
                "job": job.pk,
            },
            work_id=work_of.get(event.seq),
        )
        for event, copy in zip(copies_of, copies, strict=True)
    ]
    controls = control_events_in_tx(REPLAY_EVENT, notes, by=by, clock=clock, generation=live_label())
    publish_routed(
        [e.seq for e in copies_of] + [c.seq for c in controls] + [c.seq for c in copies],
        [w for w in work_of.values() if w is not None],
    )
    for event, copy, control in zip(copies_of, copies, controls, strict=True):
        outcomes[event.seq] = Outcome(
            ItemOutcome.DONE,
            f"Event #{event.seq} replayed as #{copy.seq}",
            control_seq=control.seq,
            copy_seq=copy.seq,
        )
    if copies:
        notify_on_commit(ACCEPTED)
    return outcomes


def _next_numbers_in_tx(events: Sequence[Event]) -> dict[int, int]:
    """The number of each Event's next replay copy, in one query for them all; an Event with
    more copies than that query looks for is looked at alone (rare)."""
    if not events:
        return {}
    wanted: dict[tuple[str, str], tuple[int, int]] = {}
    for event in events:
        for n in range(1, _NUMBERS_AT_ONCE + 1):
            wanted[(event.source, replay_envelope_id(event.envelope_id, n))] = (event.seq, n)
    highest: dict[int, int] = {e.seq: 0 for e in events}
    for source, envelope_id in Event.objects.filter(
        source__in={e.source for e in events}, envelope_id__in=[envelope_id for _, envelope_id in wanted]
    ).values_list("source", "envelope_id"):
        hit = wanted.get((source, envelope_id))
        if hit is not None:
            highest[hit[0]] = max(highest[hit[0]], hit[1])
    return {
        event.seq: highest[event.seq] + 1
        if highest[event.seq] < _NUMBERS_AT_ONCE
        else next_replay_number_in_tx(event)
        for event in events
    }
