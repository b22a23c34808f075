"""Claims: which route loop evaluates which Events (several loops on PostgreSQL).

A loop claims its window with a short lease (``claimed_by``, ``claimed_until``) taken
with ``FOR UPDATE SKIP LOCKED``; route loops' commits take a transaction-scoped advisory lock
(:data:`COMMIT_LOCK_ID`) shared and run side by side, operator controls and single Events'
routes take it alone (``routing.engine.router`` gives the argument). Once its routes are
asked, a loop publishes what they decided (:func:`publish_targets`), so that other loops'
commits know what its Events will touch before they commit. Correctness comes from the commit's revalidation and the
uniqueness constraints, never from the lease alone; an expired lease is claimable again.

A window is one unbroken run: it never reaches past an Event another live loop holds or
that no pass has decided (:func:`claim_window`). A commit routes only the Events before the
first such Event and gives the rest back, so a window reaching past one would be mostly
given back; and claims taken side by side (each skipping the rows the other had just locked)
interleave Event by Event, a pattern that then renews itself every round: each loop claims
again while the other still holds its rows, skips them and takes back its own given-back
ones. Two loops routed one Event per pass that way, for minutes."""

from __future__ import annotations

import functools
import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Q

from causal.clock import Clock
from causal.models import KV, Event, RouteState
from causal.services import kv_replace
from infra.identity import host_name
from infra.leases import lease_transaction
from infra.queries import CompiledOnce, Listed, update_rows
from routing.engine.evaluate import SnapshotRead
from routing.extension import EventSnapshot

# "Rout": route loops' commits take it shared on PostgreSQL; operator controls and the routes
# of single Events take it alone.
COMMIT_LOCK_ID = 0x526F7574
# "Clam": serialises claims on PostgreSQL, so a claim sees the claims before it and two claims
# never scan side by side, skipping each other's rows.
CLAIM_LOCK_ID = 0x436C616D
# Where each route loop publishes what its window's routes decided (PostgreSQL): one KV entry a
# loop, replaced at each window (:func:`publish_targets`).
TARGETS_NAMESPACE = "core.routing.window_targets"


def commit_lock_alone_in_tx() -> None:
    """Take the route commit lock alone, in the caller's transaction (PostgreSQL; SQLite runs
    one write at a time anyway): every route commit in progress has finished, and none starts
    before the transaction ends. Operator controls take it before they re-check an Event."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [COMMIT_LOCK_ID])


def release_dead_claims(now: datetime) -> int:
    """Give back the live claims of route loops on this host whose process has gone (a loop
    that crashed or was killed), so a restarted loop routes them at once instead of after the
    claim lapses; returns how many Events were released. Claims of other hosts are left to
    lapse: only a process of this host can be known dead."""
    host = host_name()
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


def undecided_or_held_elsewhere(*, owner: str, now: datetime) -> Q:
    """Unrouted Events whose targets are not known yet: no pass has decided them, or a loop
    other than ``owner`` holds them at ``now`` (:func:`held_elsewhere`, as a condition)."""
    return Q(unrouted_reason="") | (Q(claimed_until__gt=now) & ~Q(claimed_by="") & ~Q(claimed_by=owner))


def held_elsewhere(claimed_by: str, claimed_until: datetime | None, *, owner: str, now: datetime) -> bool:
    """Whether another loop than ``owner`` holds an Event now (its claim has not lapsed)."""
    return bool(claimed_by) and claimed_by != owner and claimed_until is not None and claimed_until > now


def claim_window(
    *,
    owner: str,
    now: datetime,
    limit: int,
    claim_seconds: float,
    until: datetime | None = None,
    held: Collection[int] = (),
    after: int = 0,
) -> list[EventSnapshot]:
    """Claim the oldest unrouted Events that are not backing off or held by another loop, up to
    the first Event another loop holds or no pass has decided (see the module). The claim
    lasts ``claim_seconds`` from ``now``, or until ``until``. ``held``: Events ``owner`` holds
    already and routes in the same pass (the window counts them, but they are not claimed
    again, nor returned). ``after``: only Events accepted after this seq (a window claimed
    ahead of the one being committed, :meth:`routing.engine.router.Router.route_pending`)."""
    until = until or now + timedelta(seconds=claim_seconds)
    # A claim is a lease: committed without waiting for the disk (infra.leases).
    with lease_transaction():
        sorting = None
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_advisory_xact_lock(%s), current_setting('enable_sort')", [CLAIM_LOCK_ID]
                )
                sorting = cursor.fetchone()[1]
                # No sort for the claim's reads: they take the oldest unrouted Events from an
                # index in acceptance order and stop at the window's size. With statistics that
                # do not know the backlog (a table filled since it was last analyzed: after a
                # bulk acceptance, an outage's backlog), the planner read every unrouted Event
                # and sorted them all for each window: 16 ms against 0.5 ms for 20,000 Events.
                cursor.execute("SELECT set_config('enable_sort', 'off', true)")
        window = _claimable(limit).snapshots([after], [now], [now], [owner])
        if held:
            window = [event for event in window if event.seq not in held]
        window = unbroken(window, owner=owner, now=now)
        if sorting is not None:
            # Put back for the rest of an enclosing transaction (a test's, a caller's).
            with connection.cursor() as cursor:
                cursor.execute("SELECT set_config('enable_sort', %s, true)", [sorting])
        if window:
            update_rows(Event, (e.seq for e in window), claimed_by=owner, claimed_until=until)
    return window


def _claimable_query(
    limit: int,
    after: list[int],
    retry_before: list[datetime],
    lapsed_before: list[datetime],
    owner: list[str],
):
    """The oldest ``limit`` unrouted Events after seq ``after`` not backing off at
    ``retry_before`` and not held (at ``lapsed_before``) by a loop other than ``owner``: each
    a one-value list."""
    query = (
        Event.objects.filter(route_state=RouteState.UNROUTED, seq__gt=after[0])
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


def unbroken(window: list[EventSnapshot], *, owner: str, now: datetime) -> list[EventSnapshot]:
    """``window`` up to the first unrouted Event inside its span that it does not hold and that
    another loop holds or no pass has decided: one the claim passed over (held, or locked by a
    commit that is settling it or giving it back). Events decided for now (backing off,
    waiting behind earlier input) do not break the run: the commit orders the window behind them
    by their targets. The rows after the cut were locked, never claimed: they stay free."""
    if len(window) < 2:
        return window
    seqs = [event.seq for event in window]
    if consecutive(seqs):
        # No Event lies inside the span outside the window, so nothing can break it (the
        # usual window of a backlog; the read below cost about 0.4 ms a window of 500 on SQLite).
        return window
    cut = _CUT.rows([seqs[0]], [seqs[-1]], seqs, [now], [owner])
    if not cut:
        return window
    return [event for event in window if event.seq < cut[0][0]]


def consecutive(seqs: list[int]) -> bool:
    """Whether ``seqs`` (not empty) are every seq from the least to the greatest: no Event lies
    inside their span but theirs."""
    return max(seqs) - min(seqs) + 1 == len(set(seqs))


def _cut_query(first: list[int], last: list[int], window: list[int], now: list[datetime], owner: list[str]):
    """The first unrouted Event strictly between ``first`` and ``last`` outside ``window`` that
    no pass has decided, or that a loop other than ``owner`` holds at ``now``."""
    return (
        Event.objects.filter(route_state=RouteState.UNROUTED, seq__gt=first[0], seq__lt=last[0])
        .exclude(seq__in=Listed(window))
        .filter(undecided_or_held_elsewhere(owner=owner[0], now=now[0]))
        .order_by("seq")
        .values_list("seq")[:1]
    )


# Read on every claim of more than one Event: built and compiled once per shape (CompiledOnce).
_CUT = CompiledOnce(_cut_query)


def publish_targets(
    *,
    owner: str,
    untils: Sequence[datetime],
    decided: Mapping[int, tuple[Sequence[str], int | None] | tuple[Sequence[str], int | None, str]],
    clock: Clock,
) -> None:
    """Publish, for the Events ``owner`` claimed until one of ``untils``, what each Event's route
    decided beyond its explicit targets (``decided``: seq -> (keys, Work id[, the rate limit's
    counter it would count in, routing.engine.ratelimit]); an Event whose routes decided none
    is left out). Another loop's commit then knows what these Events
    touch before they commit, and commits its own later Events that share none of it beside
    this window instead of after it (:func:`published_targets`). A lease: it need not survive
    a power loss (it only matters while the claim does)."""
    value = {
        "untils": [until.timestamp() for until in untils],
        "events": {str(seq): [list(entry[0]), *entry[1:]] for seq, entry in decided.items()},
    }
    with lease_transaction():
        kv_replace(namespace=TARGETS_NAMESPACE, key=owner, value=value, clock=clock)


def published_targets(
    held: Iterable[tuple[int, str, datetime | None]],
) -> dict[int, tuple[list[str], int | None, str]]:
    """What the routes of Events other loops hold decided, as published: ``held`` is (seq,
    claimed_by, claimed_until) of each. An Event is known only when its holder published for
    the very claim it holds (its ``claimed_until`` among the publication's): a publication of an earlier claim says
    nothing about this one. Returns seq -> (decided keys, decided Work id, rate limit counter or
    ""), an Event whose routes decided nothing beyond its explicit targets mapping to
    ``([], None, "")``."""
    held = list(held)
    if not held:
        return {}
    owners = sorted({claimed_by for _, claimed_by, _ in held})
    publications = dict(
        KV.objects.filter(namespace=TARGETS_NAMESPACE, key__in=owners).values_list("key", "value")
    )
    known: dict[int, tuple[list[str], int | None, str]] = {}
    for seq, claimed_by, claimed_until in held:
        publication = publications.get(claimed_by)
        if (
            publication is None
            or claimed_until is None
            or claimed_until.timestamp() not in publication["untils"]
        ):
            continue
        keys, work_id, *counter = publication["events"].get(str(seq), ((), None))
        known[seq] = (list(keys), work_id, counter[0] if counter else "")
    return known


def forget_stale_targets(now: datetime, *, older_than: timedelta = timedelta(hours=1)) -> int:
    """Forget the published targets not replaced for ``older_than``: those of loops that ended
    without withdrawing them (killed, crashed). A publication only matters while the claim it
    describes lasts; a live loop publishes again at its next pass. Returns how many went."""
    deleted, _ = KV.objects.filter(namespace=TARGETS_NAMESPACE, updated_at__lt=now - older_than).delete()
    return deleted


def withdraw_targets(owner: str) -> None:
    """Forget ``owner``'s published targets (a route loop that stops)."""
    KV.objects.filter(namespace=TARGETS_NAMESPACE, key=owner).delete()
