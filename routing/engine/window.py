"""A window settled: its Events' settlements, in acceptance order, on the world read now.

:func:`settle_window` is the step the route commit and trace share (R39). The commit wraps it
in its transaction and writes what it returns (:meth:`routing.engine.router.Router.route_pending`);
trace wraps it in a read snapshot and only shows it (:meth:`~routing.engine.router.Router.simulate`).
It writes nothing itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from causal.limits import Causal
from causal.models import Event, RouteState
from infra.queries import CompiledOnce, Listed
from routing.config.effective import Configuration
from routing.engine.coordination import EarlierClaimed
from routing.engine.evaluate import Evaluation
from routing.engine.failures import failures_read
from routing.engine.options import RouterOptions
from routing.engine.ratelimit import RateLedger, read_rate_limits
from routing.engine.settle import RouteOutcome, Settlement, Settler
from routing.engine.world import (
    UNKNOWN_AND_UNHELD,
    UNKNOWN_TARGETS,
    BridgeVerdicts,
    SnapshotReads,
    outside_blockers,
    read_world,
)
from routing.extension import EventSnapshot
from worklife.pauses import active_pauses, route_holds

# The window's route states and the earlier Events they wait behind, read in every commit:
# built and compiled once per shape.
_STATES = CompiledOnce(
    lambda seqs: Event.objects.filter(seq__in=Listed(seqs)).values_list("seq", "route_state", "waiting_on")
)
# The same with the Events' acceptance times, which rate limits count by (read only when a route
# of the configuration declares one).
_STATES_ACCEPTED = CompiledOnce(
    lambda seqs: Event.objects.filter(seq__in=Listed(seqs)).values_list(
        "seq", "route_state", "waiting_on", "accepted_at"
    )
)


@dataclass
class SettledWindow:
    """What :func:`settle_window` found: each Event's outcome in window order (a
    :class:`Settlement` for each it settled or left with a reason, a :class:`RouteOutcome` for
    one decided elsewhere or given back), what to write, and what it met."""

    outcomes: list[RouteOutcome | Settlement] = field(default_factory=list)
    # (Event, its settlement, its evaluation: None when backing off), in acceptance order.
    settled: list[tuple[EventSnapshot, Settlement, Evaluation | None]] = field(default_factory=list)
    # The Events after another loop's uncommitted claim: given back, not this pass.
    released: list[int] = field(default_factory=list)
    # The window's Events that waited behind an earlier one when read.
    waiting: set[int] = field(default_factory=set)
    # Whether another route loop's claims were met (it is about).
    met_other_loop: bool = False
    # (counter, seq, accepted at) of each Event a route with a rate limit took (RateLimitTake).
    rate_takes: list[list] = field(default_factory=list)


def settle_window(
    window: list[EventSnapshot],
    evaluations: Mapping[int, Evaluation],
    backing_off: set[int],
    *,
    now: datetime,
    configuration: Configuration,
    options: RouterOptions,
    causal: Causal,
    owner: str,
    honour_claims: bool,
    in_flight: dict[tuple, int] | None = None,
    hypothetical: bool = False,
    memo: SnapshotReads | None = None,
    replay: tuple[RateLedger, datetime] | None = None,
) -> SettledWindow:
    """Settle ``window`` in acceptance order on the world read now, writing nothing.

    ``honour_claims``: other loops' claims count (a route loop's window); ``in_flight``: the
    targets of earlier Events committing beside this window (PostgreSQL), filled as read.
    ``hypothetical``: an Event of the window not accepted yet is a trace's (a root of its own,
    no failures), and ``memo`` may remember world reads for later traces. ``replay`` (a
    ledger, a time): the Event not accepted yet counts as accepted at that time, and rate limits
    count and record takes in the ledger (an impact preview's replay). Raises
    :class:`~routing.engine.coordination.EarlierClaimed` when an earlier Event whose targets are
    not known yet comes before the whole window."""
    result = SettledWindow()
    seqs = [e.seq for e in window]
    rate_limited = configuration.rate_limited
    rows = _STATES_ACCEPTED.rows(seqs) if rate_limited else _STATES.rows(seqs)
    states = {row[0]: row[1] for row in rows}
    absent = {seq for seq in seqs if seq not in states} if hypothetical else set()
    states.update(dict.fromkeys(absent, RouteState.UNROUTED))
    result.waiting = {row[0] for row in rows if row[2] is not None}
    still = {seq for seq, state in states.items() if state == RouteState.UNROUTED}
    events = [e for e in window if e.seq in still]
    # The failures as they are now: an operator's reroute may have forgotten an Event's
    # failures while its handlers ran, and counting on the stale read undoes it.
    failures = failures_read(still - absent)
    world = read_world(events, evaluations, now, memo)
    blocked = outside_blockers(
        events,
        world,
        honour_claims=honour_claims,
        now=now,
        evaluations=evaluations,
        owner=owner,
        in_flight=in_flight,
    )
    unknown = blocked.pop(UNKNOWN_TARGETS, None)
    unheld = blocked.pop(UNKNOWN_AND_UNHELD, None)
    result.met_other_loop = bool(in_flight) or (unknown is not None and unknown != unheld)
    if unknown is not None and not any(e.seq < unknown for e in events):
        raise EarlierClaimed(unknown, orphaned=unknown == unheld)
    rate_limits = None
    if rate_limited:
        # A trace's Event not accepted yet would be accepted now (a replay's: when it was).
        ledger, at = replay if replay is not None else (None, now)
        accepted = {row[0]: row[3] for row in rows} | dict.fromkeys(absent, at)
        rate_limits = read_rate_limits(events, evaluations, accepted, ledger)
    settler = Settler(
        route_holds=route_holds(active_pauses(now)),
        world=world,
        blocked=blocked,
        configuration=configuration,
        options=options,
        failures=failures,
        limits=BridgeVerdicts(causal, hypothetical=absent),
        in_flight=in_flight,
        rate_limits=rate_limits,
    )
    for event in window:
        if event.seq not in still:
            result.outcomes.append(
                RouteOutcome(event.seq, states.get(event.seq, RouteState.ROUTED), reason="decided elsewhere")
            )
            continue
        if unknown is not None and event.seq > unknown:
            # After another loop's uncommitted claim: not this pass (acceptance order).
            result.released.append(event.seq)
            result.outcomes.append(RouteOutcome(event.seq, RouteState.UNROUTED, reason="retry"))
            continue
        evaluation = None if event.seq in backing_off else evaluations[event.seq]
        settlement = settler.settle(event, evaluation)
        result.settled.append((event, settlement, evaluation))
        result.outcomes.append(settlement)
    if rate_limits is not None:
        result.rate_takes = rate_limits.takes
        if replay is not None:
            replay[0].record(take for take in rate_limits.takes if take[1] in absent)
    return result
