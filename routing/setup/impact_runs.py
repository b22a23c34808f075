"""Impact previews in the background: progress while they run, a roll-up by
effect and route, the changed Events a page at a time.

:func:`impact_run_start` stores a run (:class:`~routing.models.ImpactRun`) and returns at once;
:func:`impact_run_execute` traces it (:func:`routing.setup.impact.impact_preview`), writing how
many Events it has traced of how many as it goes, then stores the changed Events
(:class:`~routing.models.ImpactRunChange`, with both traces) and their roll-up in one
transaction. :func:`impact_run_launch` runs that in a thread of the web process, so the page
shows the progress ("Events traced N of M") and the roll-up when it is done. A run outlives its
candidate: after Apply its groups can still be replayed (:func:`impact_run_seqs`).

Runs are expensive reads, so they have quotas and stop when nobody waits for them:
:func:`impact_run_start` refuses (:class:`ImpactBusy`, with a time to retry) a login or an API
token that already has ``CONDUIT_IMPACT_JOBS_PER_LOGIN`` / ``CONDUIT_IMPACT_JOBS_PER_TOKEN``
runs running, and anyone while ``CONDUIT_IMPACT_JOBS_TOTAL`` run (counted from the rows, so
the quotas hold across web processes and hosts). Each run records when it was last waited for
(:func:`impact_run_waited`: started, polled); between chunks (each progress write) the run
reads its row and stops (status ``cancelled``) when it was cancelled
(:func:`impact_run_cancel`) or nobody waited for it for ``CONDUIT_IMPACT_ABANDON_SECONDS``.

The traces still write nothing (R37): the run's own rows are all a preview stores.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, close_old_connections, connection, connections, transaction
from django.db.models.sql import UpdateQuery
from django.db.models.sql.constants import ROW_COUNT

from causal.clock import Clock
from routing.models import Generation, ImpactRun, ImpactRunChange, ImpactRunStatus
from routing.setup.impact import ImpactInvalid, ImpactReport, Outcome, impact_checked, impact_preview

logger = logging.getLogger("conduit.routing")

# Changed Events shown a page.
PAGE_SIZE = 50
# A running run whose progress is older than this was lost with its process.
LOST_AFTER = timedelta(seconds=60)
# Progress is written at most this often (seconds), and when the run ends.
PROGRESS_SECONDS = 0.25
# How long a refused start is told to wait before it tries again (seconds): about what a
# large run takes.
RETRY_AFTER_SECONDS = 10
# How the summary names what the candidate would do, by its effect ("would start 212 Work").
EFFECT_PHRASES = {
    "start": "start {n} Work",
    "drop": "drop {n}",
    "unmatched": "leave {n} unmatched",
    "queue": "queue {n} on existing Work",
    "refused": "refuse {n}",
}


@dataclass(frozen=True, slots=True)
class RollupGroup:
    """Changed Events with the same change and the same route: how many."""

    group: str  # the change ("unmatched → start")
    effect: str  # the candidate's effect
    route: str  # the candidate's route (else the live one), "" for none
    count: int

    def as_dict(self) -> dict[str, Any]:
        return {"group": self.group, "effect": self.effect, "route": self.route, "count": self.count}


class ImpactBusy(Exception):
    """A run cannot start now: its login, its token or the whole site has as many runs running
    as its quota allows. ``retry_after``: seconds to wait before trying again."""

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after

    def details(self) -> dict[str, Any]:
        return {"error": "too_many_requests", "message": self.message, "retry_after": self.retry_after}


class ImpactCancelled(Exception):
    """Raised between chunks of a run that was cancelled or that nobody waits for any more."""


def impact_run_start(
    *, candidate: Generation, clock: Clock, events: int | None, by: str, token_id: int | None = None
) -> tuple[ImpactRun, bool]:
    """Store a new run of the impact preview of ``candidate`` over the latest ``events`` Events
    and return it with ``True``, not yet traced (:func:`impact_run_launch` traces it); while a
    run of the candidate is still running, that run with ``False`` (a new run deletes the
    candidate's finished ones). Raises
    :class:`~routing.setup.impact.ImpactInvalid` as the preview would (bad count, not a
    candidate, nothing live), :class:`ImpactBusy` past a quota (the login ``by``, the API token
    ``token_id``, the site: see the module's documentation)."""
    limit, live = impact_checked(candidate, events)
    now = clock()
    with transaction.atomic():
        # One run of a candidate at a time: one still running is the answer (the page's button
        # is disabled meanwhile; this holds when two start at once, serialised on the candidate's
        # row). Its finished runs give way to the new one.
        Generation.objects.select_for_update().filter(pk=candidate.pk).first()
        runs = ImpactRun.objects.filter(candidate=candidate)
        running = runs.filter(status=ImpactRunStatus.RUNNING).order_by("-id").first()
        if running is not None and not impact_run_lost(running, now=now):
            ImpactRun.objects.filter(pk=running.pk).update(waited_at=now)
            running.waited_at = now
            return running, False
        _check_quotas(by=by, token_id=token_id, now=now)
        runs.exclude(status=ImpactRunStatus.RUNNING).delete()
        runs.filter(status=ImpactRunStatus.RUNNING).update(
            status=ImpactRunStatus.FAILED, error="lost with its process", finished_at=now
        )
        run = ImpactRun.objects.create(
            candidate=candidate,
            candidate_number=candidate.pk,
            live=live.label,
            events=limit,
            started_by=by,
            token_id=token_id,
            started_at=now,
            updated_at=now,
            waited_at=now,
        )
    return run, True


def _check_quotas(*, by: str, token_id: int | None, now: datetime) -> None:
    """Raise :class:`ImpactBusy` when a new run would pass a quota. Runs lost with their process
    do not count. Two starts of one login at once may both pass on SQLite's deferred reads; the
    quota is a bound on load, not an invariant, so that slack of one is accepted."""
    running = ImpactRun.objects.filter(status=ImpactRunStatus.RUNNING, updated_at__gte=now - LOST_AFTER)
    checks = [
        (settings.CONDUIT_IMPACT_JOBS_TOTAL, running, "impact previews are running on this site"),
        (settings.CONDUIT_IMPACT_JOBS_PER_LOGIN, running.filter(started_by=by), f"of {by!r} are running"),
    ]
    if token_id is not None:
        checks.append(
            (
                settings.CONDUIT_IMPACT_JOBS_PER_TOKEN,
                running.filter(token_id=token_id),
                "of this token are running",
            )
        )
    for quota, queryset, what in checks:
        if quota and queryset.count() >= quota:
            noun = "impact previews" if what.startswith("of") else ""
            raise ImpactBusy(
                f"{quota} {noun + ' ' if noun else ''}{what}, as many as allowed at once: wait for one to "
                "finish (or cancel one) and try again",
                retry_after=RETRY_AFTER_SECONDS,
            )


def impact_run_waited(run_id: int, *, clock: Clock) -> None:
    """Record that someone still waits for the run ``run_id`` (it polled it)."""
    ImpactRun.objects.filter(pk=run_id, status=ImpactRunStatus.RUNNING).update(waited_at=clock())


def impact_run_cancel(run_id: int, *, clock: Clock, by: str) -> bool:
    """Ask the run ``run_id`` to stop (``by`` names who asked): it stops at its next chunk.
    Whether it was running. A run is the candidate's, shared by whoever asked for it, as its
    page is shown to every reader, so any reader may cancel it; the run keeps who did."""
    now = clock()
    with transaction.atomic():
        return bool(
            ImpactRun.objects.filter(pk=run_id, status=ImpactRunStatus.RUNNING).update(
                status=ImpactRunStatus.CANCELLED, error=f"cancelled by {by}", updated_at=now, finished_at=now
            )
        )


class ProgressWriter:
    """Writes a run's progress (``traced`` of ``total``) on a database connection of its own,
    each write committed at once: the preview reads in one snapshot that it rolls back, so
    writes on its own connection would neither show nor last. At most every
    :data:`PROGRESS_SECONDS`, and always the last one; each write is a chunk's end, where the
    run stops (:class:`ImpactCancelled`) when it was cancelled or nobody waited for it for
    ``CONDUIT_IMPACT_ABANDON_SECONDS``."""

    def __init__(self, run_id: int, clock: Clock) -> None:
        self.run_id = run_id
        self.clock = clock
        self.connection = connections.create_connection(DEFAULT_DB_ALIAS)
        self.last = 0.0

    def __call__(self, done: int, total: int) -> None:
        if done < total and time.monotonic() - self.last < PROGRESS_SECONDS:
            return
        self.last = time.monotonic()
        now = self.clock()
        running = ImpactRun.objects.filter(pk=self.run_id, status=ImpactRunStatus.RUNNING)
        abandon = settings.CONDUIT_IMPACT_ABANDON_SECONDS
        if abandon:
            running = running.filter(waited_at__gte=now - timedelta(seconds=abandon))
        query = running.query.chain(UpdateQuery)
        query.add_update_values({"traced": done, "total": total, "updated_at": now})
        if not query.get_compiler(connection=self.connection).execute_sql(ROW_COUNT):
            # Cancelled, or its waiter is gone: nothing to write, stop tracing.
            raise ImpactCancelled(self.run_id)

    def close(self) -> None:
        self.connection.close()


def impact_run_execute(
    *, run_id: int, clock: Clock, progress: Callable[[int, int], None] | None = None
) -> ImpactRun:
    """Trace the run ``run_id`` (telling ``progress`` as it goes: a :class:`ProgressWriter` in
    the background), then store its changes and roll-up (status ``done``), or why it could not
    run (status ``failed``)."""
    run = ImpactRun.objects.select_related("candidate").get(pk=run_id)
    if run.candidate is None:
        return _fail(run_id, "the candidate was applied or discarded before its preview ran", clock)
    try:
        report = impact_preview(candidate=run.candidate, clock=clock, events=run.events, progress=progress)
    except ImpactInvalid as exc:
        return _fail(run_id, exc.message, clock)
    return _finish(run_id, report, clock)


def impact_run_launch(run_id: int, clock: Clock) -> threading.Thread:
    """Run :func:`impact_run_execute` in a thread of this process, started once the run's row
    is committed (at once outside a transaction); returns the thread."""
    thread = threading.Thread(
        target=_execute_in_thread, args=(run_id, clock), name=f"impact-run-{run_id}", daemon=True
    )
    transaction.on_commit(thread.start)
    return thread


def _execute_in_thread(run_id: int, clock: Clock) -> None:
    close_old_connections()
    progress = ProgressWriter(run_id, clock)
    try:
        impact_run_execute(run_id=run_id, clock=clock, progress=progress)
    except ImpactCancelled:
        _stopped(run_id, clock)
    except Exception:  # noqa: BLE001 - the thread's boundary: logged with the stack, the run marked failed
        logger.exception("impact.failed", extra={"run": run_id})
        _fail(run_id, "the preview failed: see the server's log", clock)
    finally:
        progress.close()
        connection.close()


def _fail(run_id: int, message: str, clock: Clock) -> ImpactRun:
    now = clock()
    with transaction.atomic():
        ImpactRun.objects.filter(pk=run_id).update(
            status=ImpactRunStatus.FAILED, error=message, updated_at=now, finished_at=now
        )
    return ImpactRun.objects.get(pk=run_id)


def _stopped(run_id: int, clock: Clock) -> None:
    """Mark a run that stopped between chunks cancelled (it may be already) and say why."""
    now = clock()
    with transaction.atomic():
        abandoned = ImpactRun.objects.filter(pk=run_id, status=ImpactRunStatus.RUNNING).update(
            status=ImpactRunStatus.CANCELLED,
            error="stopped: nobody waited for it any more",
            updated_at=now,
            finished_at=now,
        )
    logger.info("impact.stopped", extra={"run": run_id, "abandoned": bool(abandoned)})


def _stored(outcome: Outcome) -> dict[str, Any]:
    """One side of a change as stored: the trace without the Event it traced (the Event is
    the row's), or the refusal."""
    if outcome.result is None:
        assert outcome.refused is not None
        return {"refused": {"field": outcome.refused.field, "message": outcome.refused.message}}
    result = outcome.result.as_dict()
    del result["event"]
    result["work_id"] = result.pop("work")
    return {"result": result}


def _finish(run_id: int, report: ImpactReport, clock: Clock) -> ImpactRun:
    rows: list[ImpactRunChange] = []
    counts: Counter[tuple[str, str, str]] = Counter()
    for _, changes in report.groups:
        for change in changes:
            live, candidate = change.live.result, change.candidate.result
            route = (candidate.route if candidate else "") or (live.route if live else "")
            counts[(change.group, change.candidate.effect, route)] += 1
            rows.append(
                ImpactRunChange(
                    run_id=run_id,
                    position=len(rows),
                    seq=change.seq,
                    type=change.type,
                    scope=change.scope,
                    group=change.group,
                    route=route,
                    live=_stored(change.live),
                    candidate=_stored(change.candidate),
                )
            )
    rollup = [
        RollupGroup(group=group, effect=effect, route=route, count=count).as_dict()
        for (group, effect, route), count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    ]
    now = clock()
    with transaction.atomic():
        # A run cancelled after its last chunk stays cancelled, its changes not stored.
        finished = ImpactRun.objects.filter(pk=run_id, status=ImpactRunStatus.RUNNING).update(
            status=ImpactRunStatus.DONE,
            examined=report.examined,
            changed=report.changed,
            first_seq=report.first_seq,
            last_seq=report.last_seq,
            compared=report.traced,
            rollup=rollup,
            seconds=report.seconds,
            updated_at=now,
            finished_at=now,
        )
        if finished:
            ImpactRunChange.objects.bulk_create(rows, batch_size=500)
    logger.info("impact.done", extra={"run": run_id, "changed": report.changed, "seconds": report.seconds})
    return ImpactRun.objects.get(pk=run_id)


# --- reads ----------------------------------------------------------------------------------------


def impact_run_get(run_id: int) -> ImpactRun:
    """The run ``run_id`` (``ImpactRun.DoesNotExist`` when there is none)."""
    return ImpactRun.objects.select_related("candidate").get(pk=run_id)


def impact_run_latest(candidate_id: int) -> ImpactRun | None:
    """The latest run of the candidate ``candidate_id``, if any. One query."""
    return (
        ImpactRun.objects.select_related("candidate")
        .filter(candidate_id=candidate_id)
        .order_by("-id")
        .first()
    )


def impact_runs_recent(limit: int = 5) -> list[ImpactRun]:
    """The latest ``limit`` runs, newest first (the Configuration page links them: after Apply,
    the candidate's groups are replayed from its run). One query."""
    return list(ImpactRun.objects.order_by("-id").defer("rollup")[:limit])


def impact_run_lost(run: ImpactRun, *, now: datetime) -> bool:
    """Whether ``run`` still says running but has not written its progress for
    :data:`LOST_AFTER` (its process stopped)."""
    return run.status == ImpactRunStatus.RUNNING and now - run.updated_at > LOST_AFTER


def impact_run_rollup(run: ImpactRun) -> list[RollupGroup]:
    """The run's roll-up, largest group first."""
    return [RollupGroup(**item) for item in run.rollup]


def impact_run_summary(run: ImpactRun) -> str:
    """What the candidate would do, by effect, largest first: "start 212 Work, drop 40"."""
    by_effect: Counter[str] = Counter()
    for item in run.rollup:
        by_effect[item["effect"]] += item["count"]
    return ", ".join(
        EFFECT_PHRASES.get(effect, effect + " {n}").format(n=f"{count:,}")
        for effect, count in sorted(by_effect.items(), key=lambda item: (-item[1], item[0]))
    )


def impact_run_pages(run: ImpactRun) -> int:
    """How many pages the run's changed Events fill (at least 1)."""
    return max(1, -(-run.changed // PAGE_SIZE))


def impact_run_page(run: ImpactRun, page: int) -> list[ImpactRunChange]:
    """The changed Events of page ``page`` (from 1), in the run's order. One query, by the
    (run, position) index, whatever the page."""
    start = (page - 1) * PAGE_SIZE
    return list(ImpactRunChange.objects.filter(run=run, position__gte=start, position__lt=start + PAGE_SIZE))


def impact_run_seqs(run_id: int, *, group: str, route: str) -> list[int]:
    """The Events of the run's roll-up group (``group`` and ``route``), in the run's order. One
    query."""
    return list(
        ImpactRunChange.objects.filter(run_id=run_id, group=group, route=route)
        .order_by("position")
        .values_list("seq", flat=True)
    )


def impact_run_report(run: ImpactRun) -> dict[str, Any]:
    """A finished run as the inline preview answers (:meth:`ImpactReport.as_dict`): its counts
    and its changed Events grouped in the order groups were first met, each with both traces
    (``work`` named ``work_id`` as stored). One query."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for change in ImpactRunChange.objects.filter(run=run).order_by("position"):
        groups.setdefault(change.group, []).append(
            {
                "seq": change.seq,
                "type": change.type,
                "scope": change.scope,
                "group": change.group,
                "live": _outcome_json(change.live),
                "candidate": _outcome_json(change.candidate),
            }
        )
    return {
        "live": run.live,
        "candidate": run.candidate_number,
        "examined": run.examined,
        "traced": run.compared,
        "first_seq": run.first_seq,
        "last_seq": run.last_seq,
        "changed": run.changed,
        "seconds": round(run.seconds, 3),
        "groups": [
            {"group": group, "count": len(items), "changes": items} for group, items in groups.items()
        ],
    }


def _outcome_json(stored: dict[str, Any]) -> dict[str, Any]:
    """One side of a stored change as the preview answers it: the trace, or the refusal."""
    if "refused" in stored:
        return {"effect": "refused", "error": "invalid_trace", **stored["refused"]}
    return dict(stored["result"])
