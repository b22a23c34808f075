"""Loop heartbeats: one KV entry a loop in its kind's namespace, written by the loop after its
passes, read by doctor, health, metrics, the console and the other loops of its kind.
:class:`Heartbeats` is every kind's; a kind's beat (:class:`WorkLoopHeartbeat` here, the route
loop's in ``routing.engine.heartbeat``) says its fields and their JSON shape.

The work loop's beat, written by the runner every few seconds and when it stops: a beat's JSON
keys are read by running processes and stored rows, so they stay as they are: ``at`` (ISO
time), ``slots``, ``running``, ``started``, ``completed``, ``failed``, ``refused``, ``lost`` and
``stopped``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, Self

from django.db.models import Q

from causal.clock import Clock, aware_time
from causal.models import KV
from causal.selectors import kv_newest
from causal.services import kv_delete_in_tx, kv_replace
from infra.leases import lease_transaction


class Beat(Protocol):
    """A kind of loop's heartbeat: the loop that wrote it, its JSON value, and the beat read
    back from a stored entry."""

    @property
    def loop(self) -> str: ...

    def value(self) -> dict[str, Any]: ...

    @classmethod
    def read(cls, loop: str, value: dict, written_at: datetime) -> Self: ...


def running() -> Q:
    """The heartbeat entries whose loop has not stopped (a beat written before ``stopped``
    was a key counts as running)."""
    return Q(value__stopped=False) | Q(value__stopped__isnull=True)


class Heartbeats[B: Beat]:
    """The heartbeats of one kind of loop, in ``namespace``. With ``stops``, a loop's last beat
    says ``stopped`` and a stopped loop does not count as beating."""

    def __init__(self, namespace: str, beat: type[B], *, stops: bool = False) -> None:
        self.namespace = namespace
        self.beat = beat
        self.stops = stops

    def write(self, beat: B, *, clock: Clock) -> None:
        """Record ``beat`` as its loop's last heartbeat: one statement, in a lease transaction
        (a heartbeat need not survive a power loss)."""
        with lease_transaction():
            kv_replace(namespace=self.namespace, key=beat.loop, value=beat.value(), clock=clock)

    def clear(self, loop: str) -> None:
        """Forget ``loop``'s heartbeat (a clean stop): nothing reads it as running any longer.
        One statement, in a lease transaction."""
        with lease_transaction():
            kv_delete_in_tx(namespace=self.namespace, key=loop)

    def newest(self, *, since: datetime | None = None, limit: int = 10) -> list[B]:
        """The loops' last heartbeats, newest first (only those written at ``since`` or later
        when given). One query."""
        return [
            self.beat.read(key, value, updated_at)
            for key, value, updated_at in kv_newest(self.namespace, since=since, limit=limit)
        ]

    def beating_since(self, since: datetime) -> Q:
        """The heartbeat entries (KV rows) of the loops that beat at ``since`` or later (and have
        not stopped): a filter, so a caller counts several loops' beats in one query."""
        beating = Q(namespace=self.namespace, updated_at__gte=since)
        return beating & running() if self.stops else beating

    def others_alive(self, *, owner: str, now: datetime, within: timedelta) -> bool:
        """Whether a loop other than ``owner`` wrote its heartbeat within ``within`` of ``now``."""
        beats = KV.objects.filter(namespace=self.namespace, updated_at__gt=now - within)
        if self.stops:
            beats = beats.filter(running())
        return beats.exclude(key=owner).exists()


# --- the work loop's ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkLoopHeartbeat:
    """A work loop's heartbeat: its slots, what it runs now and its counters since it started;
    ``stopped`` once it has stopped (its last beat); ``isolation``: what its attempts' processes
    cannot reach (:func:`worklife.executors.isolation.isolation`, ``""`` from a loop before it)."""

    loop: str
    at: datetime
    slots: int
    running: int
    started: int
    completed: int
    failed: int
    refused: int
    lost: int
    stopped: bool
    isolation: str = ""

    def value(self) -> dict[str, Any]:
        """The beat as stored."""
        return {
            "at": self.at.isoformat(),
            "slots": self.slots,
            "running": self.running,
            "started": self.started,
            "completed": self.completed,
            "failed": self.failed,
            "refused": self.refused,
            "lost": self.lost,
            "stopped": self.stopped,
            "isolation": self.isolation,
        }

    @classmethod
    def read(cls, loop: str, value: dict, written_at: datetime) -> WorkLoopHeartbeat:
        """The beat a stored entry holds (a missing or unreadable count reads 0)."""
        return cls(
            loop=loop,
            at=aware_time(value.get("at")) or written_at,
            slots=_count(value, "slots"),
            running=_count(value, "running"),
            started=_count(value, "started"),
            completed=_count(value, "completed"),
            failed=_count(value, "failed"),
            refused=_count(value, "refused"),
            lost=_count(value, "lost"),
            stopped=bool(value.get("stopped", False)),
            isolation=str(value.get("isolation") or ""),
        )


def _count(value: dict, name: str) -> int:
    try:
        return int(value.get(name, 0))
    except (TypeError, ValueError):
        return 0


WORK_LOOP_HEARTBEATS = Heartbeats("core.worklife.heartbeats", WorkLoopHeartbeat, stops=True)
HEARTBEATS_NAMESPACE = WORK_LOOP_HEARTBEATS.namespace
heartbeat_write = WORK_LOOP_HEARTBEATS.write
work_loop_heartbeats = WORK_LOOP_HEARTBEATS.newest
beating_since = WORK_LOOP_HEARTBEATS.beating_since
