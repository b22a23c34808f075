"""What ``manage.py serve`` restarted: one KV entry a host and child in
:data:`RESTARTS_NAMESPACE`, written by serve each time it restarts a child that exited, read by
doctor (the ``supervision`` check) and the console's banner.

A value's JSON keys are read by other processes, so they stay as they are: ``host``,
``child``, ``status`` (the exit status serve saw: negative for a signal), ``restarts`` (since
that serve started) and ``at`` (ISO time).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from causal.clock import Clock, aware_time
from causal.selectors import kv_newest
from causal.services import kv_replace
from infra.leases import lease_transaction

RESTARTS_NAMESPACE = "core.serve.restarts"
# How long a restart is shown by doctor and on the console's banner.
RESTARTS_RECENT = timedelta(minutes=15)
RESTARTS_LISTED = 20


@dataclass(frozen=True, slots=True)
class ChildRestart:
    """A child of serve on ``host`` that exited with ``status`` and was restarted, the
    ``restarts``-th time since serve started, at ``at``."""

    host: str
    child: str
    status: int
    restarts: int
    at: datetime

    def as_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "child": self.child,
            "status": self.status,
            "restarts": self.restarts,
            "at": self.at.isoformat(),
        }

    @property
    def status_text(self) -> str:
        """The exit status in words: ``status 3`` or ``signal 9``."""
        return f"signal {-self.status}" if self.status < 0 else f"status {self.status}"

    @property
    def text(self) -> str:
        """One line for doctor's text output, as every check's item has."""
        times = f"{self.restarts} restart{'s' if self.restarts != 1 else ''}"
        return f"{self.child} on {self.host}: {times}, last exit {self.status_text} at {self.at.isoformat()}"


def restart_record(*, child: str, status: int, restarts: int, clock: Clock, host: str | None = None) -> None:
    """Record that serve restarted ``child`` after it exited with ``status``: one statement."""
    host = host or socket.gethostname()
    now = clock()
    with lease_transaction():
        kv_replace(
            namespace=RESTARTS_NAMESPACE,
            key=f"{host}:{child}",
            value={
                "host": host,
                "child": child,
                "status": status,
                "restarts": restarts,
                "at": now.isoformat(),
            },
            clock=clock,
        )


def restarts_recent(*, now: datetime, within: timedelta = RESTARTS_RECENT) -> list[ChildRestart]:
    """The children serve restarted within ``within`` of ``now``, the latest first. One query."""
    return [
        ChildRestart(
            host=str(value.get("host", "")),
            child=str(value.get("child", key)),
            status=int(value.get("status", 0)),
            restarts=int(value.get("restarts", 0)),
            at=aware_time(value.get("at")) or updated_at,
        )
        for key, value, updated_at in kv_newest(RESTARTS_NAMESPACE, since=now - within, limit=RESTARTS_LISTED)
    ]
