"""Operator controls on Work: cancel, retry, send input, create and rebind (R48, R30).

Each control is one transaction that applies its effect through worklife's own services and
accepts a ``core.manual.<control>`` control Event (source ``core.manual``, trusted acceptance)
naming the Work and the acting user. The control Event is settled at once with a RouteRecord on
the Work (policy ``control``), so it never routes through user routes and shows in the Work's
route history.

**Cancel** (R48) cancels the Work's active attempts and waits, removes its timers and its queue
eligibility and makes it terminal (``worklife.lifecycle.work_cancel_in_tx``). The work loop holding a
cancelled attempt notices it after the commit and stops its process.

**Retry** unparks a parked Work or ends its backoff (``worklife.scheduling.work_retry_in_tx``):
its input is ready again, with the input its failed attempts took and a fresh attempt budget,
and it runs at once when its binding can run it. A binding with no executor (queue-only) only
queues input: the work loop refuses to dispatch it again and looks once more after five minutes,
so nothing runs until the Work is rebound to a binding with an executor or the configuration
gives the binding one; :func:`retry_outlook` and the result say so.

**Send input** accepts an addressed operator Event (R30): source ``core.manual``, the operator's
own type (never ``core.*``), ``work_id`` the Work. The router queues it on the binding the Work
runs on next, with no route and reason ``addressed``, unless a route selects it.

**Create** opens a Work in a scope of the live configuration on one of its bindings and accepts
its first input as an addressed operator Event naming it: the Work runs once that is routed.

**Rebind** makes a binding of the Work's scope in the live configuration the one its next
attempt runs on (``worklife.lifecycle.work_rebind_in_tx``, which the R30 binding rule reads).

A control the Work's state or the configuration refuses raises :class:`WorkControlRefused`
(HTTP 409, exit 1), an unknown Work ``Work.DoesNotExist`` (404) and malformed input
:class:`WorkControlInvalid` (400, naming the field); nothing is stored then.

Who may act is decided by the callers: the API and the console require each control's own
permission (:data:`PERMISSIONS`); the CLI is trusted operator access on the host and records
``--as USER`` (or ``cli``) as the actor without checking one.
"""

from __future__ import annotations

import logging
import re
import uuid
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from causal.checks import check_event_size
from causal.clock import Clock
from causal.limits import is_reserved
from causal.models import Event
from causal.services import Envelope, event_accept_in_tx
from controls.common import (
    CONTROL_SOURCE,
    actor_name,
    control_event_in_tx,
    live_label,
)
from routing.acceptance.envelopes import EnvelopeInvalid, parse_envelope
from routing.config.effective import EffectiveScope
from routing.config.selectors import live_generation, load_configuration
from routing.config.validate import NAME_PATTERN
from routing.engine.live import publish_routed
from routing.engine.selectors import work_next_binding
from worklife import lifecycle
from worklife.errors import WorkError
from worklife.models import ACTIVE_ATTEMPT_STATES, Attempt, Work
from worklife.scheduling import work_retry_in_tx

_BINDING_NAME = re.compile(NAME_PATTERN)
logger = logging.getLogger("conduit.routing")


class WorkControl(StrEnum):
    CANCEL = "cancel_work"  # cancel the Work: attempts, waits, timers and queue end with it (R48)
    RETRY = "retry_work"  # run a parked or backing-off Work again at once
    SEND = "send_input"  # accept an addressed operator Event for the Work (R30)
    CREATE = "create_work"  # open a Work on a binding and accept its first input
    REBIND = "rebind_work"  # make another binding of its scope the one the Work runs on next


class RefusalCode(StrEnum):
    WRONG_STATE = "wrong_state"  # the Work's state does not take the control (terminal, not parked…)
    NO_CONFIGURATION = "no_configuration"  # no configuration has been applied yet
    UNKNOWN_SCOPE = "unknown_scope"  # the scope is not in the live configuration
    UNKNOWN_BINDING = "unknown_binding"  # the binding is not visible in the scope
    BINDING_INVALID = "binding_invalid"  # the binding is declared but cannot run as declared


# The permission each control needs through the API and the console.
PERMISSIONS = {control: f"worklife.{control.value}" for control in WorkControl}
# The envelope id prefix of the operator input a control accepts (unique with a random suffix).
INPUT_ID_PREFIX = {WorkControl.SEND: "send", WorkControl.CREATE: "create"}


class WorkControlRefused(Exception):
    """A control the Work's state or the live configuration refuses (HTTP 409): nothing was
    stored. ``status`` is the Work's status when it was refused (empty for create)."""

    def __init__(
        self,
        *,
        action: WorkControl,
        code: RefusalCode,
        message: str,
        work_id: int | None = None,
        status: str = "",
    ) -> None:
        super().__init__(message)
        self.action = action
        self.code = code
        self.message = message
        self.work_id = work_id
        self.status = status

    def details(self) -> dict[str, Any]:
        """The JSON body of the refusal."""
        return {
            "error": self.code.value,
            "message": self.message,
            "action": self.action.value,
            "work_id": self.work_id,
            "status": self.status,
        }


class WorkControlInvalid(ValueError):
    """Malformed input to a control (HTTP 400); ``field`` names the argument at fault."""

    code = "invalid_input"

    def __init__(self, field: str | None, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message

    def details(self) -> dict[str, Any]:
        """The JSON body of the error."""
        return {"error": self.code, "field": self.field, "message": self.message}


@dataclass(frozen=True, slots=True)
class WorkControlResult:
    """What a control did to one Work."""

    action: str  # a WorkControl value
    work_id: int
    status: str  # the Work's status after the control
    control_seq: int  # the control Event committed with the effect
    by: str  # the acting user
    scope: str
    binding: str = ""  # create: the Work's binding; rebind: the new one
    previous_binding: str = ""  # rebind: the binding the Work would have run on next
    input_seq: int | None = None  # send, create: the addressed operator Event accepted
    attempts_cancelled: int = 0  # cancel: active attempts cancelled (their processes stop)
    outlook: str = ""  # retry: what happens next, when it does not simply run (retry_outlook)
    reason: str = ""  # cancel: why, as the operator said it (stored in the control Event's data)

    @property
    def message(self) -> str:
        """The result in one sentence, for the CLI and the console."""
        control = f"; control Event #{self.control_seq}"
        if self.action == WorkControl.CANCEL:
            stopped = (
                f" ({self.attempts_cancelled} active attempt{'s' if self.attempts_cancelled != 1 else ''} "
                "cancelled: its work loop stops the process)"
                if self.attempts_cancelled
                else ""
            )
            why = f": {self.reason}" if self.reason else ""
            return f"Work {self.work_id} cancelled by {self.by}{why}{stopped}{control}"
        if self.action == WorkControl.RETRY:
            if self.outlook:
                return f"Work {self.work_id} retried by {self.by}: {self.outlook}{control}"
            return f"Work {self.work_id} retried by {self.by}: it runs again at once{control}"
        if self.action == WorkControl.SEND:
            return (
                f"Input #{self.input_seq} sent to Work {self.work_id} by {self.by}: the router queues it "
                f"on the binding the Work runs on next{control}"
            )
        if self.action == WorkControl.CREATE:
            return (
                f"Work {self.work_id} created by {self.by} in scope {self.scope} on binding {self.binding} "
                f"with the first input #{self.input_seq}: it runs once the router queues it{control}"
            )
        previous = f" from {self.previous_binding}" if self.previous_binding else ""
        return (
            f"Work {self.work_id} rebound by {self.by}{previous} to {self.binding}: its next attempt runs on "
            f"it{control}"
        )

    def as_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data (API and ``--json``)."""
        return {**asdict(self), "message": self.message}


# --- the controls ------------------------------------------------------------------------------


# The longest reason a cancel keeps (a sentence or two, shown in the Work's history).
CANCEL_REASON_MAX = 500


def cancel_reason(reason: str | None) -> str:
    """A cancel's optional ``reason`` as stored: stripped, one line, at most
    :data:`CANCEL_REASON_MAX` characters; :class:`WorkControlInvalid` otherwise."""
    if reason is None:
        return ""
    if not isinstance(reason, str):
        raise WorkControlInvalid("reason", "must be a string")
    reason = " ".join(reason.split())
    if len(reason) > CANCEL_REASON_MAX:
        raise WorkControlInvalid("reason", f"at most {CANCEL_REASON_MAX} characters, not {len(reason)}")
    return reason


def work_cancel(
    *, work_id: int, user: AbstractBaseUser | str, clock: Clock, reason: str | None = None
) -> WorkControlResult:
    """Cancel the Work ``work_id`` (R48) with a ``core.manual.cancel_work`` control Event, which
    keeps the operator's optional ``reason`` (its data's ``reason``; see :func:`cancel_reason`).

    Its active attempts and waits are cancelled, its timers removed, its pending input leaves
    the queue and it is terminal, all in one transaction; the work loop holding an attempt stops
    its process after the commit. Raises :class:`WorkControlRefused` for terminal Work and
    ``Work.DoesNotExist`` for an unknown id."""
    by = actor_name(user)
    reason = cancel_reason(reason)
    with transaction.atomic():
        # Lock the Work before counting what the cancel ends: a concurrent control waits here.
        list(Work.objects.select_for_update().filter(pk=work_id).values_list("pk", flat=True))
        active = Attempt.objects.filter(work_id=work_id, state__in=ACTIVE_ATTEMPT_STATES).count()
        try:
            work = lifecycle.work_cancel_in_tx(work_id=work_id, clock=clock)
        except Work.DoesNotExist:
            raise Work.DoesNotExist(f"no Work has id {work_id}") from None
        except WorkError as refused:
            raise _wrong_state(
                WorkControl.CANCEL, work_id, f"{refused}: {WRONG_STATE[WorkControl.CANCEL]}"
            ) from refused
        details = {"reason": reason} if reason else None
        control = _control_event_in_tx(WorkControl.CANCEL, work=work, by=by, clock=clock, details=details)
        publish_routed([control.seq], [work.pk])
    return _done(
        WorkControlResult(
            action=WorkControl.CANCEL,
            work_id=work.pk,
            status=work.status,
            control_seq=control.seq,
            by=by,
            scope=work.scope,
            attempts_cancelled=active,
            reason=reason,
        )
    )


def work_retry(*, work_id: int, user: AbstractBaseUser | str, clock: Clock) -> WorkControlResult:
    """Run the parked or backing-off Work ``work_id`` again at once, with the input its failed
    attempts took and a fresh attempt budget, with a ``core.manual.retry_work`` control Event.

    Raises :class:`WorkControlRefused` for Work that is neither parked nor backing off (or is
    terminal) and ``Work.DoesNotExist`` for an unknown id."""
    by = actor_name(user)
    with transaction.atomic():
        try:
            work = work_retry_in_tx(work_id=work_id, now=clock())
        except Work.DoesNotExist:
            raise Work.DoesNotExist(f"no Work has id {work_id}") from None
        except WorkError as refused:
            raise _wrong_state(
                WorkControl.RETRY, work_id, f"{refused}: {WRONG_STATE[WorkControl.RETRY]}"
            ) from refused
        control = _control_event_in_tx(WorkControl.RETRY, work=work, by=by, clock=clock)
        outlook = retry_outlook(work.pk)
        publish_routed([control.seq], [work.pk])
    return _done(
        WorkControlResult(
            action=WorkControl.RETRY,
            work_id=work.pk,
            status=work.status,
            control_seq=control.seq,
            by=by,
            scope=work.scope,
            outlook=outlook,
        )
    )


def retry_outlook(work_id: int) -> str:
    """What a Retry of the Work leads to when it does not simply run again at once (``""``
    then): the binding it runs on next (R30) only queues input, or cannot run as the live
    configuration declares it. The console's Retry confirmation and the result say it."""
    work = work_next_binding(work_id)
    generation = live_generation()
    if work is None or generation is None:
        return ""
    name = work.binding
    scope = load_configuration(generation).scope(work.scope)
    binding = scope.bindings.get(name) if scope is not None else None
    if binding is None:
        return (
            f"Retry makes its input ready again, but its binding {name!r} is not in scope {work.scope} in "
            f"the live configuration, so nothing runs until the Work is rebound to a binding there"
        )
    if binding.problem:
        return (
            f"Retry makes its input ready again, but its binding {name!r} cannot run ({binding.problem}), "
            "so nothing runs until the Work is rebound or the configuration is fixed"
        )
    if not binding.executor:
        return (
            f"Retry makes its input ready again; its binding {name!r} only queues input (it has no "
            "executor), so nothing runs until the Work is rebound to a binding with an executor or a "
            "new configuration gives this one an executor"
        )
    return ""


def work_input_send(
    *,
    work_id: int,
    event_type: str,
    data: Any = None,
    subject: str = "",
    user: AbstractBaseUser | str,
    clock: Clock,
) -> WorkControlResult:
    """Send the operator's input to the Work ``work_id`` (R30): an addressed operator Event
    (source ``core.manual``, type ``event_type``, ``work_id`` set) and a
    ``core.manual.send_input`` control Event naming it, in one transaction.

    The router then queues the input on the binding the Work runs on next, reason
    ``addressed`` (or routes it by a route that selects it). Raises :class:`WorkControlInvalid`
    for a malformed type, subject or data, :class:`WorkControlRefused` for terminal Work and
    ``Work.DoesNotExist`` for an unknown id."""
    by = actor_name(user)
    envelope = operator_envelope(event_type=event_type, data=data, subject=subject)
    with transaction.atomic():
        work = Work.objects.select_for_update().filter(pk=work_id).first()
        if work is None:
            raise Work.DoesNotExist(f"no Work has id {work_id}")
        if work.is_terminal:
            raise _wrong_state(
                WorkControl.SEND,
                work_id,
                f"Work {work_id} is {work.status}: {WRONG_STATE[WorkControl.SEND]}",
                status=work.status,
            )
        sent = _input_accept_in_tx(WorkControl.SEND, envelope, work=work, by=by, clock=clock)
        control = _control_event_in_tx(
            WorkControl.SEND, work=work, by=by, clock=clock, details={"input": sent.seq, "type": sent.type}
        )
        publish_routed([sent.seq, control.seq], [work.pk])
    return _done(
        WorkControlResult(
            action=WorkControl.SEND,
            work_id=work.pk,
            status=work.status,
            control_seq=control.seq,
            by=by,
            scope=work.scope,
            input_seq=sent.seq,
        )
    )


def work_create(
    *,
    scope: str,
    binding: str,
    event_type: str,
    data: Any = None,
    subject: str = "",
    user: AbstractBaseUser | str,
    clock: Clock,
) -> WorkControlResult:
    """Open a Work in ``scope`` on ``binding`` and accept its first input (Control.CreateWork).

    One transaction: the Work (ready; it runs once its input is routed), its first input as an
    addressed operator Event naming it (type ``event_type``, R30), which is also its trigger,
    and a ``core.manual.create_work`` control Event. Raises :class:`WorkControlInvalid` for
    malformed arguments and :class:`WorkControlRefused` when the scope is not in the live
    configuration or the binding is not visible in it or cannot run as declared."""
    by = actor_name(user)
    scope = _required_name(scope, "scope", Work._meta.get_field("scope").max_length)
    binding = _binding_name(binding, Work._meta.get_field("binding").max_length)
    envelope = operator_envelope(event_type=event_type, data=data, subject=subject, field_prefix="input.")
    with transaction.atomic():
        _live_binding_in_tx(WorkControl.CREATE, scope=scope, binding=binding)
        work = lifecycle.work_open_in_tx(scope=scope, binding=binding, created_by=by, now=clock())
        first = _input_accept_in_tx(WorkControl.CREATE, envelope, work=work, by=by, clock=clock)
        lifecycle.work_trigger_set_in_tx(work_id=work.pk, event=first)
        control = _control_event_in_tx(
            WorkControl.CREATE,
            work=work,
            by=by,
            clock=clock,
            details={"binding": binding, "input": first.seq, "type": first.type},
        )
        publish_routed([first.seq, control.seq], [work.pk])
    return _done(
        WorkControlResult(
            action=WorkControl.CREATE,
            work_id=work.pk,
            status=work.status,
            control_seq=control.seq,
            by=by,
            scope=scope,
            binding=binding,
            input_seq=first.seq,
        )
    )


def work_rebind(
    *, work_id: int, binding: str, user: AbstractBaseUser | str, clock: Clock
) -> WorkControlResult:
    """Make ``binding`` the one the Work ``work_id`` runs on next (Control.Rebind), with a
    ``core.manual.rebind_work`` control Event.

    The binding must be visible in the Work's scope in the live configuration and able to run
    as declared. Raises :class:`WorkControlInvalid` for an empty binding,
    :class:`WorkControlRefused` for terminal Work or a binding the configuration refuses and
    ``Work.DoesNotExist`` for an unknown id."""
    by = actor_name(user)
    binding = _binding_name(binding, Work._meta.get_field("rebind_binding").max_length)
    with transaction.atomic():
        # Lock the Work first: the binding it would run on next is read as the rebind leaves it.
        list(Work.objects.select_for_update().filter(pk=work_id).values_list("pk", flat=True))
        next_binding = work_next_binding(work_id)
        if next_binding is None:
            raise Work.DoesNotExist(f"no Work has id {work_id}")
        if next_binding.terminal:
            raise _wrong_state(
                WorkControl.REBIND,
                work_id,
                f"Work {work_id} is {next_binding.status}: {WRONG_STATE[WorkControl.REBIND]}",
                status=next_binding.status,
            )
        previous = next_binding.binding
        _live_binding_in_tx(WorkControl.REBIND, scope=next_binding.scope, binding=binding, work_id=work_id)
        try:
            rebound = lifecycle.work_rebind_in_tx(work_id=work_id, binding=binding, now=clock())
        except WorkError as refused:
            raise _wrong_state(WorkControl.REBIND, work_id, str(refused)) from refused
        work = rebound.work
        control = _control_event_in_tx(
            WorkControl.REBIND,
            work=work,
            by=by,
            clock=clock,
            details={"binding": binding, "previous": previous, "after_attempt": rebound.after_attempt},
        )
        publish_routed([control.seq], [work.pk])
    return _done(
        WorkControlResult(
            action=WorkControl.REBIND,
            work_id=work.pk,
            status=work.status,
            control_seq=control.seq,
            by=by,
            scope=work.scope,
            binding=binding,
            previous_binding=previous,
        )
    )


# --- input ---------------------------------------------------------------------------------------


def operator_envelope(*, event_type: Any, data: Any, subject: Any, field_prefix: str = "") -> Envelope:
    """The operator's input as an envelope checked like acceptance checks one (its id, scope and
    Work are filled in by the control). Its type is the operator's own: ``core.*`` is refused.
    Raises :class:`WorkControlInvalid` naming the field (``field_prefix`` + ``type``…)."""
    if not isinstance(event_type, str) or not event_type.strip():
        raise WorkControlInvalid(f"{field_prefix}type", "the input needs a type, like 'operator.note'")
    if is_reserved(event_type.strip()):
        raise WorkControlInvalid(
            f"{field_prefix}type",
            f"type {event_type.strip()!r} is reserved for core Events (core.*): operator input has a type "
            "of its own",
        )
    if subject is None:
        subject = ""
    if not isinstance(subject, str):
        raise WorkControlInvalid(f"{field_prefix}subject", "the subject must be a string")
    # Placeholders for what the control fills in: the checks below are acceptance's own.
    payload = {
        "specversion": "1.0",
        "id": "operator-input",
        "source": CONTROL_SOURCE,
        "type": event_type.strip(),
        "scope": "operator",
        "subject": subject,
        "data": data,
    }
    try:
        envelope = parse_envelope(payload, trusted=True)
        check_event_size(payload)
    except EnvelopeInvalid as exc:
        raise WorkControlInvalid(f"{field_prefix}{exc.field or 'data'}", exc.message) from exc
    return envelope


def _binding_name(value: Any, max_length: int | None) -> str:
    """A binding's name as the configuration allows one (``NAME_PATTERN``), exactly as given."""
    if not isinstance(value, str) or not value:
        raise WorkControlInvalid("binding", "a binding is required")
    if not _BINDING_NAME.fullmatch(value):
        raise WorkControlInvalid(
            "binding", f"{value[:60]!r} is not a binding name (a letter or digit, then also _ . : -)"
        )
    if max_length is not None and len(value) > max_length:
        raise WorkControlInvalid("binding", f"the binding is longer than {max_length} characters")
    return value


def _required_name(value: Any, field: str, max_length: int | None) -> str:
    if not isinstance(value, str) or not value.strip():
        raise WorkControlInvalid(field, f"a {field} is required")
    value = value.strip()
    if max_length is not None and len(value) > max_length:
        raise WorkControlInvalid(field, f"the {field} is longer than {max_length} characters")
    return value


def _input_accept_in_tx(
    action: WorkControl, envelope: Envelope, *, work: Work, by: str, clock: Clock
) -> Event:
    addressed = replace(
        envelope,
        id=f"{INPUT_ID_PREFIX[action]}/{work.pk}/{uuid.uuid4().hex}",
        scope=work.scope,
        work_id=work.pk,
    )
    return event_accept_in_tx(envelope=addressed, clock=clock, accepted_by=by).event


# --- inside the transaction ----------------------------------------------------------------------


def _live_binding_in_tx(action: WorkControl, *, scope: str, binding: str, work_id: int | None = None) -> None:
    """Refuse a binding that is not visible in ``scope`` in the live configuration, or that
    cannot run as declared (its executor gone, a claimed control not implemented)."""
    generation = live_generation()
    if generation is None:
        raise WorkControlRefused(
            action=action,
            code=RefusalCode.NO_CONFIGURATION,
            message="no configuration has been applied yet",
            work_id=work_id,
        )
    effective = load_configuration(generation).scope(scope)
    if effective is None:
        raise WorkControlRefused(
            action=action,
            code=RefusalCode.UNKNOWN_SCOPE,
            message=f"unknown scope {scope!r}: it is not in the live configuration (generation "
            f"{generation.number})",
            work_id=work_id,
        )
    found = effective.bindings.get(binding)
    if found is None:
        raise WorkControlRefused(
            action=action,
            code=RefusalCode.UNKNOWN_BINDING,
            message=f"unknown binding {binding!r}: not in scope {scope} in generation {generation.number} "
            f"(bindings there: {_visible(effective)})",
            work_id=work_id,
        )
    if found.problem:
        raise WorkControlRefused(
            action=action,
            code=RefusalCode.BINDING_INVALID,
            message=f"binding {binding!r} of scope {scope} cannot run: {found.problem}",
            work_id=work_id,
        )


def _visible(scope: EffectiveScope) -> str:
    return ", ".join(sorted(scope.bindings)) or "none"


def _control_event_in_tx(
    action: WorkControl, *, work: Work, by: str, clock: Clock, details: dict[str, Any] | None = None
) -> Event:
    """The control Event naming the Work, settled at once on it."""
    return control_event_in_tx(
        action.value,
        target=str(work.pk),
        scope=work.scope,
        data={"work": work.pk, "by": by, **(details or {})},
        by=by,
        clock=clock,
        work_id=work.pk,
        generation=live_label(),
    )


# --- the Work's state: the rules the controls refuse by, and their words -------------------------

# What a control's refusal says after "Work N is <status>" when the Work's state refuses it:
# every control refuses terminal Work, and Retry also Work neither parked nor backing off.
WRONG_STATE = {
    WorkControl.CANCEL: "only live Work can be cancelled",
    WorkControl.RETRY: "only parked or backing-off Work is retried",
    WorkControl.SEND: "terminal Work takes no more input",
    WorkControl.REBIND: "terminal Work cannot be rebound",
}
# What the console says before a click, when the Work's state refuses the control (the same
# rules; for the controls but Cancel, these shorter words).
TERMINAL_BLOCKED = "terminal Work takes no more controls"
NOT_RETRYABLE_BLOCKED = "there is nothing to retry"


def wrong_state(work: Work, action: WorkControl) -> str:
    """Why the control ``action`` cannot apply to ``work`` as it is now (``""`` when it may), as
    the console's control page says it before a click: terminal Work takes no control, and
    Retry needs Work that is parked or backing off (:attr:`~worklife.models.Work.is_retryable`,
    the rule the retry write refuses by)."""
    if work.is_terminal:
        if action == WorkControl.CANCEL:
            return f"Work {work.pk} is already {work.status}: {WRONG_STATE[action]}."
        return f"Work {work.pk} is {work.status}: {TERMINAL_BLOCKED}."
    if action == WorkControl.RETRY and not work.is_retryable:
        return f"Work {work.pk} is {work.status} and neither parked nor backing off: {NOT_RETRYABLE_BLOCKED}."
    return ""


def _wrong_state(action: WorkControl, work_id: int, message: str, *, status: str = "") -> WorkControlRefused:
    if not status:
        status = Work.objects.filter(pk=work_id).values_list("status", flat=True).first() or ""
    return WorkControlRefused(
        action=action, code=RefusalCode.WRONG_STATE, message=message, work_id=work_id, status=status
    )


def _done(result: WorkControlResult) -> WorkControlResult:
    logger.info(
        "work_control.applied",
        extra={
            "action": result.action,
            "work": result.work_id,
            "control_event": result.control_seq,
            "input_event": result.input_seq,
            "binding": result.binding,
            "by": result.by,
        },
    )
    return result
