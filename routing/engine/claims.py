"""Claims: which route loop evaluates which Events (several loops on PostgreSQL).

A loop claims its window with a short lease (``claimed_by``, ``claimed_until``) taken
with ``FOR UPDATE SKIP LOCKED``; route commits are serialised by a transaction-scoped advisory
lock (:data:`COMMIT_LOCK_ID`). Correctness comes from the commit's revalidation and the
uniqueness constraints, never from the lease alone; an expired lease is claimable again."""

from __future__ import annotations

import functools
import os
import socket
import uuid
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Q

from causal.models import Event, RouteState
from conduit_site.leases import lease_transaction
from conduit_site.queries import update_rows
from routing.evaluate import SnapshotRead
from routing.extension import EventSnapshot

# "Rout": serialises route commits on PostgreSQL (operator controls take it too).
COMMIT_LOCK_ID = 0x526F7574


def loop_identity() -> str:
    """A name for this process's claims: host, pid and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def release_dead_claims(now: datetime) -> int:
    """Give back the live claims of route loops on this host whose process has gone (a loop
    that crashed or was killed), so a restarted loop routes them at once instead of after the
    claim lapses; returns how many Events were released. Claims of other hosts are left to
    lapse: only a process of this host can be known dead."""
    host = socket.gethostname()
    held = (
        Event.objects.filter(
            route_state=RouteState.UNROUTED, claimed_until__gt=now, claimed_by__startswith=f"{host}:"
        )
        .values_list("claimed_by", flat=True)
        .distinct()
    )
    dead = [owner for owner in held if not _process_alive(owner.split(":")[1])]
    if not dead:
        return 0
    return Event.objects.filter(claimed_by__in=dead).update(claimed_by="", claimed_until=None)


def _process_alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except ValueError:
        return True  # not a claim of ours to judge
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, under another user
    return True


def claim_window(*, owner: str, now: datetime, limit: int, claim_seconds: float) -> list[EventSnapshot]:
    """Claim the oldest unrouted Events that are not backing off or held by another loop."""
    until = now + timedelta(seconds=claim_seconds)
    # A claim is a lease: committed without waiting for the disk (conduit_site.leases).
    with lease_transaction():
        window = _claimable(limit).snapshots([now], [now], [owner])
        if window:
            update_rows(Event, (e.seq for e in window), claimed_by=owner, claimed_until=until)
    return window


def _claimable_query(
    limit: int, retry_before: list[datetime], lapsed_before: list[datetime], owner: list[str]
):
    """The oldest ``limit`` unrouted Events not backing off at ``retry_before`` and not held
    (at ``lapsed_before``) by a loop other than ``owner``: each a one-value list."""
    query = (
        Event.objects.filter(route_state=RouteState.UNROUTED)
        .filter(Q(retry_at__isnull=True) | Q(retry_at__lte=retry_before[0]))
        .filter(
            Q(claimed_until__isnull=True) | Q(claimed_until__lt=lapsed_before[0]) | Q(claimed_by=owner[0])
        )
        # Pass over Events waiting behind an earlier one that has not settled (I7).
        .filter(Q(waiting_on__isnull=True) | ~Q(waiting_on__route_state=RouteState.UNROUTED))
        .order_by("seq")
    )
    if connection.features.has_select_for_update_skip_locked:
        query = query.select_for_update(skip_locked=True, of=("self",))
    return query[:limit]


@functools.cache
def _claimable(limit: int) -> SnapshotRead:
    """The claim's read, built and compiled once per window size (the route loop's every pass)."""
    return SnapshotRead(functools.partial(_claimable_query, limit))
