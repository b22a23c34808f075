"""What every operator control shares: who acted, and the control Event that records it.

A control (on an Event or on Work) is recorded as an Event of its own, from the source
``core.manual``, accepted and settled at once in the control's transaction with the policy
``control``: the history of an Event or a Work then shows who did what, and when.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from causal.clock import Clock
from causal.models import Event, RouteState
from causal.services import Envelope, event_accept_in_tx, events_accept_in_tx
from routing.config.selectors import live_generation
from routing.models import CONTROL_POLICY, Disposition, RouteRecord

CONTROL_SOURCE = "core.manual"

_DECIDED_BY_MAX = RouteRecord._meta.get_field("decided_by").max_length


def actor_name(user: AbstractBaseUser | str) -> str:
    """The name a control records for ``user`` (a user, or a name such as ``cli``)."""
    name = user if isinstance(user, str) else user.get_username()
    name = name.strip()
    if not name:
        raise ValueError("user: a control needs the name of the acting user")
    if len(name) > _DECIDED_BY_MAX:
        raise ValueError(f"user: the name is longer than {_DECIDED_BY_MAX} characters")
    return name


def live_label() -> str:
    """The live generation's label, which a control's route record names ("" before any)."""
    live = live_generation()
    return live.label if live is not None else ""


def control_event_in_tx(
    action: str,
    *,
    target: str,
    scope: str,
    data: dict[str, Any],
    by: str,
    clock: Clock,
    work_id: int | None,
    generation: str,
) -> Event:
    """Accept the control Event of ``action`` on ``target`` (an Event's seq or a Work's id)
    and settle it at once (policy ``control``, reason ``action``), in the caller's transaction."""
    envelope = Envelope(
        id=f"{action}/{target}/{uuid.uuid4().hex}",
        source=CONTROL_SOURCE,
        type=f"{CONTROL_SOURCE}.{action}",
        scope=scope,
        data=data,
    )
    control = event_accept_in_tx(envelope=envelope, clock=clock, accepted_by=by).event
    now = clock()
    RouteRecord.objects.create(
        event=control,
        work_id=work_id,
        scope=scope,
        generation=generation,
        policy=CONTROL_POLICY,
        reason=action,
        disposition=Disposition.ROUTED,
        decided_at=now,
        decided_by=by,
    )
    Event.objects.filter(seq=control.seq).update(route_state=RouteState.ROUTED, routed_at=now)
    return control


@dataclass(frozen=True, slots=True)
class ControlNote:
    """One control Event of a batch: what :func:`control_event_in_tx` takes, but the clock."""

    target: str
    scope: str
    data: dict[str, Any]
    work_id: int | None


def control_events_in_tx(
    action: str, notes: Sequence[ControlNote], *, by: str, clock: Clock, generation: str
) -> list[Event]:
    """The control Events of ``action``, one per note, each as :func:`control_event_in_tx`
    accepts and settles one, in a fixed number of statements whatever their number (a bulk
    job's batch): one acceptance of them all, one insert of their route records, one update of
    their state. Returned in the order of ``notes``."""
    if not notes:
        return []
    envelopes = [
        Envelope(
            id=f"{action}/{note.target}/{uuid.uuid4().hex}",
            source=CONTROL_SOURCE,
            type=f"{CONTROL_SOURCE}.{action}",
            scope=note.scope,
            data=note.data,
        )
        for note in notes
    ]
    controls = [a.event for a in events_accept_in_tx(envelopes=envelopes, clock=clock, accepted_by=by)]
    now = clock()
    RouteRecord.objects.bulk_create(
        [
            RouteRecord(
                event=control,
                work_id=note.work_id,
                scope=note.scope,
                generation=generation,
                policy=CONTROL_POLICY,
                reason=action,
                disposition=Disposition.ROUTED,
                decided_at=now,
                decided_by=by,
            )
            for control, note in zip(controls, notes, strict=True)
        ]
    )
    Event.objects.filter(seq__in=[c.seq for c in controls]).update(
        route_state=RouteState.ROUTED, routed_at=now
    )
    for control in controls:
        control.route_state, control.routed_at = RouteState.ROUTED, now
    return controls
