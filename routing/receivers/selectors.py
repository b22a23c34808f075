"""Reads of receivers: those of the live configuration (kept per process, by generation), one
by name, and what the Receivers page and ``manage.py receivers list`` show of each."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType

from django.db import connection
from django.db.models import QuerySet

from causal.models import RECEIVER_ACCEPTED, Event
from infra.kept import KeptPerProcess
from infra.queries import CompiledOnce
from routing.config.receivers import ReceiverSpec, SecretRef, accepted_by
from routing.models import Generation, GenerationKind, Receiver, ReceiverCount
from routing.receivers.verify import SIGNATURE_FAILURES, secret_status

HANDSHAKE = "handshake"
RECEIVER_INDEX = "event_receiver_seq_idx"

# A generation's receivers never change (written once, with it): read once per process, kept for
# the generations read last, by id and digest.
RECEIVERS_KEPT: KeptPerProcess[tuple[int, str], Mapping[str, ReceiverSpec]] = KeptPerProcess(8)

_LIVE = CompiledOnce(
    lambda: (
        Generation.objects.filter(kind=GenerationKind.APPLIED)
        .order_by("-number")
        .values_list("pk", "digest", "number")[:1]
    )
)


class ReceiverNotFound(LookupError):
    """No receiver of that name in the live configuration."""


def receivers_of(generation_id: int, digest: str) -> Mapping[str, ReceiverSpec]:
    """The receivers of a stored generation by name, in name order (read once per process)."""

    def load() -> Mapping[str, ReceiverSpec]:
        rows = Receiver.objects.filter(generation_id=generation_id).order_by("name")
        return MappingProxyType({row.name: spec_of(row) for row in rows})

    return RECEIVERS_KEPT.get((generation_id, digest), load)


def spec_of(row: Receiver) -> ReceiverSpec:
    """A stored receiver as its declaration."""
    secret = row.secret or {}
    return ReceiverSpec(
        name=row.name,
        kind=row.kind,
        scope=row.scope,
        secret=SecretRef(env=secret.get("env", ""), file=secret.get("file", "")),
        settings=MappingProxyType(dict(row.settings or {})),
    )


def live_receivers() -> tuple[int | None, Mapping[str, ReceiverSpec]]:
    """The live generation's number (``None`` before the first apply) and its receivers."""
    rows = _LIVE.rows()
    if not rows:
        return None, MappingProxyType({})
    pk, digest, number = rows[0]
    return number, receivers_of(pk, digest)


def receiver_find(name: str) -> ReceiverSpec:
    """The receiver ``name`` of the live configuration; raises :class:`ReceiverNotFound`."""
    number, receivers = live_receivers()
    spec = receivers.get(name)
    if spec is None:
        where = "no configuration has been applied yet" if number is None else f"generation {number}"
        raise ReceiverNotFound(f"no receiver named {name!r} in the live configuration ({where})")
    return spec


# --- the overview ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LastEvent:
    """The newest Event a receiver accepted."""

    seq: int
    type: str
    accepted_at: datetime


@dataclass(frozen=True, slots=True)
class ReceiverOverview:
    """What the console and the CLI show of a receiver: its declaration, whether its secret can
    be read here (``secret_problem``), its newest Event, its last handshake, and its refusals by
    reason (``signature_failures`` sums those that say the sender could not prove who it is)."""

    spec: ReceiverSpec
    secret_problem: str
    last_event: LastEvent | None
    handshake: ReceiverCount | None
    refusals: tuple[ReceiverCount, ...] = field(default=())

    @property
    def signature_failures(self) -> int:
        return sum(row.count for row in self.refusals if row.outcome in SIGNATURE_FAILURES)

    @property
    def other_refusals(self) -> int:
        return sum(row.count for row in self.refusals if row.outcome not in SIGNATURE_FAILURES)

    @property
    def last_refusal(self) -> ReceiverCount | None:
        return max(self.refusals, key=lambda row: row.last_at, default=None)

    @property
    def last_delivery_at(self) -> datetime | None:
        """When the last delivery that was verified arrived (an Event accepted or a handshake)."""
        times = [
            t
            for t in (
                self.last_event and self.last_event.accepted_at,
                self.handshake and self.handshake.last_at,
            )
            if t
        ]
        return max(times, default=None)


def receivers_overview() -> tuple[int | None, list[ReceiverOverview]]:
    """The live generation's number and an overview of each of its receivers, by name: two
    queries, and one more a receiver (its newest Event, through ``event_receiver_seq_idx``)."""
    number, receivers = live_receivers()
    counts: dict[str, list[ReceiverCount]] = {}
    for row in ReceiverCount.objects.filter(receiver__in=list(receivers)).order_by("receiver", "outcome"):
        counts.setdefault(row.receiver, []).append(row)
    overview = []
    for name, spec in receivers.items():
        rows = counts.get(name, [])
        overview.append(
            ReceiverOverview(
                spec=spec,
                secret_problem=secret_status(spec.secret),
                last_event=last_event(name),
                handshake=next((row for row in rows if row.outcome == HANDSHAKE), None),
                refusals=tuple(row for row in rows if row.outcome != HANDSHAKE),
            )
        )
    return number, overview


def last_event(name: str) -> LastEvent | None:
    """The newest Event receiver ``name`` accepted, or ``None``."""
    row = last_event_query(name).first()
    return LastEvent(*row) if row else None


def last_event_query(name: str) -> QuerySet:
    """The query of :func:`last_event`. It repeats the condition of the partial index
    ``event_receiver_seq_idx`` as the index writes it (its text, with the literal in it): a
    database uses a partial index only for a query whose condition it can see implies the
    index's, and neither database sees it through a bound parameter."""
    return (
        Event.objects.filter(accepted_by=accepted_by(name))
        .extra(where=[_receiver_condition_sql(connection.vendor)])  # noqa: S610 - no input in it
        .order_by("-seq")
        .values_list("seq", "type", "accepted_at")
    )


@functools.cache
def _receiver_condition_sql(vendor: str) -> str:
    index = next(index for index in Event._meta.indexes if index.name == RECEIVER_INDEX)
    assert index.condition == RECEIVER_ACCEPTED
    sql = index._get_condition_sql(Event, connection.schema_editor())
    return sql.replace("%", "%%")  # extra() substitutes parameters
