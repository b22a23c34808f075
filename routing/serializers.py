"""JSON shapes of records for the API and the CLI (``--json``): one function per record.

Each returns plain JSON-ready dicts and reads only the row it is given (no query), so a
list serialises in the queries its selector made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from causal.models import DEFAULT_DATACONTENTTYPE, Event
from infra.times import timestamp

if TYPE_CHECKING:
    from routing.engine.failures import RouteFailure
    from routing.models import RouteRecord
    from routing.records.selectors import EventRoute
    from worklife.models import Attempt, Work


def cloudevent_json(event: Event) -> dict[str, Any]:
    """An Event as the structured-mode CloudEvent 1.0 it was accepted as (JSON format): the
    attributes, ``scope`` and the other extension attributes flat beside them, and ``data``
    (or ``data_base64`` for binary data). Every attribute the sender gave is there,
    ``datacontenttype`` included even when it is the default; optional attributes the Event
    has not are left out. The official SDKs read it as it is."""
    cloudevent: dict[str, Any] = {
        "specversion": event.specversion,
        "id": event.envelope_id,
        "source": event.source,
        "type": event.type,
    }
    if event.subject:
        cloudevent["subject"] = event.subject
    if event.time is not None:
        cloudevent["time"] = timestamp(event.time)
    if event.datacontenttype and (
        event.datacontenttype_given or event.datacontenttype != DEFAULT_DATACONTENTTYPE
    ):
        cloudevent["datacontenttype"] = event.datacontenttype
    cloudevent["scope"] = event.scope
    cloudevent.update(event.extensions or {})
    if event.binary_data:
        cloudevent["data_base64"] = event.data
    elif event.data is not None:
        cloudevent["data"] = event.data
    return cloudevent


def conduit_json(event: Event) -> dict[str, Any]:
    """What Conduit knows of an Event beyond the CloudEvent: its ``seq``, explicit targets
    (``correlation``, ``work_id``, ``execution_id``), ancestry (``parent_seq``, ``root_seq``,
    ``depth``; a root's ``root_seq`` is its own), acceptance and route state."""
    return {
        "seq": event.seq,
        "correlation": list(event.correlation or []),
        "work_id": event.work_id,
        "execution_id": event.execution_id,
        "parent_seq": event.parent_id,
        "root_seq": event.root_seq,
        "depth": event.depth,
        "accepted_at": timestamp(event.accepted_at),
        "accepted_by": event.accepted_by,
        "route_state": event.route_state,
        "routed_at": timestamp(event.routed_at),
        "unrouted_reason": event.unrouted_reason,
    }


def event_json(event: Event) -> dict[str, Any]:
    """An Event as the API and ``events … --json`` give it: ``{"event": <the CloudEvent>,
    "conduit": {<Conduit's own fields>}}`` (:func:`cloudevent_json`, :func:`conduit_json`).

    Conduit's fields are beside the CloudEvent, never in it: a CloudEvent attribute name is
    lower-case letters and digits, and an extension named like one of them would shadow it."""
    return {"event": cloudevent_json(event), "conduit": conduit_json(event)}


def accepted_json(event: Event, *, created: bool) -> dict[str, Any]:
    """One result of a batch acceptance: whether the Event is new, and the Event
    (:func:`event_json`)."""
    return {"created": created, **event_json(event)}


def refusals_json(refusals: Any) -> list[dict[str, str]]:
    """Refusals as stored on a RouteRecord, each as ``{"route", "reason"}`` in route order (R28)."""
    result = []
    for refusal in refusals or []:
        if isinstance(refusal, dict):
            result.append({"route": str(refusal.get("route", "")), "reason": str(refusal.get("reason", ""))})
        else:  # a bare reason (never written by the router; kept readable all the same)
            result.append({"route": "", "reason": str(refusal)})
    return result


def route_json(record: RouteRecord) -> dict[str, Any]:
    """A RouteRecord: the one decision about an Event (R27, R29).

    ``event`` is the Event's seq and ``work`` the Work id it was routed on (``None`` when no
    Work); ``policy`` the effective policy and ``reason`` why; ``refusals`` each route that
    declined it, in route order; ``error`` and ``attempts`` tell a failed (dead-lettered)
    route. The ``route.decided`` log record carries the same fields.
    """
    return {
        "event": record.event_id,
        "work": record.work_id,
        "route": record.route,
        "binding": record.binding,
        "generation": record.generation,
        "policy": record.policy,
        "reason": record.reason,
        "disposition": record.disposition,
        "refusals": refusals_json(record.refusals),
        "error": record.error,
        "attempts": record.attempts,
        "decided_at": timestamp(record.decided_at),
    }


def failure_json(failure: RouteFailure) -> dict[str, Any]:
    """A route failure counted on an unrouted Event: its code, route, error, how many times it
    failed, when first and last, and the end of its backoff (``None``: no retry is due)."""
    return {
        "code": failure.code,
        "route": failure.route,
        "error": failure.error,
        "count": failure.count,
        "first_failed_at": timestamp(failure.first_failed_at),
        "last_failed_at": timestamp(failure.last_failed_at),
        "backoff_until": timestamp(failure.backoff_until),
        "generation": failure.generation,
    }


def event_route_json(item: EventRoute) -> dict[str, Any]:
    """An Event's route, keyed by ``state``.

    A settled Event (``routed``, ``skipped``, ``failed``): ``{"event", "state"}`` and the
    fields of :func:`route_json`. An unrouted one: ``{"event", "state": "unrouted", "reason",
    "waiting_on", "retry_at", "failure"}``: why it is unrouted, the earlier Event it waits
    behind, when it is looked at again, and the failure counted on it (or ``None``).
    """
    event = item.event
    if item.record is not None:
        return {"state": event.route_state, **route_json(item.record)}
    return {
        "event": event.seq,
        "state": event.route_state,
        "reason": event.unrouted_reason,
        "waiting_on": event.waiting_on_id,
        "retry_at": timestamp(event.retry_at),
        "failure": failure_json(item.failure) if item.failure is not None else None,
    }


def work_json(work: Work) -> dict[str, Any]:
    """A Work: its scope, status and bindings (started on, retry, last rebind), its links (by
    id; the trigger by its Event's seq) and the scheduler's view (failures, losses, backoff,
    parking)."""
    return {
        "id": work.pk,
        "scope": work.scope,
        "status": work.status,
        "binding": work.binding,
        "retry_binding": work.retry_binding,
        "rebind_binding": work.rebind_binding,
        "rebind_after_attempt": work.rebind_after_attempt,
        "parent_id": work.parent_id,
        "predecessor_id": work.predecessor_id,
        "trigger_seq": work.trigger_id,
        "version": work.version,
        "created_at": timestamp(work.created_at),
        "created_by": work.created_by,
        "updated_at": timestamp(work.updated_at),
        "ended_at": timestamp(work.ended_at),
        "failures": work.failures,
        "losses": work.losses,
        "pending_run": work.pending_run,
        "retry_at": timestamp(work.retry_at),
        "parked_at": timestamp(work.parked_at),
        "last_error": work.last_error,
        # Flow control's hold (worklife.flow): kind, reason and until when; null when none.
        "flow_hold": (
            {
                "kind": work.hold_kind,
                "reason": work.hold_reason,
                "until": timestamp(work.held_until),
                "gate": work.hold_gate,
            }
            if work.hold_kind
            else None
        ),
    }


def attempt_json(attempt: Attempt) -> dict[str, Any]:
    """An attempt of a Work: its number, pinned configuration, lease and how it ended."""
    return {
        "id": attempt.pk,
        "number": attempt.number,
        "state": attempt.state,
        "binding": attempt.binding,
        "executor": attempt.executor,
        "generation": attempt.generation,
        "capabilities": list(attempt.capabilities or []),
        "lease_epoch": attempt.lease_epoch,
        "lease_until": timestamp(attempt.lease_until),
        "trigger_seq": attempt.trigger_id,
        "started_at": timestamp(attempt.started_at),
        "ended_at": timestamp(attempt.ended_at),
        "exit_status": attempt.exit_status,
        "error": attempt.error,
        "idempotency_key": attempt.idempotency_key,
    }
