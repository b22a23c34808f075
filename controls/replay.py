"""Replay: accept a routed Event again as a copy, routed under the live configuration.

After a configuration changes, the Events it would have routed otherwise (an impact preview's
"unmatched → start", an Event dropped by a route since removed) are settled: routing never
looks at them again, and reroute takes only unrouted, failed or skipped ones. Replay accepts a
copy of any settled Event (routed, whatever its policy — unmatched, drop, start, queue… — or
failed or skipped): the same envelope and source under the id ``replay/<original id>/<n>``
(``n`` counts the replays of that Event, from 1), with the original's parent, which then routes
like new input under the live configuration. The id is reserved (``causal.checks``: nobody
else may send it), so the copy names its original: :func:`replay_original` reads the lineage
back from it and :func:`replay_copies` the copies of an Event.

Each replay is one transaction, as the other controls (:mod:`controls.events`): the
Event locked after any route commit in progress, the copy accepted, and a
``core.manual.replay_event`` control Event naming the Event, its copy and the acting user.
:func:`events_replay` replays several (at most :data:`REPLAY_LIMIT` in one request), each in its
own transaction, a refusal of one reported and the others going on.

Who may act is decided by the callers: the API and the console require the permission
``routing.replay_event``; the CLI is trusted host access and records ``--as USER`` (or ``cli``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from causal.checks import BIGINT_MAX, is_reserved
from causal.clock import Clock
from causal.models import Event, RouteState
from causal.services import event_accept_in_tx, event_envelope
from controls.common import actor_name, control_event_in_tx, live_label
from controls.events import (
    REPLAY_EVENT,
    REPLAYED,
    BatchOutcome,
    ControlRefused,
    ControlResult,
    control_logged,
    locked_event_in_tx,
)
from routing.engine.live import publish_routed
from routing.models import RouteRecord

logger = logging.getLogger("conduit.routing")

REPLAY_PREFIX = "replay/"
# The most Events one replay request names: a larger set is refused before anything is done.
REPLAY_LIMIT = 10_000
# How many of an Event's copies its page lists (the first).
COPIES_SHOWN = 10

_ENVELOPE_ID_MAX = Event._meta.get_field("envelope_id").max_length
_COPY_ID = re.compile(r"^replay/(?P<original>.+)/(?P<n>[1-9][0-9]*)$", re.DOTALL)


class ReplayInvalid(ValueError):
    """A replay request that names no Events, or too many; ``field`` names the argument."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    def details(self) -> dict[str, Any]:
        return {"error": "invalid_replay", "field": self.field, "message": self.message}


@dataclass(frozen=True, slots=True)
class ReplayBatch:
    """What a replay of several Events did, Event by Event, in the order they were named."""

    by: str
    outcomes: list[BatchOutcome] = field(default_factory=list)

    @property
    def done(self) -> list[BatchOutcome]:
        return [o for o in self.outcomes if o.ok]

    @property
    def refused(self) -> list[BatchOutcome]:
        return [o for o in self.outcomes if not o.ok]

    @property
    def summary(self) -> str:
        """The result in one line: "replayed 3, refused 1 (#7: …)"."""
        text = f"replayed {len(self.done)}"
        if self.refused:
            why = "; ".join(f"#{o.seq}: {o.error}" for o in self.refused[:3])
            more = f"; {len(self.refused) - 3} more" if len(self.refused) > 3 else ""
            text += f", refused {len(self.refused)} ({why}{more})"
        return text

    def as_dict(self) -> dict[str, Any]:
        return {
            "action": REPLAY_EVENT,
            "by": self.by,
            "done": len(self.done),
            "refused": len(self.refused),
            "summary": self.summary,
            "outcomes": [
                {
                    "seq": o.seq,
                    "ok": o.ok,
                    "copy_seq": o.copy_seq,
                    "control_seq": o.result.control_seq if o.result is not None else None,
                    "status": o.status,
                    "error": o.error,
                }
                for o in self.outcomes
            ],
        }


def replay_envelope_id(envelope_id: str, n: int) -> str:
    """The envelope id of the ``n``-th replay copy of the Event whose id is ``envelope_id``."""
    return f"{REPLAY_PREFIX}{envelope_id}/{n}"


def replay_original_id(envelope_id: str) -> str | None:
    """The original's envelope id when ``envelope_id`` is a replay copy's, else ``None``."""
    match = _COPY_ID.match(envelope_id)
    return match["original"] if match else None


def event_replay(*, seq: int, user: AbstractBaseUser | str, clock: Clock) -> ControlResult:
    """Accept a copy of the settled Event ``seq``, routed like new input under the live
    configuration, with a ``core.manual.replay_event`` control Event naming both; one
    transaction. Raises :class:`~controls.events.ControlRefused` for an Event not
    routed yet or one Conduit wrote for itself (``core.*``), ``Event.DoesNotExist`` for an
    unknown seq."""
    by = actor_name(user)
    with transaction.atomic():
        event = locked_event_in_tx(seq)
        if event.route_state == RouteState.UNROUTED:
            raise ControlRefused(
                seq=seq,
                route_state=event.route_state,
                message=f"Event #{seq} is not routed yet: the router routes it under the live configuration "
                "(reroute forgets its failures)",
            )
        if is_reserved(event.type):
            raise ControlRefused(
                seq=seq,
                route_state=event.route_state,
                message=f"Event #{seq} is one Conduit wrote for itself ({event.type}): it cannot be replayed",
            )
        copy = _accept_replay_in_tx(event, by=by, clock=clock)
        work_id = RouteRecord.objects.filter(event_id=seq).values_list("work_id", flat=True).first()
        control = control_event_in_tx(
            REPLAY_EVENT,
            target=str(seq),
            scope=event.scope,
            data={
                "event": seq,
                "envelope_id": event.envelope_id,
                "source": event.source,
                "copy": copy.seq,
                "copy_id": copy.envelope_id,
                "by": by,
            },
            by=by,
            clock=clock,
            work_id=work_id,
            generation=live_label(),
        )
        publish_routed([seq, control.seq, copy.seq], [work_id])
    result = ControlResult(
        action=REPLAY_EVENT,
        seq=seq,
        route_state=event.route_state,
        outcome=REPLAYED,
        control_seq=control.seq,
        by=by,
        work_id=work_id,
        copy_seq=copy.seq,
    )
    control_logged(result)
    return result


def replay_seqs(seqs: Sequence[Any], *, limit: int = REPLAY_LIMIT) -> list[int]:
    """The Events a replay request names, each once in the order given, or
    :class:`ReplayInvalid` (none, not positive integers, more than ``limit``)."""
    if not isinstance(seqs, list | tuple) or not seqs:
        raise ReplayInvalid("seqs", "name at least one Event seq")
    if not all(isinstance(s, int) and not isinstance(s, bool) and 0 < s <= BIGINT_MAX for s in seqs):
        raise ReplayInvalid("seqs", "expected a list of Event seqs (positive integers)")
    # The bound is on the request as sent (the document's maxItems), repeats included.
    if len(seqs) > limit:
        raise ReplayInvalid("seqs", f"at most {limit:,} Events can be replayed at once, not {len(seqs):,}")
    return list(dict.fromkeys(seqs))


def events_replay(*, seqs: Sequence[int], user: AbstractBaseUser | str, clock: Clock) -> ReplayBatch:
    """Replay each of ``seqs`` (see :func:`replay_seqs`) in its own transaction with its own
    control Event; a refusal (wrong state, unknown seq) is that Event's outcome and the others go
    on."""
    wanted = replay_seqs(seqs)
    batch = ReplayBatch(by=actor_name(user))
    for seq in wanted:
        try:
            result = event_replay(seq=seq, user=user, clock=clock)
        except ControlRefused as refused:
            batch.outcomes.append(BatchOutcome(seq, error=refused.message, status=409))
        except Event.DoesNotExist:
            batch.outcomes.append(BatchOutcome(seq, error=f"no Event has seq {seq}", status=404))
        else:
            batch.outcomes.append(BatchOutcome(seq, result=result, copy_seq=result.copy_seq))
    logger.info(
        "control.replayed", extra={"by": batch.by, "done": len(batch.done), "refused": len(batch.refused)}
    )
    return batch


# --- lineage (reads) ----------------------------------------------------------------------------


def replay_original(event: Event) -> int | None:
    """The seq of the Event that ``event`` is a replay copy of, or ``None``. One query at most."""
    original_id = replay_original_id(event.envelope_id)
    if original_id is None:
        return None
    return (
        Event.objects.filter(source=event.source, envelope_id=original_id)
        .values_list("seq", flat=True)
        .first()
    )


def replay_copies(event: Event, *, limit: int = COPIES_SHOWN) -> list[int]:
    """The seqs of ``event``'s first ``limit`` replay copies, oldest first. One query, by exact
    ids (copies are numbered from 1), which the (source, id) index answers."""
    return list(
        Event.objects.filter(
            source=event.source,
            envelope_id__in=[replay_envelope_id(event.envelope_id, n) for n in range(1, limit + 1)],
        )
        .order_by("seq")
        .values_list("seq", flat=True)
    )


# --- inside the transaction -----------------------------------------------------------------------

# Copies' numbers are looked for this many at a time.
_NUMBERS_PER_QUERY = 64


def next_replay_number_in_tx(event: Event) -> int:
    """The number of ``event``'s next replay copy: one more than the highest taken (the Event
    row is locked, so replays of one Event are numbered one after the other)."""
    highest, first = 0, 1
    while True:
        wanted = {
            replay_envelope_id(event.envelope_id, n): n for n in range(first, first + _NUMBERS_PER_QUERY)
        }
        taken = [
            wanted[envelope_id]
            for envelope_id in Event.objects.filter(
                source=event.source, envelope_id__in=list(wanted)
            ).values_list("envelope_id", flat=True)
        ]
        highest = max(taken, default=highest)
        if highest < first + _NUMBERS_PER_QUERY - 1:
            return highest + 1
        first += _NUMBERS_PER_QUERY


def _accept_replay_in_tx(event: Event, *, by: str, clock: Clock) -> Event:
    """Accept the next replay copy of ``event``."""
    copy_id = replay_envelope_id(event.envelope_id, next_replay_number_in_tx(event))
    if len(copy_id) > _ENVELOPE_ID_MAX:
        raise ControlRefused(
            seq=event.seq,
            route_state=event.route_state,
            message=f"Event #{event.seq} cannot be replayed: its copy's id {copy_id[:40]!r}… would be longer "
            f"than {_ENVELOPE_ID_MAX} characters",
        )
    envelope = replace(event_envelope(event), id=copy_id)
    return event_accept_in_tx(envelope=envelope, clock=clock, parent=event.parent, accepted_by=by).event
