"""Doctor: the health checks an operator runs (R23).

Each check is a plain function of the database and ``now`` returning a :class:`Check`;
:func:`doctor` runs them all with the injected clock. ``manage.py doctor``, ``GET
/api/doctor`` and the console's Doctor page all call :func:`doctor`: one code path.

- ``routing``: Events still unrouted ten minutes after acceptance, each with its failure
  count, last error code, next retry and the earlier Event it waits behind (R23); and, however
  young, Events whose route keeps failing (twice or more in a row).
- ``route_loop``: no route loop heartbeat newer than 60 seconds while Events are unrouted
  (which loops, and how old their last heartbeats are); or a live loop whose passes keep
  failing (the error, how many in a row, and the Events of the window it was routing).
- ``handler_calls``: handler calls a live route loop abandoned at their deadline and whose
  threads have not returned (a handler that never returns).
- ``causal``: roots whose derived Events the causal limits refused in the last hour.
- ``work_loop``: no work_loop heartbeat newer than 60 seconds while Work is ready to run
  (pending input or a due retry), naming how many; the live work_loops otherwise.
- ``parked_work``: Work parked after too many failures in a row, waiting for an operator to
  retry or cancel it (id, scope, failures, last error).
- ``supervision``: children ``manage.py serve`` restarted in the last 15 minutes (which host
  and child, its exit status, how many restarts).
- ``live_updates``: web processes whose reader of the live-update outbox has not sent a change
  committed more than 15 seconds ago (open pages are that far behind).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Max, Q

from causal.clock import Clock
from causal.models import KV, Event, RouteState
from causal.selectors import roots_refused_since
from conduit_site.live import BEHIND, readers_behind
from conduit_site.supervision.restarts import RESTARTS_NAMESPACE, RESTARTS_RECENT, restarts_recent
from infra.times import timestamp
from infra.words import counted
from routing.engine import heartbeat as route_heartbeat
from routing.engine.failures import failures_keep_failing, failures_read
from routing.engine.heartbeat import RouteLoopHeartbeat, route_loop_heartbeats
from worklife import heartbeat as work_heartbeat
from worklife.heartbeat import WorkLoopHeartbeat, running, work_loop_heartbeats
from worklife.pauses import active_pauses, pause_line
from worklife.selectors import work_parked, work_runnable

UNROUTED_AFTER = timedelta(minutes=10)
# An Event whose route failed this many times in a row is named at once, however young.
KEEPS_FAILING = 2
HEARTBEAT_STALE = timedelta(seconds=60)
REFUSALS_SINCE = timedelta(hours=1)
# Findings listed per check (the summary still counts them all).
MAX_LISTED = 50
STALE_LOOPS_LISTED = 10

OK = "ok"
WARN = "warn"


@dataclass(frozen=True, slots=True)
class StuckEvent:
    """An Event still unrouted after :data:`UNROUTED_AFTER`."""

    seq: int
    type: str
    scope: str
    accepted_at: datetime
    age_seconds: float
    failures: int
    last_code: str
    last_error: str
    retry_at: datetime | None
    waiting_on: int | None
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "type": self.type,
            "scope": self.scope,
            "accepted_at": timestamp(self.accepted_at),
            "age_seconds": round(self.age_seconds, 3),
            "failures": self.failures,
            "last_code": self.last_code,
            "last_error": self.last_error,
            "retry_at": timestamp(self.retry_at),
            "waiting_on": self.waiting_on,
            "reason": self.reason,
        }

    @property
    def age(self) -> str:
        """How long it has been unrouted, in words."""
        return duration(self.age_seconds)

    @property
    def text(self) -> str:
        """One line for the CLI."""
        parts = [f"#{self.seq} {self.type} in {self.scope}, unrouted for {self.age}"]
        if self.failures:
            keeps = " (keeps failing)" if self.failures >= KEEPS_FAILING else ""
            parts.append(
                f"{self.failures} failure{'s' if self.failures != 1 else ''}, last {self.last_code}{keeps}"
            )
        if self.retry_at is not None:
            parts.append(f"next retry {timestamp(self.retry_at)}")
        if self.waiting_on is not None:
            parts.append(f"waits behind #{self.waiting_on}")
        if self.reason and not self.failures:
            parts.append(self.reason)
        return "; ".join(parts)


def beat_counters(stored: dict[str, Any]) -> dict[str, Any]:
    """What a loop's beat stores beside its time, in the order it stores it."""
    return {name: value for name, value in stored.items() if name != "at"}


@dataclass(frozen=True, slots=True)
class LoopBeat(RouteLoopHeartbeat):
    """A route loop's last heartbeat, with its age."""

    age_seconds: float | None = None

    @classmethod
    def of(cls, beat: RouteLoopHeartbeat, *, now: datetime) -> LoopBeat:
        return cls(**_fields_of(beat), age_seconds=(now - beat.at).total_seconds())

    def as_dict(self) -> dict[str, Any]:
        return {
            "loop": self.loop,
            "at": timestamp(self.at),
            "age_seconds": None if self.age_seconds is None else round(self.age_seconds, 3),
            **beat_counters(self.value()),
        }

    @property
    def age(self) -> str:
        """How old the heartbeat is, in words."""
        return duration(self.age_seconds)

    @property
    def text(self) -> str:
        """One line for the CLI."""
        age = "never" if self.age_seconds is None else f"{self.age} ago"
        line = f"{self.loop}: last heartbeat {age} (generation {self.generation or '-'}, {counted(self.passes, 'pass,passes')}{', stopped' if self.stopped else ''})"
        if self.abandoned_calls:
            line += (
                f", {self.abandoned_calls} abandoned handler call{'s' if self.abandoned_calls != 1 else ''}"
            )
        if self.failing:
            line += f"; {self.failing_text}"
        return line

    @property
    def failing_text(self) -> str:
        """What keeps failing, naming the Events of the window (empty when passes succeed)."""
        if not self.failing:
            return ""
        count = int(self.failing.get("count", 0))
        events = ", ".join(f"#{seq}" for seq in self.failing.get("events") or ())
        window = f"; its window held Events {events}" if events else ""
        return (
            f"{self.loop}: {count} pass{'es' if count != 1 else ''} in a row failed since "
            f"{self.failing.get('since', '-')}: {self.failing.get('error', '')}{window}"
        )


@dataclass(frozen=True, slots=True)
class RefusedRoot:
    """A root whose derived Events the causal limits refused recently."""

    root_seq: int | None
    refusals: int
    kinds: dict[str, int]
    last_at: datetime

    def as_dict(self) -> dict[str, Any]:
        return {
            "root_seq": self.root_seq,
            "refusals": self.refusals,
            "kinds": dict(self.kinds),
            "last_at": timestamp(self.last_at),
        }

    @property
    def text(self) -> str:
        """One line for the CLI."""
        root = f"root #{self.root_seq}" if self.root_seq is not None else "no root (missing parent)"
        kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(self.kinds.items()))
        return f"{root}: {self.refusals} refused ({kinds}), last {timestamp(self.last_at)}"


@dataclass(frozen=True, slots=True)
class WorkLoopBeat(WorkLoopHeartbeat):
    """A work_loop's last heartbeat, with its age: its slots, the attempts it runs and its
    counters."""

    age_seconds: float = 0.0

    @classmethod
    def of(cls, beat: WorkLoopHeartbeat, *, now: datetime) -> WorkLoopBeat:
        return cls(**_fields_of(beat), age_seconds=(now - beat.at).total_seconds())

    def as_dict(self) -> dict[str, Any]:
        return {
            "loop": self.loop,
            "at": timestamp(self.at),
            "age_seconds": round(self.age_seconds, 3),
            **beat_counters(self.value()),
        }

    @property
    def age(self) -> str:
        """How old the heartbeat is, in words."""
        return duration(self.age_seconds)

    @property
    def alive(self) -> bool:
        """A heartbeat newer than :data:`HEARTBEAT_STALE` from a loop that did not stop."""
        return not self.stopped and self.age_seconds <= HEARTBEAT_STALE.total_seconds()

    @property
    def text(self) -> str:
        """One line for the CLI."""
        stopped = ", stopped" if self.stopped else ""
        return (
            f"{self.loop}: last heartbeat {self.age} ago{stopped} (running {self.running} of {self.slots} "
            f"slots; {self.started} started, {self.completed} completed, {self.failed} failed, "
            f"{self.refused} refused, {self.lost} lost)"
            + (f"; isolation: {self.isolation}" if self.isolation else "")
        )


@dataclass(frozen=True, slots=True)
class ParkedWork:
    """A Work parked after too many failures in a row."""

    work_id: int
    scope: str
    failures: int
    last_error: str
    parked_at: datetime | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "work_id": self.work_id,
            "scope": self.scope,
            "failures": self.failures,
            "last_error": self.last_error,
            "parked_at": timestamp(self.parked_at),
        }

    @property
    def text(self) -> str:
        """One line for the CLI."""
        return (
            f"Work {self.work_id} in {self.scope}: parked after {self.failures} "
            f"failure{'s' if self.failures != 1 else ''} ({self.last_error or 'no error recorded'})"
        )


@dataclass(frozen=True, slots=True)
class PausedTarget:
    """A pause in force: what it holds, and who paused it, when, why and until when."""

    kind: str
    scope: str
    name: str
    line: str
    until: datetime | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "scope": self.scope,
            "name": self.name,
            "line": self.line,
            "until": timestamp(self.until),
        }

    @property
    def text(self) -> str:
        """One line for the CLI."""
        what = f"scope {self.scope}" if self.kind == "scope" else f"{self.kind} {self.name!r} in {self.scope}"
        return f"{what}: {self.line}"


# What people call each check; its name stays the code the JSON, the API and the CLI use.
CHECK_LABELS = {
    "routing": "Unrouted Events",
    "route_loop": "Route loops",
    "handler_calls": "Abandoned handler calls",
    "causal": "Causal limits",
    "work_loop": "Work loops",
    "parked_work": "Parked Work",
    "supervision": "Restarted processes",
    "live_updates": "Live updates",
    "pauses": "Pauses",
}


@dataclass(frozen=True, slots=True)
class Check:
    """One check's verdict: ``ok`` or a warning, a one-line summary and the findings
    (at most :data:`MAX_LISTED`; ``total`` counts them all)."""

    name: str
    status: str
    summary: str
    items: tuple[Any, ...] = ()
    total: int = 0

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def label(self) -> str:
        """The check's name in words ("Parked Work" for ``parked_work``)."""
        return CHECK_LABELS.get(self.name, self.name.replace("_", " ").capitalize())

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ok": self.ok,
            "status": self.status,
            "summary": self.summary,
            "total": self.total,
            "items": [item.as_dict() for item in self.items],
        }


@dataclass(frozen=True, slots=True)
class DoctorReport:
    """Every check, run at ``at``."""

    at: datetime
    checks: tuple[Check, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    @property
    def warnings(self) -> list[Check]:
        return [check for check in self.checks if not check.ok]

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "at": timestamp(self.at), "checks": [check.as_dict() for check in self.checks]}


# --- the checks ---------------------------------------------------------------------------------


def check_unrouted(*, now: datetime, limit: int = MAX_LISTED) -> Check:
    """Events accepted more than ten minutes before ``now`` and still unrouted, oldest first,
    with their failure counts, last error code, next retry and what they wait behind (R23).
    Three queries."""
    cutoff = now - UNROUTED_AFTER
    keeps_failing = failures_keep_failing(KEEPS_FAILING)
    # "Not accepted since the cutoff" rather than "accepted before it": SQLite would otherwise
    # answer the OR from two indexes, walking the accepted_at index over all history, instead
    # of the few unrouted Events (the partial unrouted index).
    stuck = Event.objects.filter(route_state=RouteState.UNROUTED).filter(
        ~Q(accepted_at__gte=cutoff) | Q(seq__in=keeps_failing)
    )
    total = stuck.count()
    if not total:
        return Check(
            "routing", OK, f"no Event is unrouted {duration(UNROUTED_AFTER.total_seconds())} after acceptance"
        )
    rows = list(
        stuck.order_by("seq").values_list(
            "seq", "type", "scope", "accepted_at", "retry_at", "waiting_on_id", "unrouted_reason"
        )[:limit]
    )
    failures = failures_read(row[0] for row in rows)
    items = []
    for seq, type_, scope, accepted_at, retry_at, waiting_on, reason in rows:
        failure = failures.get(seq)
        items.append(
            StuckEvent(
                seq=seq,
                type=type_,
                scope=scope,
                accepted_at=accepted_at,
                age_seconds=(now - accepted_at).total_seconds(),
                failures=failure.count if failure else 0,
                last_code=failure.code if failure else "",
                last_error=first_line(failure.error) if failure else "",
                retry_at=retry_at,
                waiting_on=waiting_on,
                reason=reason,
            )
        )
    failing = sum(1 for item in items if item.failures)
    young = any(item.age_seconds <= UNROUTED_AFTER.total_seconds() for item in items)
    summary = (
        f"{total} Event{'s are' if total != 1 else ' is'} still unrouted "
        f"{duration(UNROUTED_AFTER.total_seconds())} after acceptance"
        + (" or keep failing" if young else "")
        + f" (oldest #{items[0].seq}, {duration(items[0].age_seconds)}"
        + (f"; {failing} with route failures" if failing else "")
        + ")"
    )
    return Check("routing", WARN, summary, tuple(items), total)


def loop_beats(*, now: datetime, limit: int = STALE_LOOPS_LISTED, fresh_only: bool = False) -> list[LoopBeat]:
    """The route loops' last heartbeats, newest first (only those newer than
    :data:`HEARTBEAT_STALE` with ``fresh_only``). One query."""
    since = now - HEARTBEAT_STALE if fresh_only else None
    return [LoopBeat.of(beat, now=now) for beat in route_loop_heartbeats(since=since, limit=limit)]


def check_route_loop(*, now: datetime) -> Check:
    """Warn when no route loop has a heartbeat newer than :data:`HEARTBEAT_STALE` while
    Events are unrouted, naming the loops and how old their last heartbeats are. A loop whose
    last beat says it stopped (a ``--once`` pass that exited) is not alive."""
    unrouted = Event.objects.filter(route_state=RouteState.UNROUTED).count()
    beats = loop_beats(now=now)
    fresh = [
        beat
        for beat in beats
        if not beat.stopped
        and beat.age_seconds is not None
        and beat.age_seconds <= HEARTBEAT_STALE.total_seconds()
    ]
    failing = [beat for beat in fresh if beat.failing]
    if failing:
        names = "; ".join(beat.failing_text for beat in failing)
        return Check(
            "route_loop", WARN, f"route loop passes keep failing: {names}", tuple(failing), len(failing)
        )
    if fresh:
        names = ", ".join(f"{beat.loop} ({duration(beat.age_seconds)} ago)" for beat in fresh)
        return Check(
            "route_loop",
            OK,
            f"{len(fresh)} route loop{'s' if len(fresh) != 1 else ''} alive: {names}",
            tuple(fresh),
            len(fresh),
        )
    if not unrouted:
        last = f"; last heartbeat {duration(beats[0].age_seconds)} ago from {beats[0].loop}" if beats else ""
        return Check(
            "route_loop", OK, f"no Event is waiting for a route loop{last}", tuple(beats), len(beats)
        )
    limit = duration(HEARTBEAT_STALE.total_seconds())
    waiting = f"{unrouted} Event{'s are' if unrouted != 1 else ' is'} unrouted"
    if not beats:
        summary = (
            f"no route loop has ever recorded a heartbeat and {waiting}: is `manage.py route_loop` running?"
        )
    else:
        names = ", ".join(
            f"{beat.loop} ({duration(beat.age_seconds)} ago{', stopped' if beat.stopped else ''})"
            for beat in beats
        )
        summary = f"no live route loop heartbeat newer than {limit} while {waiting}; last heartbeats: {names}"
    return Check("route_loop", WARN, summary, tuple(beats), len(beats))


def check_handler_calls(*, now: datetime) -> Check:
    """Warn when a live route loop has abandoned handler calls (a handler that did not return
    before its deadline and whose thread still runs)."""
    live = loop_beats(now=now, fresh_only=True, limit=100)
    stuck = [beat for beat in live if beat.abandoned_calls > 0]
    if not stuck:
        return Check("handler_calls", OK, "no live route loop has abandoned handler calls", (), 0)
    calls = sum(beat.abandoned_calls for beat in stuck)
    names = ", ".join(f"{beat.loop} ({beat.abandoned_calls})" for beat in stuck)
    summary = (
        f"{calls} handler call{'s' if calls != 1 else ''} abandoned at the deadline and still running "
        f"(a handler that never returns): {names}"
    )
    return Check("handler_calls", WARN, summary, tuple(stuck), len(stuck))


def check_causal(*, now: datetime, limit: int = MAX_LISTED) -> Check:
    """Warn about roots whose derived Events the causal limits refused in the last hour."""
    since = now - REFUSALS_SINCE
    roots = roots_refused_since(since)
    if not roots:
        return Check("causal", OK, "the causal limits refused no derived Event in the last hour")
    refusals = sum(root["refusals"] for root in roots)
    items = tuple(
        RefusedRoot(
            root_seq=r["root_seq"], refusals=r["refusals"], kinds=dict(r["kinds"]), last_at=r["last_at"]
        )
        for r in roots[:limit]
    )
    summary = (
        f"the causal limits refused {refusals} derived Event{'s' if refusals != 1 else ''} under "
        f"{len(roots)} root{'s' if len(roots) != 1 else ''} in the last hour"
    )
    return Check("causal", WARN, summary, items, len(roots))


def check_work_loop(*, now: datetime, limit: int = STALE_LOOPS_LISTED) -> Check:
    """Warn when no work_loop has a heartbeat newer than :data:`HEARTBEAT_STALE` (from a loop
    that did not stop) while Work is ready to run, naming how many and the loops' last
    heartbeats; otherwise list the live work_loops. Two queries."""
    runnable = work_runnable(now=now).count()
    beats = [WorkLoopBeat.of(beat, now=now) for beat in work_loop_heartbeats(limit=limit)]
    alive = [beat for beat in beats if beat.alive]
    if alive:
        names = ", ".join(
            f"{beat.loop} ({beat.age} ago, running {beat.running} of {beat.slots})" for beat in alive
        )
        return Check(
            "work_loop",
            OK,
            f"{len(alive)} work loop{'s' if len(alive) != 1 else ''} alive: {names}",
            tuple(alive),
            len(alive),
        )
    if not runnable:
        last = f"; last heartbeat {beats[0].age} ago from {beats[0].loop}" if beats else ""
        return Check("work_loop", OK, f"no Work is waiting for a work loop{last}", tuple(beats), len(beats))
    waiting = (
        f"{runnable} Work {'are' if runnable != 1 else 'is'} ready to run (pending input or a due retry)"
    )
    if not beats:
        summary = (
            f"no work loop has ever recorded a heartbeat and {waiting}: is `manage.py work_loop` running?"
        )
    else:
        names = ", ".join(
            f"{beat.loop} ({beat.age} ago{', stopped' if beat.stopped else ''})" for beat in beats
        )
        summary = (
            f"no work loop heartbeat newer than {duration(HEARTBEAT_STALE.total_seconds())} while "
            f"{waiting}; last heartbeats: {names}"
        )
    return Check("work_loop", WARN, summary, tuple(beats), len(beats))


def check_parked_work(*, now: datetime, limit: int = MAX_LISTED) -> Check:
    """Warn about Work parked after too many failures in a row (an operator retries or
    cancels it), longest parked first, with each one's failures and last error. One query
    when none is parked, two otherwise."""
    parked = work_parked()
    total = parked.count()
    if not total:
        return Check("parked_work", OK, "no Work is parked")
    rows = parked.values_list("pk", "scope", "failures", "last_error", "parked_at")[:limit]
    items = tuple(
        ParkedWork(work_id=pk, scope=scope, failures=failures, last_error=last_error, parked_at=parked_at)
        for pk, scope, failures, last_error, parked_at in rows
    )
    oldest = items[0]
    since = f", {duration((now - oldest.parked_at).total_seconds())} ago" if oldest.parked_at else ""
    summary = (
        f"{total} Work {'are' if total != 1 else 'is'} parked after too many failures in a row, "
        f"waiting for an operator to retry or cancel {'them' if total != 1 else 'it'} "
        f"(longest parked: Work {oldest.work_id}{since})"
    )
    return Check("parked_work", WARN, summary, items, total)


def check_supervision(*, now: datetime) -> Check:
    """Warn about the children ``manage.py serve`` restarted in the last
    :data:`~conduit_site.supervision.RESTARTS_RECENT` (the latest first). One query."""
    restarts = restarts_recent(now=now)
    within = duration(RESTARTS_RECENT.total_seconds())
    if not restarts:
        return Check("supervision", OK, f"serve restarted no process in the last {within}")
    names = ", ".join(
        f"{item.child} on {item.host} ({item.restarts} restart{'s' if item.restarts != 1 else ''}, "
        f"last exit {item.status_text})"
        for item in restarts
    )
    summary = f"serve restarted {len(restarts)} process{'es' if len(restarts) != 1 else ''} in the last {within}: {names}"
    return Check("supervision", WARN, summary, tuple(restarts), len(restarts))


@dataclass(frozen=True, slots=True)
class LiveBehind:
    """A web process whose open pages are behind: its reader has not sent a change committed
    ``waited_seconds`` ago."""

    process: str
    position: int
    waited_seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "process": self.process,
            "position": self.position,
            "waited_seconds": round(self.waited_seconds, 1),
        }

    @property
    def text(self) -> str:
        """One line for the CLI."""
        return (
            f"{self.process}: the oldest change its pages have not been sent was committed "
            f"{duration(self.waited_seconds)} ago (read up to position {self.position})"
        )


def check_live_updates(*, now: datetime) -> Check:
    """Warn about web processes whose live updates are behind: a reader with a fresh heartbeat
    that has not sent a change committed more than :data:`~conduit_site.live.BEHIND`
    ago. One query, and one a fresh reader."""
    behind = [
        LiveBehind(process=beat.process, position=beat.position, waited_seconds=waited)
        for beat, waited in readers_behind(now=now, fresh=HEARTBEAT_STALE)
    ]
    if not behind:
        return Check(
            "live_updates",
            OK,
            f"every web process sends open pages what changed within {duration(BEHIND.total_seconds())}",
        )
    worst = max(item.waited_seconds for item in behind)
    summary = (
        f"live updates are behind in {counted(len(behind), 'web process,web processes')}: open pages "
        f"miss changes committed up to {duration(worst)} ago (they show them when reloaded)"
    )
    return Check("live_updates", WARN, summary, tuple(behind), len(behind))


def check_pauses(*, now: datetime) -> Check:
    """Warn while an operator's pause is in force (a scope, a binding, a route or a schedule
    holds what it would run), oldest first, with who, why and until. One query."""
    pauses = active_pauses(now)
    if not pauses:
        return Check("pauses", OK, "nothing is paused")
    items = tuple(PausedTarget(p.kind, p.scope, p.name, pause_line(p), p.until) for p in pauses[:MAX_LISTED])
    summary = (
        f"{len(pauses)} pause{'s' if len(pauses) != 1 else ''} in force: what {'they hold' if len(pauses) != 1 else 'it holds'} "
        "queues and starts nothing until resumed (manage.py resume)"
    )
    return Check("pauses", WARN, summary, items, len(pauses))


def doctor(*, clock: Clock) -> DoctorReport:
    """Run every check at the clock's now."""
    now = clock()
    return DoctorReport(
        at=now,
        checks=(
            check_unrouted(now=now),
            check_route_loop(now=now),
            check_handler_calls(now=now),
            check_causal(now=now),
            check_work_loop(now=now),
            check_parked_work(now=now),
            check_supervision(now=now),
            check_live_updates(now=now),
            check_pauses(now=now),
        ),
    )


# --- text helpers -------------------------------------------------------------------------------


def duration(seconds: float | None) -> str:
    """A short human duration: ``45 s``, ``12 min``, ``3 h 5 min``, ``2 d 4 h``."""
    if seconds is None:
        return "-"
    seconds = max(int(seconds), 0)
    if seconds < 120:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 120:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def _fields_of(beat: RouteLoopHeartbeat | WorkLoopHeartbeat) -> dict[str, Any]:
    return {f.name: getattr(beat, f.name) for f in fields(beat)}


def first_line(text: str, limit: int = 300) -> str:
    """The first non-empty line of ``text``, cut to ``limit`` characters."""
    for line in text.splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


# --- the console's banner ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoopsAlive:
    """Whether a route loop and a work loop each have a heartbeat newer than
    :data:`HEARTBEAT_STALE` (a stopped work loop's last one does not count)."""

    route_loop: bool
    work_loop: bool
    # Children serve restarted within RESTARTS_RECENT (on any host).
    restarted: int = 0

    @property
    def ok(self) -> bool:
        return self.route_loop and self.work_loop

    @property
    def missing(self) -> list[str]:
        """The loops without a fresh heartbeat, by name."""
        return [
            name
            for name, alive in (("route loop", self.route_loop), ("work loop", self.work_loop))
            if not alive
        ]


def loops_alive(*, now: datetime) -> LoopsAlive:
    """Whether the route and work loops have fresh heartbeats, and how many children serve
    restarted lately: one aggregate query on the heartbeat rows newer than
    :data:`HEARTBEAT_STALE` and the recent restarts (cheap enough for every console page)."""
    since = now - HEARTBEAT_STALE
    route, work = route_heartbeat.beating_since(since), work_heartbeat.beating_since(since)
    restarted = Q(namespace=RESTARTS_NAMESPACE, updated_at__gte=now - RESTARTS_RECENT)
    counts = KV.objects.filter(route | work | restarted).aggregate(
        route=Count("pk", filter=route),
        work=Count("pk", filter=work),
        restarted=Count("pk", filter=restarted),
    )
    return LoopsAlive(
        route_loop=counts["route"] > 0, work_loop=counts["work"] > 0, restarted=counts["restarted"]
    )


@dataclass(frozen=True, slots=True)
class LoopHeartbeats:
    """A kind of loop's heartbeats: how old the newest one is (``None``: none was ever
    written) and how many loops have one newer than :data:`HEARTBEAT_STALE`."""

    age_seconds: float | None
    alive: int


def loop_heartbeats(*, now: datetime) -> dict[str, LoopHeartbeats]:
    """``route_loop`` and ``work_loop``: their heartbeats as :func:`loops_alive` reads them (a
    stopped loop's last one does not count), in one aggregate query (``/metrics``)."""
    route_namespace = route_heartbeat.HEARTBEATS_NAMESPACE
    work_namespace = work_heartbeat.HEARTBEATS_NAMESPACE
    route = Q(namespace=route_namespace) & running()
    work = Q(namespace=work_namespace) & running()
    fresh = Q(updated_at__gte=now - HEARTBEAT_STALE)
    found = KV.objects.filter(namespace__in=(route_namespace, work_namespace)).aggregate(
        route_last=Max("updated_at", filter=route),
        work_last=Max("updated_at", filter=work),
        route_alive=Count("pk", filter=route & fresh),
        work_alive=Count("pk", filter=work & fresh),
    )
    return {
        f"{kind}_loop": LoopHeartbeats(
            age_seconds=None if last is None else max((now - last).total_seconds(), 0.0),
            alive=found[f"{kind}_alive"],
        )
        for kind in ("route", "work")
        for last in (found[f"{kind}_last"],)
    }
