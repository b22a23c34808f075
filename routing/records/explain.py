"""Why an Event went where it went, in words: one sentence built from its RouteRecord (or, while
it is unrouted, from what it waits for), naming the Work and its state.

A pure function of rows already read (the Event with ``route_record`` and its Work joined): the
Event page, ``events get`` and the tests read the same sentence. A moment in it is kept apart
(``Why.at``) so the console can show it as its other timestamps and text can print it in UTC.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from causal.models import Event, RouteState
from routing.engine import reasons
from routing.models import CONTROL_POLICY, Disposition, RouteRecord
from worklife.models import WorkStatus


class Effect:
    """decide.py's effects, as RouteRecord.policy stores them (that module is not imported:
    reading an Event loads no router; a test keeps the two the same)."""

    START, QUEUE, INJECT, INTERRUPT, HELD, DROP, WAKE, UNMATCHED = (
        "start",
        "queue",
        "inject",
        "interrupt",
        "held",
        "drop",
        "wake",
        "unmatched",
    )


class Reason:
    """decide.py's reason codes (as ``Effect``)."""

    TERMINAL, ADDRESSED, CONTEXT, NO_WORK = "terminal", "addressed", "context", "no_work"


# Where ``Why.text`` puts its moment.
AT = "{at}"
# How text (not the console) shows the moment: the console's own format.
TEXT_FORMAT = "%Y-%m-%d %H:%M:%S UTC"

# The prefixes decide.py gives a fallback's, a held and a woken decision's reason.
_FALLBACK_QUEUE, _FALLBACK_DROP, _HELD, _WINS_WAIT = (
    reasons.FALLBACK_QUEUE,
    reasons.FALLBACK_DROP,
    reasons.HELD,
    reasons.WINS_WAIT,
)

_RATE_LIMITED = reasons.RATE_LIMITED

_ENDED = {WorkStatus.COMPLETED: "had already completed", WorkStatus.CANCELLED: "had already been cancelled"}


@dataclass(frozen=True, slots=True)
class Why:
    """A sentence; ``text`` holds ``{at}`` where the moment ``at`` goes, when there is one."""

    text: str
    at: datetime | None = None

    def __str__(self) -> str:
        moment = self.at.astimezone(UTC).strftime(TEXT_FORMAT) if self.at else ""
        return self.text.replace(AT, moment)


def route_why(event: Event, record: RouteRecord | None) -> Why:
    """Why ``event`` was routed as ``record`` says, or why it is not routed yet (``record`` is
    ``None``), naming its Work and that Work's state."""
    if record is None or event.route_state == RouteState.UNROUTED:
        return _unrouted(event)
    if record.disposition == Disposition.SKIPPED:
        return Why(f"{record.decided_by or 'An operator'} skipped it before it was routed: nothing took it.")
    if record.disposition == Disposition.FAILED:
        route = f" on route {record.route}" if record.route else ""
        return Why(
            f"Routing it failed{route} ({record.reason or 'an error'}) {_times(record.attempts)} and was given "
            "up on: nothing took it (reroute it to try again)."
        )
    if record.policy == CONTROL_POLICY:
        data = event.data if isinstance(event.data, dict) else {}
        because = f": \u201c{data['reason']}\u201d" if data.get("reason") else ""
        target = f" on {_work(record)}" if record.work_id else ""
        return Why(
            f"{record.decided_by or 'An operator'} used the control {record.reason}{target}{because}. A control "
            "Event records what an operator did: it routes nowhere."
        )
    return _routed(record)


def _routed(record: RouteRecord) -> Why:
    policy, reason = record.policy, record.reason
    work = _work(record)
    route = f"route {record.route}" if record.route else "no route"
    if policy == Effect.START:
        return Why(f"It started {work} through {route} (binding {record.binding}).")
    if policy == Effect.QUEUE:
        if reason == Reason.CONTEXT:
            return Why(
                f"{work} was waiting, so it was kept as context: the wait, not this input, decides when it runs."
            )
        if reason == Reason.ADDRESSED:
            return Why(f"An operator's input addressed to {work}: queued for its next attempt.")
        if reason.startswith(_FALLBACK_QUEUE):
            why = reason.removeprefix(_FALLBACK_QUEUE)
            return Why(
                f"{work}'s running attempt could not take it ({why}), so it was queued for the next "
                f"attempt (fallback: queue)."
            )
        return Why(f"Queued as input of {work} through {route}: its next attempt takes it.")
    if policy == Effect.INJECT:
        return Why(f"Given to {work}'s running attempt while it runs, through {route} (policy: inject).")
    if policy == Effect.INTERRUPT:
        return Why(f"It interrupted {work}'s running attempt, through {route} (policy: interrupt).")
    if policy == Effect.HELD:
        why = reason.removeprefix(_HELD)
        return Why(
            f"Held for {work}: its running attempt cannot take it yet ({why}), so it waits for that "
            "attempt to end."
        )
    if policy == Effect.WAKE:
        wait = reason.removeprefix(_WINS_WAIT)
        return Why(f"{work} was waiting for it: it won the wait {wait} and woke the Work.")
    if policy == Effect.DROP:
        return _dropped(record, work, route)
    if policy == Effect.UNMATCHED:
        if reason == Reason.NO_WORK:
            keys = ", ".join(record.keys) or "its keys"
            return Why(
                f"Route {record.route} matched, but it starts no Work and no Work holds {keys}, so this "
                "input was dropped (start: false)."
            )
        also = f" and it was not addressed to {work}" if record.work_id else ""
        return Why(f"No route matched{also}, so nothing took it: each route's refusal is listed.")
    if reason:
        return Why(f"{policy}: {reason}.")
    return Why(f"{policy}.")


def _dropped(record: RouteRecord, work: str, route: str) -> Why:
    reason = record.reason
    if reason == Reason.TERMINAL:
        status = record.work.status if record.work_id else ""
        ended = _ENDED.get(status, f"was already {status or 'over'}")
        at = record.work.ended_at if record.work_id else None
        when = f" at {AT}" if at else ""
        return Why(f"{work} {ended}{when}, so this input was dropped (policy: drop when terminal).", at)
    if reason.startswith(_FALLBACK_DROP):
        why = reason.removeprefix(_FALLBACK_DROP)
        return Why(f"{work}'s running attempt could not take it ({why}), so it was dropped (fallback: drop).")
    if reason.startswith(_RATE_LIMITED):
        why = reason.removeprefix(_RATE_LIMITED)
        return Why(f"Dropped: {why}.")
    because = f": {reason}" if reason else ""
    return Why(f"Dropped by {route} (policy: drop){because}.")


def _unrouted(event: Event) -> Why:
    reason = event.unrouted_reason
    if event.waiting_on_id is not None:
        target = f"Work #{event.work_id}" if event.work_id else "the same Work"
        return Why(
            f"Held behind {target}'s earlier input #{event.waiting_on_id}, which is not routed yet: this "
            "Event routes once that one settles."
        )
    if event.retry_at is not None:
        because = f" ({reason})" if reason else ""
        return Why(f"Routing it failed{because}: it is tried again at {AT}.", event.retry_at)
    if reason:
        return Why(f"Not routed yet: {reason}.")
    return Why("Not routed yet: the router has not looked at it.")


def _work(record: RouteRecord) -> str:
    return f"Work #{record.work_id}" if record.work_id else "no Work"


def _times(count: int) -> str:
    return "once" if count == 1 else f"{count} times"
