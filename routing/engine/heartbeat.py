"""The route loop's heartbeat (a :class:`~worklife.heartbeat.Heartbeats` kind): written by the
route loop's host after its passes, read by doctor, the console and the other route loops (a
loop publishes its windows' targets while another one beats).

A beat's JSON keys are read by running processes and stored rows, so they stay as they are:
``at`` (ISO time), ``generation``, ``passes``, ``routed``, ``abandoned_calls``,
``abandoned_total``, ``failing`` (passes failing in a row: error, count, since, events) and
``stopped`` (the loop's last beat, written as it stops: a stopped loop does not count as alive).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from causal.clock import aware_time
from worklife.heartbeat import Heartbeats


@dataclass(frozen=True, slots=True)
class RouteLoopHeartbeat:
    """A route loop's heartbeat: the generation it routes with, its passes and routed Events
    since it started, its handler calls abandoned at their deadline (now and in all),
    ``failing`` while its passes fail in a row, and ``stopped`` once it has exited."""

    loop: str
    at: datetime
    generation: str
    passes: int
    routed: int
    abandoned_calls: int
    abandoned_total: int
    failing: dict[str, Any] | None = None
    stopped: bool = False

    def value(self) -> dict[str, Any]:
        """The beat as stored."""
        return {
            "at": self.at.isoformat(),
            "generation": self.generation,
            "passes": self.passes,
            "routed": self.routed,
            "abandoned_calls": self.abandoned_calls,
            "abandoned_total": self.abandoned_total,
            "failing": self.failing,
            "stopped": self.stopped,
        }

    @classmethod
    def read(cls, loop: str, value: dict, written_at: datetime) -> RouteLoopHeartbeat:
        """The beat a stored entry holds."""
        return cls(
            loop=loop,
            at=aware_time(value.get("at")) or written_at,
            generation=str(value.get("generation", "")),
            passes=int(value.get("passes", 0)),
            routed=int(value.get("routed", 0)),
            abandoned_calls=int(value.get("abandoned_calls", 0)),
            abandoned_total=int(value.get("abandoned_total", 0)),
            failing=value.get("failing") if isinstance(value.get("failing"), dict) else None,
            stopped=bool(value.get("stopped", False)),
        )


ROUTE_LOOP_HEARTBEATS = Heartbeats("core.routing.heartbeats", RouteLoopHeartbeat, stops=True)
HEARTBEATS_NAMESPACE = ROUTE_LOOP_HEARTBEATS.namespace
heartbeat_write = ROUTE_LOOP_HEARTBEATS.write
heartbeat_clear = ROUTE_LOOP_HEARTBEATS.clear
route_loop_heartbeats = ROUTE_LOOP_HEARTBEATS.newest
beating_since = ROUTE_LOOP_HEARTBEATS.beating_since
# While another route loop beats, a loop publishes what its windows' routes decide.
other_loops_alive = ROUTE_LOOP_HEARTBEATS.others_alive
