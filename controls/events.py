"""Operator controls on one Event: skip and reroute (R20–R22).

Each control is one transaction that

1. serialises with route commits (the router's commit lock on PostgreSQL; ``BEGIN IMMEDIATE``
   on SQLite) and locks the Event row (``SELECT … FOR UPDATE``), then re-checks the Event's
   state there: the route loop may have settled it since the operator looked;
2. applies the control's effect;
3. accepts a ``core.manual.skip_event`` / ``core.manual.reroute_event`` control Event (source
   ``core.manual``, trusted acceptance) naming the Event and the acting user, and settles it
   at once with a RouteRecord (policy ``control``) so it never routes through user routes.

A control on an Event in the wrong state raises :class:`ControlRefused` (HTTP 409) and an
unknown seq ``Event.DoesNotExist`` (404); either way nothing is stored.

**Skip** routes an unrouted Event as skipped without asking its routes: RouteRecord
disposition and policy ``skipped``, reason ``skipped by <user>``, on the Work its explicit
targets name when they name exactly one; its failure entry is deleted and its count and last
error are kept in the record (``attempts``, ``error``).

**Reroute** of an unrouted Event forgets its failures (the failure entry, ``retry_at``,
``waiting_on``), so the next pass tries it at once. Reroute of a failed or skipped Event
accepts a copy: the same envelope under the id ``reroute/<original id>`` and the same source,
which then routes like new input. There is one copy per Event: a second reroute is refused
naming it.

:func:`events_reroute` reroutes several Events, each in its own transaction (the dead letters
page); :func:`dead_letters_page` and :func:`reroute_copies` are the reads that page makes.

Who may act is decided by the callers: the API and the console require the permissions
``routing.skip_event`` / ``routing.reroute_event``; the CLI is trusted operator access on the
host and records ``--as USER`` (or ``cli``) as the actor without checking one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Q

from causal.clock import Clock
from causal.models import Event, RouteState
from causal.services import event_accept_in_tx, event_envelope
from controls.common import (
    actor_name,
    control_event_in_tx,
    live_label,
)
from routing.engine.claims import commit_lock_alone_in_tx
from routing.engine.failures import RouteFailure, failures_forget_in_tx, failures_read
from routing.engine.live import publish_routed
from routing.models import Disposition, RouteRecord
from worklife.models import Attempt, CorrelationKey, Work

logger = logging.getLogger("conduit.routing")

SKIP_EVENT = "skip_event"
REROUTE_EVENT = "reroute_event"
# Replay is in controls.replay; its name and permission sit with the others.
REPLAY_EVENT = "replay_event"
COPY_PREFIX = "reroute/"
PERMISSIONS = {
    SKIP_EVENT: "routing.skip_event",
    REROUTE_EVENT: "routing.reroute_event",
    REPLAY_EVENT: "routing.replay_event",
}
# What a control did (ControlResult.outcome).
SKIPPED = "skipped"
FAILURES_FORGOTTEN = "failures_forgotten"
COPIED = "copied"
REPLAYED = "replayed"
# Dead letters rerouted in one request (each in its own transaction).
MAX_BATCH = 100

_ENVELOPE_ID_MAX = Event._meta.get_field("envelope_id").max_length


class ControlRefused(Exception):
    """A control on an Event in the wrong state (HTTP 409): nothing was changed.

    ``copy_seq`` names the copy when the Event was already rerouted as one.
    """

    def __init__(self, *, seq: int, route_state: str, message: str, copy_seq: int | None = None) -> None:
        super().__init__(message)
        self.seq = seq
        self.route_state = route_state
        self.message = message
        self.copy_seq = copy_seq

    def details(self) -> dict[str, Any]:
        """The JSON body of the refusal."""
        return {
            "error": "wrong_state",
            "message": self.message,
            "seq": self.seq,
            "route_state": self.route_state,
            "copy_seq": self.copy_seq,
        }


@dataclass(frozen=True, slots=True)
class ControlResult:
    """What a control did to one Event."""

    action: str  # skip_event | reroute_event | replay_event
    seq: int  # the Event acted on
    route_state: str  # its route state after the control
    outcome: str  # skipped | failures_forgotten | copied | replayed
    control_seq: int  # the control Event committed with the effect
    by: str  # the acting user
    work_id: int | None = None  # the Work the skip was recorded on
    copy_seq: int | None = None  # the copy a reroute or a replay accepted
    failures: int = 0  # route failures counted before the control (forgotten or kept)
    last_error: str = ""  # the last route failure's error, when there was one

    @property
    def message(self) -> str:
        """The result in one sentence, for the CLI and the console."""
        counted = (
            f" ({self.failures} failure{'s' if self.failures != 1 else ''} counted)" if self.failures else ""
        )
        if self.outcome == SKIPPED:
            where = f" on Work {self.work_id}" if self.work_id else ""
            return (
                f"Event #{self.seq} skipped by {self.by}{where}{counted}; control Event #{self.control_seq}"
            )
        if self.outcome == COPIED:
            return (
                f"Event #{self.seq} rerouted by {self.by} as the copy #{self.copy_seq}; "
                f"control Event #{self.control_seq}"
            )
        if self.outcome == REPLAYED:
            return (
                f"Event #{self.seq} replayed by {self.by} as the copy #{self.copy_seq}, routed under the live "
                f"configuration; control Event #{self.control_seq}"
            )
        return (
            f"Event #{self.seq}: failures forgotten by {self.by}{counted}, tried again on the next pass; "
            f"control Event #{self.control_seq}"
        )

    def as_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data (API and ``--json``)."""
        return {**asdict(self), "message": self.message}


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """One Event of a batch reroute: its result, or why it was refused (``status`` 404/409)."""

    seq: int
    result: ControlResult | None = None
    error: str = ""
    status: int = 200
    copy_seq: int | None = None

    @property
    def ok(self) -> bool:
        return self.result is not None


# --- the controls -----------------------------------------------------------------------------


def event_skip(*, seq: int, user: AbstractBaseUser | str, clock: Clock) -> ControlResult:
    """Route the unrouted Event ``seq`` as skipped, without asking its routes (R21).

    One transaction: the skipped RouteRecord (on the Work its explicit targets name, when
    exactly one), the Event marked skipped with its wait, backoff and claims cleared, its
    failure entry deleted (count and last error kept in the record), and the
    ``core.manual.skip_event`` control Event. Raises :class:`ControlRefused` when the Event
    is not unrouted and ``Event.DoesNotExist`` for an unknown seq.
    """
    by = actor_name(user)
    with transaction.atomic():
        event = locked_event_in_tx(seq)
        if event.route_state != RouteState.UNROUTED:
            raise ControlRefused(
                seq=seq,
                route_state=event.route_state,
                message=f"Event #{seq} is already {event.route_state}: only an unrouted Event can be skipped",
            )
        now = clock()
        failure = failures_read([seq]).get(seq)
        work_id = _explicit_work_in_tx(event)
        generation = live_label()
        RouteRecord.objects.create(
            event=event,
            work_id=work_id,
            scope=event.scope,
            route=failure.route if failure else "",
            generation=generation,
            policy=Disposition.SKIPPED.value,
            reason=f"skipped by {by}",
            disposition=Disposition.SKIPPED,
            keys=list(event.correlation or []),
            error=failure.error if failure else "",
            attempts=failure.count if failure else 0,
            decided_at=now,
            decided_by=by,
        )
        Event.objects.filter(seq=seq).update(
            route_state=RouteState.SKIPPED,
            routed_at=now,
            unrouted_reason="",
            waiting_on=None,
            retry_at=None,
            claimed_by="",
            claimed_until=None,
        )
        failures_forget_in_tx([seq])
        control = _control_event_in_tx(
            SKIP_EVENT, event, by=by, clock=clock, work_id=work_id, generation=generation
        )
        # Open console pages refresh once this commits.
        publish_routed([seq, control.seq], [work_id])
    result = ControlResult(
        action=SKIP_EVENT,
        seq=seq,
        route_state=RouteState.SKIPPED,
        outcome=SKIPPED,
        control_seq=control.seq,
        by=by,
        work_id=work_id,
        failures=failure.count if failure else 0,
        last_error=failure.error if failure else "",
    )
    control_logged(result)
    return result


def event_reroute(*, seq: int, user: AbstractBaseUser | str, clock: Clock) -> ControlResult:
    """Reroute the Event ``seq`` (R22).

    An unrouted Event: its failures are forgotten (failure entry deleted, ``retry_at`` and
    ``waiting_on`` cleared) so the next pass tries it at once. A failed or skipped Event: a
    copy is accepted, the same envelope under the id ``reroute/<original id>`` and the same
    source, which routes like new input. One transaction with the
    ``core.manual.reroute_event`` control Event. Raises :class:`ControlRefused` for an Event
    routed normally or already rerouted (naming the copy), ``Event.DoesNotExist`` for an
    unknown seq.
    """
    by = actor_name(user)
    with transaction.atomic():
        event = locked_event_in_tx(seq)
        state = event.route_state
        failure: RouteFailure | None = None
        copy: Event | None = None
        if state == RouteState.UNROUTED:
            failure = failures_read([seq]).get(seq)
            work_id = _explicit_work_in_tx(event)
            failures_forget_in_tx([seq])
            Event.objects.filter(seq=seq).update(
                retry_at=None,
                waiting_on=None,
                unrouted_reason=f"failures forgotten by {by}: tried again on the next pass",
            )
            outcome = FAILURES_FORGOTTEN
        elif state in (RouteState.FAILED, RouteState.SKIPPED):
            copy = _accept_copy_in_tx(event, by=by, clock=clock)
            work_id = RouteRecord.objects.filter(event_id=seq).values_list("work_id", flat=True).first()
            outcome = COPIED
        else:
            policy = RouteRecord.objects.filter(event_id=seq).values_list("policy", flat=True).first()
            raise ControlRefused(
                seq=seq,
                route_state=state,
                message=f"Event #{seq} was routed normally (policy {policy or 'unknown'}): only an unrouted, "
                "failed or skipped Event can be rerouted (replay accepts a copy of it, routed under the live "
                "configuration)",
            )
        control = _control_event_in_tx(
            REROUTE_EVENT, event, by=by, clock=clock, work_id=work_id, generation=live_label()
        )
        publish_routed([seq, control.seq, *([copy.seq] if copy is not None else [])], [work_id])
    result = ControlResult(
        action=REROUTE_EVENT,
        seq=seq,
        route_state=state,
        outcome=outcome,
        control_seq=control.seq,
        by=by,
        work_id=work_id,
        copy_seq=copy.seq if copy is not None else None,
        failures=failure.count if failure else 0,
        last_error=failure.error if failure else "",
    )
    control_logged(result)
    return result


def events_reroute(*, seqs: Iterable[int], user: AbstractBaseUser | str, clock: Clock) -> list[BatchOutcome]:
    """Reroute several Events, each with its own control Event in its own transaction.

    Returns one :class:`BatchOutcome` per distinct seq, in the order given: a refusal of one
    Event (wrong state, unknown seq) is reported and the others go on. At most
    :data:`MAX_BATCH` Events (``ValueError`` beyond).
    """
    wanted = list(dict.fromkeys(seqs))
    if len(wanted) > MAX_BATCH:
        raise ValueError(f"seq: at most {MAX_BATCH} Events can be rerouted at once, not {len(wanted)}")
    outcomes: list[BatchOutcome] = []
    for seq in wanted:
        try:
            result = event_reroute(seq=seq, user=user, clock=clock)
        except ControlRefused as refused:
            outcomes.append(BatchOutcome(seq, error=refused.message, status=409, copy_seq=refused.copy_seq))
        except Event.DoesNotExist:
            outcomes.append(BatchOutcome(seq, error=f"no Event has seq {seq}", status=404))
        else:
            outcomes.append(BatchOutcome(seq, result=result, copy_seq=result.copy_seq))
    return outcomes


def wrong_state(event: Event, action: str) -> str:
    """Why the control ``action`` cannot apply to ``event`` as it is now (``""`` when it can), as
    the console's confirmation page says it before a click: the state rules the controls refuse
    by (skip: unrouted Events only; reroute: not a normally routed one; replay: settled ones)."""
    state = event.route_state
    if action == SKIP_EVENT and state != "unrouted":
        return f"Event #{event.seq} is already {state}: only an unrouted Event can be skipped."
    if action == REROUTE_EVENT and state == "routed":
        return (
            f"Event #{event.seq} was routed normally: only an unrouted, failed or skipped Event can be rerouted "
            "(Replay accepts a copy of it, routed under the live configuration)."
        )
    if action == REPLAY_EVENT and state == "unrouted":
        return f"Event #{event.seq} is not routed yet: only a settled Event can be replayed."
    return ""


def copy_envelope_id(envelope_id: str) -> str:
    """The envelope id of a rerouted Event's copy."""
    return COPY_PREFIX + envelope_id


def reroute_copies(events: Iterable[Event]) -> dict[int, int]:
    """The copies already accepted for ``events`` (failed or skipped ones), by original seq.
    One query whatever the number of Events."""
    wanted = {(e.source, copy_envelope_id(e.envelope_id)): e.seq for e in events}
    if not wanted:
        return {}
    by_source: dict[str, list[str]] = {}
    for source, envelope_id in wanted:
        by_source.setdefault(source, []).append(envelope_id)
    query = Q(pk__in=[])
    for source, envelope_ids in by_source.items():
        query |= Q(source=source, envelope_id__in=envelope_ids)
    rows = Event.objects.filter(query).values_list("source", "envelope_id", "seq")
    return {wanted[(source, envelope_id)]: seq for source, envelope_id, seq in rows}


# --- inside the transaction -------------------------------------------------------------------


def locked_event_in_tx(seq: int) -> Event:
    """The Event row, locked, read after every route commit in progress has finished."""
    # The router's commit lock: the state re-checked below is the one route commits leave.
    commit_lock_alone_in_tx()
    try:
        return Event.objects.select_for_update().get(seq=seq)
    except Event.DoesNotExist:
        raise Event.DoesNotExist(f"no Event has seq {seq}") from None


def _explicit_work_in_tx(event: Event) -> int | None:
    """The Work the Event's explicit targets (work id, execution id, owned correlation keys)
    name, when they name exactly one; else ``None``."""
    targets: set[int] = set()
    if event.work_id is not None and Work.objects.filter(pk=event.work_id).exists():
        targets.add(event.work_id)
    if event.execution_id is not None:
        work_id = Attempt.objects.filter(pk=event.execution_id).values_list("work_id", flat=True).first()
        if work_id is not None:
            targets.add(work_id)
    if event.correlation:
        targets.update(
            CorrelationKey.objects.filter(scope=event.scope, key__in=list(event.correlation)).values_list(
                "work_id", flat=True
            )
        )
    return targets.pop() if len(targets) == 1 else None


def _accept_copy_in_tx(event: Event, *, by: str, clock: Clock) -> Event:
    copy_id = copy_envelope_id(event.envelope_id)
    if len(copy_id) > _ENVELOPE_ID_MAX:
        raise ControlRefused(
            seq=event.seq,
            route_state=event.route_state,
            message=f"Event #{event.seq} cannot be rerouted: its copy's id {copy_id[:40]!r}… would be longer "
            f"than {_ENVELOPE_ID_MAX} characters",
        )
    existing = (
        Event.objects.filter(source=event.source, envelope_id=copy_id).values_list("seq", flat=True).first()
    )
    if existing is not None:
        raise ControlRefused(
            seq=event.seq,
            route_state=event.route_state,
            message=f"Event #{event.seq} was already rerouted as the copy #{existing} ({copy_id})",
            copy_seq=existing,
        )
    envelope = replace(event_envelope(event), id=copy_id)
    return event_accept_in_tx(envelope=envelope, clock=clock, parent=event.parent, accepted_by=by).event


def _control_event_in_tx(
    action: str, target: Event, *, by: str, clock: Clock, work_id: int | None, generation: str
) -> Event:
    """The control Event naming the Event ``target``, settled at once."""
    return control_event_in_tx(
        action,
        target=str(target.seq),
        scope=target.scope,
        data={"event": target.seq, "envelope_id": target.envelope_id, "source": target.source, "by": by},
        by=by,
        clock=clock,
        work_id=work_id,
        generation=generation,
    )


def control_logged(result: ControlResult) -> None:
    """Log an applied Event control (``control.applied``), one line with its ids."""
    logger.info(
        "control.applied",
        extra={
            "action": result.action,
            "event": result.seq,
            "control_event": result.control_seq,
            "outcome": result.outcome,
            "by": result.by,
            "copy": result.copy_seq,
            "work": result.work_id,
        },
    )
