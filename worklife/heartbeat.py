"""The work loop's heartbeat: one KV entry a loop in :data:`HEARTBEATS_NAMESPACE`, written by
the runner every few seconds and when it stops, read by doctor and the console.

A beat's JSON keys are read by running processes and stored rows, so they stay as they are:
``at`` (ISO time), ``slots``, ``running``, ``started``, ``completed``, ``failed``, ``refused``,
``lost`` and ``stopped``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import Q

from causal.clock import Clock, aware_time
from causal.selectors import kv_newest
from causal.services import kv_put_in_tx

HEARTBEATS_NAMESPACE = "core.worklife.heartbeats"


@dataclass(frozen=True, slots=True)
class WorkLoopHeartbeat:
    """A work loop's heartbeat: its slots, what it runs now and its counters since it started;
    ``stopped`` once it has stopped (its last beat)."""

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


def heartbeat_write(beat: WorkLoopHeartbeat, *, clock: Clock) -> None:
    """Record ``beat`` as its loop's last heartbeat (its own transaction)."""
    with transaction.atomic():
        kv_put_in_tx(
            namespace=HEARTBEATS_NAMESPACE,
            key=beat.loop,
            value={
                "at": beat.at.isoformat(),
                "slots": beat.slots,
                "running": beat.running,
                "started": beat.started,
                "completed": beat.completed,
                "failed": beat.failed,
                "refused": beat.refused,
                "lost": beat.lost,
                "stopped": beat.stopped,
            },
            clock=clock,
        )


def work_loop_heartbeats(*, since: datetime | None = None, limit: int = 10) -> list[WorkLoopHeartbeat]:
    """The work loops' last heartbeats, newest first (only those written at ``since`` or
    later when given). One query."""
    return [
        WorkLoopHeartbeat(
            loop=key,
            at=aware_time(value.get("at")) or updated_at,
            slots=_count(value, "slots"),
            running=_count(value, "running"),
            started=_count(value, "started"),
            completed=_count(value, "completed"),
            failed=_count(value, "failed"),
            refused=_count(value, "refused"),
            lost=_count(value, "lost"),
            stopped=bool(value.get("stopped", False)),
        )
        for key, value, updated_at in kv_newest(HEARTBEATS_NAMESPACE, since=since, limit=limit)
    ]


def beating_since(since: datetime) -> Q:
    """The heartbeat entries (KV rows) of the work loops that beat at ``since`` or later and have
    not stopped: a filter, so a caller counts several loops' beats in one query."""
    return Q(namespace=HEARTBEATS_NAMESPACE, updated_at__gte=since, value__stopped=False)


def _count(value: dict, name: str) -> int:
    try:
        return int(value.get(name, 0))
    except (TypeError, ValueError):
        return 0
