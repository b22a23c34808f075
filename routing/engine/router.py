"""The router: accepted Events, in acceptance order, into Work.

A pass takes a *window* of unrouted Events (the oldest ones, or one Event and the earlier
input it must wait behind), then:

1. **Evaluate** each Event's routes on the handler pool, outside any transaction, on a
   detached snapshot, each call under the deadline (R5, R12). Evaluation depends only on the
   Event and the configuration generation, never on Work state.
2. **Commit** in one transaction: check the generation is still live, read the world the
   decisions need (key owners, Work, attempts, waits, earlier unrouted input), decide each
   Event in acceptance order with :func:`routing.engine.decide.decide` (the same code trace calls),
   mirror each decision into the in-memory world so later Events of the window see it, and
   write every effect with set-based statements. Because the decision is computed from state
   read inside the commit, the snapshot it assumes is the one committed (R7); a changed
   generation discards the window and evaluates again.

Ordering (I3, I4): an Event that shares a target (an explicit key, its Work) with an earlier
unrouted Event waits behind it, and so does everything after it on that target. A uniqueness
violation (another process owns the key first) rolls the window back and the pass is tried
again (bounded): ownership comes from the database constraint, never from a check.

Several route loops (PostgreSQL): each claims its window with ``FOR UPDATE SKIP LOCKED`` and
a short lease, asks its routes, then publishes what each Event's routes decided (keys, a Work:
:func:`~routing.engine.claims.publish_targets`) before it commits. Commits run side by side,
each in one REPEATABLE READ snapshot under the commit lock taken shared (operator controls and
single Events' routes take it alone). Why each target keeps acceptance order:

- a commit settles an Event only when no earlier unrouted Event it sees shares one of its
  targets, resolved in its snapshot (keys to their owner Work). An earlier Event another live
  loop holds counts by the targets its loop published: one sharing a target with the Event is
  being committed beside this window, so the Event is left unwritten (``BESIDE``), with every
  later Event of the window sharing a target with it, and settled by this loop, on the same
  evaluation, once that commit is over. An earlier Event whose targets are not published
  (or that no pass has decided) stops everything after it, as before;
- whatever an earlier Event will touch is a target it published or one it had at acceptance,
  or a Work reached through a key it will attach; that key is a target it published, and the
  Work is reached through a key owned in the snapshot, so it is a target of the later Event too;
- two commits that write one row anyway (a Work's version, a wait, the causal limits' counts)
  cannot both succeed: PostgreSQL refuses the later writer (40001) and a key taken twice breaks
  its unique constraint; either retries the pass on a fresh snapshot;
- a wake through a dependency subscription names no target of the woken Work: it waits behind
  any earlier Event committing beside it.

``bench/route_history.py`` checks the outcome run after run (nothing lost or duplicated, each
Work's input and each key's records in acceptance order). On SQLite, ``BEGIN IMMEDIATE``
serialises writers.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, InterfaceError, OperationalError, connection
from django.db.models import Q

from causal.clock import Clock
from causal.limits import Causal, CausalRefused, derived_atomic
from causal.models import Event, RouteState
from infra.frozen import frozen
from infra.identity import loop_identity
from infra.queries import CompiledOnce, Listed
from infra.snapshots import read_snapshot
from routing.config.effective import Configuration, EffectiveScope
from routing.config.selectors import live_generation, live_generation_id, load_configuration
from routing.engine.claims import (
    COMMIT_LOCK_ID,
    claim_window,
    held_elsewhere,
    publish_targets,
    withdraw_targets,
)
from routing.engine.evaluate import (
    Evaluation,
    RouteVerdict,
    UnreadableSnapshot,
    Verdict,
    evaluate,
    panic,
    snapshots_isolated,
)
from routing.engine.failures import (
    failures_read,
)
from routing.engine.handler_pool import CallOutcome, HandlerPool, PoolExhausted
from routing.engine.heartbeat import other_loops_alive
from routing.engine.logs import log_decided, log_decided_enabled
from routing.engine.options import RouterOptions
from routing.engine.settle import BESIDE, CONFLICT_RECHECK, RouteOutcome, Settlement, Settler
from routing.engine.world import (
    _FOREIGN,
    _ORPHAN,
    BridgeVerdicts,
    SnapshotReads,
    explicit_tokens,
    outside_blockers,
    read_world,
)
from routing.engine.writes import Writes
from routing.errors import RouteError, RouteErrorCode
from routing.extension import EventSnapshot
from routing.models import Generation, RouteRecord

logger = logging.getLogger("conduit.routing")


_PAUSE = threading.Event()  # never set: a wait that a signal handler's exit can interrupt


@frozen
class _Carried:
    """An Event a pass left for after an earlier Event's commit beside it (``behind``), with
    its evaluation (``None``: backing off), the end of the claim it was taken with and when it
    was first left (``time.monotonic``)."""

    event: EventSnapshot
    evaluation: Evaluation | None
    behind: int
    until: datetime
    since: float


class _Asking:
    """A window's routes being asked (:meth:`Router._ask`): the Events backing off, the
    evaluations known without asking, and the handler pool's answers, waited for by
    :meth:`result`."""

    def __init__(
        self,
        evaluations: dict[int, Evaluation],
        backing_off: set[int],
        answers: Callable[[], dict[int, Evaluation]],
    ) -> None:
        self._evaluations = evaluations
        self._backing_off = backing_off
        self._answers: Callable[[], dict[int, Evaluation]] | None = answers

    def result(self) -> tuple[dict[int, Evaluation], set[int]]:
        if self._answers is not None:
            self._evaluations.update(self._answers())
            self._answers = None
        return self._evaluations, self._backing_off


class _Ahead:
    """The next window, claimed before a pass's commit (:meth:`Router.route_pending`), and
    its routes' answers once asked."""

    def __init__(self, window: list[EventSnapshot], ask: Callable[[list[EventSnapshot]], _Asking]) -> None:
        self.window = window
        self.asked: _Asking | None = None
        self._ask = ask

    def ask(self) -> None:
        """Ask the window's routes (once: a retried commit calls this again)."""
        if self.asked is None:
            self.asked = self._ask(self.window)


class _EarlierClaimed(Exception):
    """Earlier Events whose targets are not known yet (another live loop holds them, or no
    pass has decided them) come before this whole window."""

    def __init__(self, seq: int, *, orphaned: bool) -> None:
        super().__init__(seq)
        self.seq = seq
        self.orphaned = orphaned


class GenerationChanged(RuntimeError):
    """A newer configuration generation was applied: the router must be rebuilt."""


class Router:
    """Routes Events with one configuration generation (R1, R4).

    ``handlers`` maps handler names to classes (or factories); each is instantiated once for
    this generation. ``executors`` maps executor registrations to implementation classes; it
    is only read (the router makes no execution or control calls, R33). Maps are copied here:
    a caller mutating its dict afterwards changes nothing.
    """

    def __init__(
        self,
        *,
        clock: Clock,
        generation: Generation,
        handlers: Mapping[str, Callable[[], Any]],
        executors: Mapping[str, type] | None = None,
        options: RouterOptions | None = None,
        pool: HandlerPool | None = None,
        owner: str | None = None,
    ) -> None:
        self.clock = clock
        self.generation = generation
        self.options = options or RouterOptions()
        self.handler_classes = dict(handlers)
        self.executors = dict(executors or {})
        self.handlers: dict[str, Any] = {name: factory() for name, factory in self.handler_classes.items()}
        self.configuration: Configuration = load_configuration(generation)
        self._own_pool = pool is None
        self.pool = pool or HandlerPool(
            workers=self.options.workers, max_abandoned=self.options.max_abandoned
        )
        self.owner = owner or loop_identity()
        self.causal = Causal(clock)
        self.last_window: tuple[int, ...] = ()  # the Events of the latest pass (doctor names them)
        self._claimed_until: datetime | None = None  # the latest claim's end (claim_window)
        # Events a pass left for after an earlier Event's commit beside it (BESIDE), settled in
        # the next pass on the evaluations they had: seq -> what is kept of them.
        self._carried: dict[int, _Carried] = {}
        # The next window, claimed before this pass's commit, its routes asked while the
        # commit's own transaction ends (a commit alone, with a backlog: see route_pending).
        self._ahead: _Ahead | None = None
        # Publishing what a window's routes decided costs a write a pass: done only while
        # another route loop is about (a fresh heartbeat, or its claims met in a commit),
        # until this time.monotonic(); heartbeats are looked at every _LOOK_FOR_LOOPS.
        self._publish_until = 0.0
        self._looked_for_loops = -math.inf

    # -- public API ---------------------------------------------------------------------
    def route(self, seq: int) -> RouteOutcome:
        """Route one Event (R5): first the earlier unrouted input it must wait behind, then it.

        Within a retryable failure's backoff the failure is returned with its backoff and the
        handler is not called (R14)."""
        event = Event.objects.filter(seq=seq).defer("data").first()
        if event is None:
            raise Event.DoesNotExist(f"no Event #{seq}")
        if event.is_settled:
            return self._settled_outcome(event)
        window = self.window_for(snapshots_isolated(Event.objects.filter(seq=seq))[0])
        mine = None
        retries = 0
        while True:
            outcomes = self._pass_isolated(window, honour_claims=False)
            mine = next((o for o in outcomes if o.seq == seq), None)
            if mine is None or mine.settled:
                break
            present = {e.seq for e in window}
            behind = mine.waiting_on
            if behind is not None and behind not in present and len(window) < self.options.batch_size:
                # Earlier input the Event waits behind (known only once its route decided its
                # keys) joins the call, in acceptance order (R17, R25).
                window = sorted(
                    [*window, *snapshots_isolated(Event.objects.filter(seq=behind))], key=lambda e: e.seq
                )
                continue
            if mine.reason == "retry" and retries < self.options.max_retries:
                retries += 1
                continue
            break
        return mine or RouteOutcome(seq, RouteState.UNROUTED, reason="retry")

    def route_pending(self, *, limit: int | None = None, claim_ahead: bool = True) -> list[RouteOutcome]:
        """One pass over the oldest routable Events (the route loop's step).

        A commit alone (SQLite, where ``BEGIN IMMEDIATE`` serialises writers) with a full
        window, a backlog, is pipelined: the pass claims the next window before its commit and
        the handler pool asks that window's routes while the commit's transaction ends (the
        database makes the commit durable without holding the interpreter, so the two run at
        once). The next pass commits that window on those evaluations. Evaluation depends only
        on the Event and the generation, never on what a commit wrote (see the module), and the
        next window's commit reads its world and orders its Events behind any earlier unrouted
        input as every commit does. ``claim_ahead=False``: no window is claimed ahead (a last pass)."""
        self.last_window = ()
        size = limit or self.options.batch_size
        carried, self._carried = self._carried, {}
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            window = ahead.window
        else:
            window = self.claim_window(size, held=carried)
        if carried:
            if not window:
                # Nothing new: wait for the commits the carried Events wait for, not a pass a
                # moment until they are over.
                self._await_commits({c.behind for c in carried.values()}, time.monotonic() + 1.0)
            window = sorted([*(c.event for c in carried.values()), *window], key=lambda e: e.seq)
        self.last_window = tuple(e.seq for e in window)
        if not window:
            return []
        following: _Ahead | None = None
        if claim_ahead and len(window) >= size and not carried and not self._beside(True):
            following = _Ahead(self.claim_window(size, after=window[-1].seq), self._ask)
            if not following.window:
                following = None
        outcomes: list[RouteOutcome] | None = None
        try:
            outcomes = self._pass_isolated(
                window,
                honour_claims=True,
                carried=carried,
                asked=ahead.asked if ahead is not None else None,
                then=following.ask if following is not None else None,
            )
        finally:
            if following is not None:
                if outcomes is None or any(o.reason == "retry" for o in outcomes):
                    # The pass failed, or gave Events back undecided: the next claim starts
                    # at the oldest unrouted Event.
                    self._give_back(following)
                else:
                    if following.asked is not None:
                        # Wait for the workers now: each of the loop's next statements would
                        # wait for the interpreter while they run.
                        following.asked.result()
                    self._ahead = following
        return outcomes

    def _give_back(self, ahead: _Ahead) -> None:
        """Give back a window claimed ahead (its routes' answers, if asked, are dropped)."""
        if ahead.asked is not None:
            ahead.asked.result()
        self._release([e.seq for e in ahead.window])

    def _release(self, seqs: Collection[int]) -> None:
        """Give back this loop's claims on ``seqs``: the next claim may take them."""
        Event.objects.filter(seq__in=Listed(seqs), claimed_by=self.owner).update(
            claimed_by="", claimed_until=None
        )

    def claim_window(self, limit: int, *, held: Collection[int] = (), after: int = 0) -> list[EventSnapshot]:
        """Claim the oldest unrouted Events that are not backing off or held by another loop
        (``held``: this loop's Events that the window counts, not claimed again; ``after``:
        only Events after this seq)."""
        now = self.clock()
        self._claimed_until = now + timedelta(seconds=self.options.claim_seconds)
        return claim_window(
            owner=self.owner,
            now=now,
            limit=limit,
            claim_seconds=self.options.claim_seconds,
            until=self._claimed_until,
            held=held,
            after=after,
        )

    def close(self) -> None:
        if self._ahead is not None:
            self._give_back(self._ahead)
            self._ahead = None
        if self._own_pool:
            self.pool.close()
        if self._carried:
            self._release(self._carried)
            self._carried = {}
        if self._claimed_until is not None and connection.vendor == "postgresql":
            withdraw_targets(self.owner)

    # -- trace: the same pass, nothing written (R39) --------------------------------------------
    def simulate(
        self,
        event: EventSnapshot,
        *,
        window: list[EventSnapshot] | None = None,
        memo: SnapshotReads | None = None,
        accepted: bool = True,
    ) -> tuple[Settlement, Evaluation | None]:
        """What :meth:`route` would do with ``event`` now, writing nothing: the same window (the
        earlier unrouted input it must wait behind), the same evaluation (an Event backing off
        is not asked about) and the same settlement. ``event`` may be a hypothetical Event not
        accepted yet (a trace's), last in acceptance order. Returns its settlement and its
        evaluation (``None`` when its handlers were not asked).

        For a run of traces in one read snapshot: ``window`` is :meth:`window_for` the Event
        when the caller has read it already, ``memo`` remembers world reads for the next
        trace, and ``accepted=False`` says the Event is hypothetical (it has no failures to
        read)."""
        window = list(window) if window is not None else self.window_for(event)
        while True:
            outcomes, evaluations = self._pass_dry(
                window, memo=memo, absent=frozenset() if accepted else frozenset({event.seq})
            )
            mine = next(o for o in outcomes if o.seq == event.seq)
            present = {e.seq for e in window}
            behind = mine.waiting_on
            if behind is not None and behind not in present and len(window) < self.options.batch_size:
                window = sorted(
                    [*window, *snapshots_isolated(Event.objects.filter(seq=behind))], key=lambda e: e.seq
                )
                continue
            return mine.settlement or Settlement(event.seq, mine.state, reason=mine.reason), evaluations.get(
                event.seq
            )

    def evaluate_one(self, event: EventSnapshot) -> Evaluation:
        """Ask the routes about one Event on the handler pool, under the deadline (the impact
        preview compares what configurations answer before tracing)."""
        return self._evaluate([event])[event.seq]

    def _pass_dry(
        self, window: list[EventSnapshot], *, memo: SnapshotReads | None, absent: frozenset[int]
    ) -> tuple[list[RouteOutcome], dict[int, Evaluation]]:
        evaluations, backing_off = self._evaluate_window(window, absent=absent)
        outcomes = self._commit(window, evaluations, backing_off, honour_claims=False, dry=True, memo=memo)
        return outcomes, evaluations

    # -- windows --------------------------------------------------------------------------
    def window_for(self, event: EventSnapshot) -> list[EventSnapshot]:
        """The Event and the earlier unrouted Events that share an explicit target with it
        (R17, R25), or that no pass has decided yet (their targets are not known: one may win
        the same wait, R41): they route first, in acceptance order, as the route loop's window
        would route them."""
        tokens = explicit_tokens([event])
        earlier = snapshots_isolated(
            Event.objects.filter(route_state=RouteState.UNROUTED, seq__lt=event.seq)
            .filter(
                Q(keys__scope=event.scope, keys__key__in=list(event.correlation))
                | Q(work_id__in=[t[1] for t in tokens if t[0] == "work"])
                | Q(unrouted_reason="", retry_at__isnull=True)
            )
            .distinct()
            .order_by("seq")[: self.options.batch_size]
        )
        return [*earlier, event]

    # -- a pass ---------------------------------------------------------------------------
    def _pass_isolated(
        self,
        window: list[EventSnapshot],
        *,
        honour_claims: bool,
        carried: Mapping[int, _Carried] | None = None,
        asked: _Asking | None = None,
        then: Callable[[], None] | None = None,
    ) -> list[RouteOutcome]:
        """A pass that no single Event's content can fail: when the window's pass raises
        something unexpected, its Events are routed one by one, in acceptance order, and an
        Event whose own pass still raises is given up on with a ``handler_panic`` carrying
        the exception and its stack (dead-lettered, R16). The database being unavailable and
        a new generation are not an Event's doing: they still end the pass."""
        try:
            return self._pass(window, honour_claims=honour_claims, carried=carried, asked=asked, then=then)
        except (GenerationChanged, OperationalError, InterfaceError):
            raise
        except Exception as exc:  # noqa: BLE001 - isolated below, one Event at a time
            if len(window) == 1:
                return [self._give_up_unexpected(window[0], exc, honour_claims=honour_claims)]
        outcomes: list[RouteOutcome] = []
        for event in window:
            outcomes.extend(self._pass_isolated([event], honour_claims=honour_claims, carried=carried))
        return outcomes

    def _give_up_unexpected(
        self, event: EventSnapshot, exc: Exception, *, honour_claims: bool
    ) -> RouteOutcome:
        error = panic(exc, "routing this Event failed unexpectedly")
        evaluation = Evaluation((), error=error)
        try:
            return self._commit([event], {event.seq: evaluation}, set(), honour_claims=honour_claims)[0]
        except (GenerationChanged, OperationalError, InterfaceError):
            raise
        except Exception:  # noqa: BLE001 - not even its failure commits: leave it unrouted, with why
            logger.exception("route.event_failed", extra={"event": event.seq})
            # A reason and a later retry: it is decided-for-now, so later Events of other targets
            # route past it while those of its own targets wait behind it (I4).
            reason = f"routing failed unexpectedly: {error.message}"[:1000]
            Event.objects.filter(seq=event.seq, route_state=RouteState.UNROUTED).update(
                unrouted_reason=reason,
                retry_at=self.clock() + CONFLICT_RECHECK,
                claimed_by="",
                claimed_until=None,
            )
            return RouteOutcome(event.seq, RouteState.UNROUTED, error=error, reason=reason)

    def _evaluate_window(
        self, window: list[EventSnapshot], *, absent: frozenset[int] = frozenset()
    ) -> tuple[dict[int, Evaluation], set[int]]:
        """Ask the routes about the window's Events, except those backing off (R14): their
        handlers are not called before the backoff ends. Returns the evaluations and the seqs
        backing off. Events in ``absent`` (a trace's hypothetical Event) have no failures."""
        return self._ask(window, absent=absent).result()

    def _ask(self, window: list[EventSnapshot], *, absent: frozenset[int] = frozenset()) -> _Asking:
        """:meth:`_evaluate_window` started on the handler pool: ``result()`` waits for it."""
        now = self.clock()
        failures = failures_read(e.seq for e in window if e.seq not in absent)
        evaluations: dict[int, Evaluation] = {}
        backing_off: set[int] = set()
        to_evaluate: list[EventSnapshot] = []
        for event in window:
            failure = failures.get(event.seq)
            if isinstance(event, UnreadableSnapshot):
                # Its routes cannot be asked about data that cannot be read: the error is its.
                evaluations[event.seq] = Evaluation((), error=event.error)
            elif failure is not None and failure.backing_off(now, self.configuration.label):
                backing_off.add(event.seq)
            else:
                to_evaluate.append(event)
        return _Asking(evaluations, backing_off, self._start_evaluate(to_evaluate))

    def _pass(
        self,
        window: list[EventSnapshot],
        *,
        honour_claims: bool,
        carried: Mapping[int, _Carried] | None = None,
        asked: _Asking | None = None,
        then: Callable[[], None] | None = None,
    ) -> list[RouteOutcome]:
        """``asked``: the window's routes, asked already (a window claimed ahead). ``then``:
        called once the window's writes are made, before its transaction ends."""
        # Carried Events keep their evaluations; one that was backing off is looked at again
        # (an operator may have forgotten its failures meanwhile, R22).
        seqs = {e.seq for e in window}
        carried = {seq: c for seq, c in (carried or {}).items() if seq in seqs}
        kept_evaluations = {seq: c.evaluation for seq, c in carried.items() if c.evaluation is not None}
        if asked is None:
            asked = self._ask([e for e in window if e.seq not in kept_evaluations])
        evaluations, backing_off = asked.result()
        evaluations = {**evaluations, **kept_evaluations}
        if self._beside(honour_claims) and self._other_loops():
            self._publish(window, evaluations, backing_off, carried)
        done: dict[int, RouteOutcome] = {}
        pending = window
        attempt = 0
        wait_until = time.monotonic() + self.options.claim_seconds / 2
        while attempt <= self.options.max_retries:
            try:
                outcomes = self._commit(
                    pending, evaluations, backing_off, honour_claims=honour_claims, then=then
                )
            except (IntegrityError, CausalRefused, OperationalError) as exc:
                if isinstance(exc, OperationalError) and not _concurrent_update(exc):
                    raise
                # Another process took a key or decided an Event first, spent the causal
                # limits' tokens the settlement counted on, or (a commit beside this one)
                # changed a row this one read, which PostgreSQL refuses to write on a stale
                # read: read again and retry.
                attempt += 1
                logger.info("route.commit_retry", extra={"attempt": attempt, "sqlstate": _sqlstate(exc)})
                continue
            except _EarlierClaimed as earlier:
                # Earlier Events are undecided: this window commits after them (acceptance
                # order). When another loop holds them, wait for it; the evaluations stand.
                # When nobody does (a released or lapsed claim), give the window back at once:
                # the next claim starts at the oldest unrouted Event, so it routes first.
                if earlier.orphaned or time.monotonic() > wait_until:
                    break
                _PAUSE.wait(0.02)
                continue
            beside = {o.seq: o for o in outcomes if o.reason == BESIDE}
            done.update((o.seq, o) for o in outcomes if o.seq not in beside)
            if not beside:
                return [done[e.seq] for e in window]
            # Events sharing a target with an earlier Event another loop is committing beside
            # this window (only a commit beside others leaves any): settled once that commit
            # is over, on the same evaluations. In the loop's next pass, with its next window,
            # while their claim is young; else here, after waiting.
            pending = [e for e in pending if e.seq in beside]
            if self._carry(pending, beside, carried, evaluations, backing_off):
                done.update(beside)
                return [done[e.seq] for e in window]
            if not self._await_commits({o.waiting_on for o in beside.values()}, wait_until):
                break
        self._release([e.seq for e in window if e.seq not in done])
        return [done.get(e.seq) or RouteOutcome(e.seq, RouteState.UNROUTED, reason="retry") for e in window]

    def _carry(
        self,
        pending: list[EventSnapshot],
        beside: Mapping[int, RouteOutcome],
        carried: Mapping[int, _Carried],
        evaluations: Mapping[int, Evaluation],
        backing_off: set[int],
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
            kept[event.seq] = _Carried(
                event,
                None if event.seq in backing_off else evaluations[event.seq],
                beside[event.seq].waiting_on,
                before.until if before is not None else self._claimed_until,
                since,
            )
        self._carried.update(kept)
        return True

    def _beside(self, honour_claims: bool) -> bool:
        """Whether this pass commits beside other route loops' commits (see the module): a
        claimed window on PostgreSQL, in a transaction of its own."""
        return honour_claims and connection.vendor == "postgresql" and not connection.in_atomic_block

    def _other_loops(self) -> bool:
        """Whether another route loop is about: one wrote its heartbeat lately, or a commit of
        this loop met its claims (:meth:`_met_other_loop`)."""
        now = time.monotonic()
        if now - self._looked_for_loops >= _LOOK_FOR_LOOPS:
            self._looked_for_loops = now
            if other_loops_alive(owner=self.owner, now=self.clock(), within=_OTHER_LOOP_FRESH):
                self._publish_until = now + _OTHER_LOOP_FRESH.total_seconds()
        return now < self._publish_until

    def _met_other_loop(self) -> None:
        self._publish_until = time.monotonic() + _OTHER_LOOP_FRESH.total_seconds()

    def _publish(
        self,
        window: list[EventSnapshot],
        evaluations: Mapping[int, Evaluation],
        backing_off: set[int],
        carried: Mapping[int, _Carried],
    ) -> None:
        """Tell other loops' commits what this claimed window's routes decided before it
        commits (see the module): they commit their later Events that share none of it beside
        this window meanwhile. Carried Events keep the claim they were taken with."""
        if self._claimed_until is None:
            return
        untils = sorted({self._claimed_until, *(c.until for c in carried.values())})
        decided = {}
        for event in window:
            evaluation = None if event.seq in backing_off else evaluations.get(event.seq)
            if evaluation is None or evaluation.decision is None:
                continue
            decision = evaluation.decision
            keys = [k for k in decision.keys if k not in event.correlation]
            if keys or decision.work_id is not None:
                decided[event.seq] = (keys, decision.work_id)
        publish_targets(owner=self.owner, untils=untils, decided=decided, clock=self.clock)

    def _await_commits(self, seqs: Collection[int], wait_until: float) -> bool:
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
            _PAUSE.wait(0.005)

    def _evaluate(self, events: Sequence[EventSnapshot]) -> dict[int, Evaluation]:
        return self._start_evaluate(events)()

    def _start_evaluate(self, events: Sequence[EventSnapshot]) -> Callable[[], dict[int, Evaluation]]:
        """Ask the routes about ``events`` on the handler pool; the function returned waits
        for the answers and returns each Event's evaluation."""
        results: dict[int, Evaluation] = {}
        calls: list[Callable[[], Evaluation]] = []
        scoped: list[tuple[EventSnapshot, EffectiveScope]] = []
        for event in events:
            scope = self.configuration.scope(event.scope)
            if scope is None:
                # The scope left the configuration: no route can select the Event.
                results[event.seq] = Evaluation(())
                continue
            calls.append(lambda snap=event, scope=scope: evaluate(snap, scope, self.handlers))
            scoped.append((event, scope))
        if not calls:
            return lambda: results
        timeout = self.options.route_timeout
        try:
            started = self.pool.start_all(calls, timeout=timeout)
        except PoolExhausted as exc:
            exhausted = [CallOutcome(exception=exc) for _ in calls]
            started = None

        def answers() -> dict[int, Evaluation]:
            outcomes = exhausted if started is None else started.outcomes()
            for (event, scope), outcome in zip(scoped, outcomes, strict=True):
                results[event.seq] = _evaluation_from(outcome, scope, timeout)
            return results

        return answers

    def _commit(
        self,
        window: list[EventSnapshot],
        evaluations: Mapping[int, Evaluation],
        backing_off: set[int],
        *,
        honour_claims: bool,
        dry: bool = False,
        memo: SnapshotReads | None = None,
        then: Callable[[], None] | None = None,
    ) -> list[RouteOutcome]:
        """Settle the window in acceptance order on the world read now and write what the
        settlements say, all or nothing. ``dry`` (trace) reads in a read snapshot, writes
        nothing and checks no generation; an Event of the window not accepted yet is a
        trace's hypothetical Event, and ``memo`` may remember world reads for later traces.
        ``then`` is called after the writes, before the transaction ends (not when dry)."""
        # Beside other route loops' commits (PostgreSQL, a transaction of its own): in one
        # snapshot of the database, under the commit lock shared (operator controls take it
        # alone). Otherwise (a single Event's route, inside a caller's transaction) alone.
        beside = not dry and self._beside(honour_claims)
        in_flight: dict[tuple, int] | None = {} if beside else None
        # derived_atomic: a refused wake bridge's diagnostic survives whatever happens next.
        with read_snapshot() if dry else derived_atomic():
            if connection.vendor == "postgresql" and not dry:
                with connection.cursor() as cursor:
                    if beside:
                        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                        cursor.execute("SELECT pg_advisory_xact_lock_shared(%s)", [COMMIT_LOCK_ID])
                    else:
                        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [COMMIT_LOCK_ID])
            now = self.clock()
            if not dry:
                if live_generation_id() != self.generation.pk:
                    raise GenerationChanged(f"generation {self.configuration.label} is no longer live")
            seqs = [e.seq for e in window]
            rows = _STATES.rows(seqs)
            states = {seq: state for seq, state, _ in rows}
            hypothetical = {seq for seq in seqs if seq not in states} if dry else set()
            states.update(dict.fromkeys(hypothetical, RouteState.UNROUTED))
            still = {seq for seq, state in states.items() if state == RouteState.UNROUTED}
            events = [e for e in window if e.seq in still]
            # The failures as they are now: an operator's reroute may have forgotten an Event's
            # failures while its handlers ran, and counting on the stale read undoes it.
            failures = failures_read(still - hypothetical)
            world = read_world(events, evaluations, now, memo if dry else None)
            blocked = outside_blockers(
                events,
                world,
                honour_claims=honour_claims,
                now=now,
                evaluations=evaluations,
                owner=self.owner,
                in_flight=in_flight,
            )
            foreign = blocked.pop(_FOREIGN, None)
            orphan = blocked.pop(_ORPHAN, None)
            if beside and (in_flight or (foreign is not None and foreign != orphan)):
                self._met_other_loop()
            if foreign is not None and not any(e.seq < foreign for e in events):
                raise _EarlierClaimed(foreign, orphaned=foreign == orphan)
            settler = Settler(
                world=world,
                blocked=blocked,
                configuration=self.configuration,
                options=self.options,
                failures=failures,
                limits=BridgeVerdicts(self.causal, hypothetical=hypothetical),
                in_flight=in_flight,
            )
            writer = Writes(
                now=now,
                generation=self.configuration.label,
                causal=self.causal,
                waiting={seq for seq, _, behind in rows if behind is not None},
            )
            # Each Event's outcome, or its settlement until the commit has given the Work it
            # starts an id (the outcome is built once, after the writes).
            outcomes: list[RouteOutcome | Settlement] = []
            for event in window:
                if event.seq not in still:
                    outcomes.append(
                        RouteOutcome(
                            event.seq, states.get(event.seq, RouteState.ROUTED), reason="decided elsewhere"
                        )
                    )
                    continue
                if foreign is not None and event.seq > foreign:
                    # After another loop's uncommitted claim: not this pass (acceptance order).
                    writer.release(event.seq)
                    outcomes.append(RouteOutcome(event.seq, RouteState.UNROUTED, reason="retry"))
                    continue
                evaluation = None if event.seq in backing_off else evaluations[event.seq]
                settlement = settler.settle(event, evaluation)
                writer.write(event, settlement, evaluation)
                outcomes.append(settlement)
            if dry:
                return [RouteOutcome.of(o) if type(o) is Settlement else o for o in outcomes]
            ids = writer.flush()
            outcomes = [RouteOutcome.of(o, ids) if type(o) is Settlement else o for o in outcomes]
            if then is not None:
                then()
        decided = log_decided_enabled()
        for outcome in outcomes:
            if outcome.decision is not None and outcome.settled:
                if outcome.error is not None:
                    logger.warning(
                        "route.gave_up",
                        extra={
                            "event": outcome.seq,
                            "code": outcome.error.code.value,
                            "attempts": outcome.error.attempts,
                            "route": outcome.error.route,
                        },
                    )
                if decided:
                    log_decided(outcome, self.configuration.label, now)
        return outcomes

    def _settled_outcome(self, event: Event) -> RouteOutcome:
        record = RouteRecord.objects.filter(event_id=event.seq).first()
        return RouteOutcome(event.seq, event.route_state, record_id=record.pk if record else None)


# The window's route states and the earlier Events they wait behind, read in every commit:
# built and compiled once per shape.
_STATES = CompiledOnce(
    lambda seqs: Event.objects.filter(seq__in=Listed(seqs)).values_list("seq", "route_state", "waiting_on")
)


# How often a route loop looks for other loops' heartbeats, and how long one counts as about.
_LOOK_FOR_LOOPS = 0.25
_OTHER_LOOP_FRESH = timedelta(seconds=10)


# PostgreSQL's answers to a write on a stale snapshot: a serialization failure, a deadlock.
_RETRIED_SQLSTATES = frozenset({"40001", "40P01"})


def _sqlstate(exc: BaseException) -> str | None:
    return getattr(exc.__cause__, "sqlstate", None)


def _concurrent_update(exc: OperationalError) -> bool:
    """Whether a commit failed because another transaction changed what it read (retry it)."""
    return _sqlstate(exc) in _RETRIED_SQLSTATES


def _evaluation_from(outcome: CallOutcome, scope: EffectiveScope, timeout: float) -> Evaluation:
    if outcome.timed_out:
        error = RouteError(RouteErrorCode.HANDLER_TIMEOUT, f"no decision within {timeout:g}s")
        verdicts = tuple(RouteVerdict(r.slot, r.scope, Verdict.NOT_REACHED) for r in scope.routes)
        return Evaluation(verdicts, error=error)
    if outcome.exception is not None:
        if isinstance(outcome.exception, PoolExhausted):
            error = RouteError(RouteErrorCode.HANDLER_FAILED, str(outcome.exception))
        else:  # evaluate() recovers handler exceptions itself; this is a bug in routing code
            error = RouteError(
                RouteErrorCode.HANDLER_PANIC,
                f"{type(outcome.exception).__name__}: {outcome.exception}",
                stack=outcome.stack,
            )
        return Evaluation((), error=error)
    return outcome.result


def build_router(
    *,
    clock: Clock,
    generation: Generation | None = None,
    options: RouterOptions | None = None,
    pool: HandlerPool | None = None,
) -> Router | None:
    """A router for the live generation (or ``generation``) with the registered handlers and
    executors; ``None`` when no configuration was ever applied."""
    from routing.handlers.registry import find_handler_class
    from worklife.executors import find_executor_class, registered_executors

    generation = generation or live_generation()
    if generation is None:
        return None
    configuration_handlers = {}
    for name in _handler_names(generation):
        cls = find_handler_class(name)
        if cls is not None:
            configuration_handlers[name] = cls
    return Router(
        clock=clock,
        generation=generation,
        handlers=configuration_handlers,
        executors={name: cls for name in registered_executors() if (cls := find_executor_class(name))},
        options=options,
        pool=pool,
    )


def _handler_names(generation: Generation) -> set[str]:
    """The handlers the generation's routes name (every declared route is among the effective
    routes of the scope that declares it), from its kept configuration: no query."""
    configuration = load_configuration(generation)
    return {route.handler for scope in configuration.scopes.values() for route in scope.routes}
