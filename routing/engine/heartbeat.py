"""The route loop's heartbeat: one KV entry a loop in :data:`HEARTBEATS_NAMESPACE`, written
by the route loop's host after its passes, read by doctor, the console and the other route
loops (a loop publishes its windows' targets while another one beats).

A beat's JSON keys are read by running processes and stored rows, so they stay as they are:
``at`` (ISO time), ``generation``, ``passes``, ``routed``, ``abandoned_calls``,
``abandoned_total`` and ``failing`` (passes failing in a row: error, count, since, events).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q

from causal.clock import Clock, aware_time
from causal.models import KV
from causal.selectors import kv_newest
from causal.services import kv_replace
from infra.leases import lease_transaction

HEARTBEATS_NAMESPACE = "core.routing.heartbeats"


@dataclass(frozen=True, slots=True)
class RouteLoopHeartbeat:
    """A route loop's heartbeat: the generation it routes with, its passes and routed Events
    since it started, its handler calls abandoned at their deadline (now and in all), and
    ``failing`` while its passes fail in a row."""

    loop: str
    at: datetime
    generation: str
    passes: int
    routed: int
    abandoned_calls: int
    abandoned_total: int
    failing: dict[str, Any] | None = None


def heartbeat_write(beat: RouteLoopHeartbeat, *, clock: Clock) -> None:
    """Record ``beat`` as its loop's last heartbeat: one statement, in a lease transaction (a
    heartbeat need not survive a power loss)."""
    with lease_transaction():
        kv_replace(
            namespace=HEARTBEATS_NAMESPACE,
            key=beat.loop,
            value={
                "at": beat.at.isoformat(),
                "generation": beat.generation,
                "passes": beat.passes,
                "routed": beat.routed,
                "abandoned_calls": beat.abandoned_calls,
                "abandoned_total": beat.abandoned_total,
                "failing": beat.failing,
            },
            clock=clock,
        )


def route_loop_heartbeats(*, since: datetime | None = None, limit: int = 10) -> list[RouteLoopHeartbeat]:
    """The route loops' last heartbeats, newest first (only those written at ``since`` or
    later when given). One query."""
    return [
        RouteLoopHeartbeat(
            loop=key,
            at=aware_time(value.get("at")) or updated_at,
            generation=str(value.get("generation", "")),
            passes=int(value.get("passes", 0)),
            routed=int(value.get("routed", 0)),
            abandoned_calls=int(value.get("abandoned_calls", 0)),
            abandoned_total=int(value.get("abandoned_total", 0)),
            failing=value.get("failing") if isinstance(value.get("failing"), dict) else None,
        )
        for key, value, updated_at in kv_newest(HEARTBEATS_NAMESPACE, since=since, limit=limit)
    ]


def beating_since(since: datetime) -> Q:
    """The heartbeat entries (KV rows) of the route loops that beat at ``since`` or later: a
    filter, so a caller counts several loops' beats in one query."""
    return Q(namespace=HEARTBEATS_NAMESPACE, updated_at__gte=since)


def other_loops_alive(*, owner: str, now: datetime, within: timedelta) -> bool:
    """Whether a route loop other than ``owner`` wrote its heartbeat within ``within`` of
    ``now``: while one does, a loop publishes what its windows' routes decide."""
    return (
        KV.objects.filter(namespace=HEARTBEATS_NAMESPACE, updated_at__gt=now - within)
        .exclude(key=owner)
        .exists()
    )
