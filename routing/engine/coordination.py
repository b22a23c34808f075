"""Coordination with other route loops (PostgreSQL): what a loop tells the others before it
commits beside them, how it learns they are about, how it waits for an earlier commit beside
its own, and the Events it carries into its next pass meanwhile (see :mod:`routing.engine.router`)."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Collection, Mapping
from datetime import datetime, timedelta

from django.db import connection

from causal.clock import Clock
from causal.models import Event, RouteState
from infra.frozen import frozen
from infra.queries import Listed
from routing.engine.claims import held_elsewhere, publish_targets
from routing.engine.evaluate import Evaluation
from routing.engine.heartbeat import other_loops_alive
from routing.engine.options import RouterOptions
from routing.engine.ratelimit import counter_of
from routing.engine.settle import RouteOutcome
from routing.extension import EventSnapshot

# Never set: waiting on it is a sleep that a signal handler's exit can interrupt.
INTERRUPTIBLE_SLEEP = threading.Event()

# How often a route loop looks for other loops' heartbeats, and how long one counts as about.
_LOOK_FOR_LOOPS = 0.25
_OTHER_LOOP_FRESH = timedelta(seconds=10)


@frozen
class Carried:
    """An Event a pass left for after an earlier Event's commit beside it (``behind``), with
    its evaluation (``None``: backing off), the end of the claim it was taken with and when it
    was first left (``time.monotonic``)."""

    event: EventSnapshot
    evaluation: Evaluation | None
    behind: int
    until: datetime
    since: float


class EarlierClaimed(Exception):
    """Earlier Events whose targets are not known yet (another live loop holds them, or no
    pass has decided them) come before this whole window."""

    def __init__(self, seq: int, *, orphaned: bool) -> None:
        super().__init__(seq)
        self.seq = seq
        self.orphaned = orphaned


class Coordination:
    """One route loop's view of the others: whether it commits beside them, whether any is
    about, what it publishes to them, and the Events it carries to its next pass."""

    def __init__(self, *, owner: str, clock: Clock, options: RouterOptions) -> None:
        self.owner = owner
        self.clock = clock
        self.options = options
        # Events a pass left for after an earlier Event's commit beside it, settled in the
        # next pass on the evaluations they had: seq -> what is kept of them.
        self.carried: dict[int, Carried] = {}
        # Publishing what a window's routes decided costs a write a pass: done only while
        # another route loop is about (a fresh heartbeat, or its claims met in a commit),
        # until this time.monotonic(); heartbeats are looked at every _LOOK_FOR_LOOPS.
        self._publish_until = 0.0
        self._looked_for_loops = -math.inf

    def take_carried(self) -> dict[int, Carried]:
        """The Events carried into this pass (none are carried after it unless it carries them)."""
        carried, self.carried = self.carried, {}
        return carried

    @staticmethod
    def beside(honour_claims: bool) -> bool:
        """Whether this pass commits beside other route loops' commits (see the router's
        module): a claimed window on PostgreSQL, in a transaction of its own."""
        return honour_claims and connection.vendor == "postgresql" and not connection.in_atomic_block

    def other_loops(self) -> bool:
        """Whether another route loop is about: one wrote its heartbeat lately, or a commit of
        this loop met its claims (:meth:`met_other_loop`)."""
        now = time.monotonic()
        if now - self._looked_for_loops >= _LOOK_FOR_LOOPS:
            self._looked_for_loops = now
            if other_loops_alive(owner=self.owner, now=self.clock(), within=_OTHER_LOOP_FRESH):
                self._publish_until = now + _OTHER_LOOP_FRESH.total_seconds()
        return now < self._publish_until

    def met_other_loop(self) -> None:
        """A commit met another loop's claims: it is about."""
        self._publish_until = time.monotonic() + _OTHER_LOOP_FRESH.total_seconds()

    def publish(
        self,
        window: list[EventSnapshot],
        evaluations: Mapping[int, Evaluation],
        backing_off: set[int],
        carried: Mapping[int, Carried],
        claimed_until: datetime | None,
    ) -> None:
        """Tell other loops' commits what this claimed window's routes decided before it
        commits: they commit their later Events that share none of it beside this window
        meanwhile. Carried Events keep the claim they were taken with."""
        if claimed_until is None:
            return
        untils = sorted({claimed_until, *(c.until for c in carried.values())})
        decided = {}
        for event in window:
            evaluation = None if event.seq in backing_off else evaluations.get(event.seq)
            if evaluation is None or evaluation.decision is None:
                continue
            decision = evaluation.decision
            keys = [k for k in decision.keys if k not in event.correlation]
            route = evaluation.route
            if route is not None and route.rate_limit is not None:
                # The counter it would count in: other loops' later Events counting in it
                # commit after this one (each sees the takes before it).
                decided[event.seq] = (keys, decision.work_id, counter_of(route, event)[0])
            elif keys or decision.work_id is not None:
                decided[event.seq] = (keys, decision.work_id)
        publish_targets(owner=self.owner, untils=untils, decided=decided, clock=self.clock)

    def carry(
        self,
        pending: list[EventSnapshot],
        beside: Mapping[int, RouteOutcome],
        carried: Mapping[int, Carried],
        evaluations: Mapping[int, Evaluation],
        backing_off: set[int],
        claimed_until: datetime | None,
    ) -> bool:
        """Carry ``pending`` (each left ``beside`` an earlier commit) into the next pass, with
        their evaluations; ``False``, carrying none, when one was first left too long ago
        (its claim may lapse before the next pass ends)."""
        now = time.monotonic()
        kept = {}
        for event in pending:
            before = carried.get(event.seq)
            since = before.since if before is not None else now
            if now - since >= self.options.claim_seconds / 4:
                return False
            kept[event.seq] = Carried(
                event,
                None if event.seq in backing_off else evaluations[event.seq],
                beside[event.seq].waiting_on,
                before.until if before is not None else claimed_until,
                since,
            )
        self.carried.update(kept)
        return True

    def await_commits(self, seqs: Collection[int], wait_until: float) -> bool:
        """Wait until one of ``seqs`` is no longer an unrouted Event another live loop holds
        (its commit beside this loop's is over): the Events waiting behind it may settle now.
        Not until all of them are: a loop holding one of them may be waiting, in turn, for an
        Event this loop carries. ``False`` when ``wait_until`` passes first."""
        count = len(seqs)
        seqs = Listed(seqs)
        while True:
            now = self.clock()
            rows = Event.objects.filter(seq__in=seqs, route_state=RouteState.UNROUTED).values_list(
                "claimed_by", "claimed_until"
            )
            held = sum(held_elsewhere(by, until, owner=self.owner, now=now) for by, until in rows)
            if held < count:
                return True
            if time.monotonic() > wait_until:
                return False
            INTERRUPTIBLE_SLEEP.wait(0.005)
