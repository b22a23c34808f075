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
  being committed beside this window, so the Event is left unwritten (``BEHIND_COMMIT_BESIDE``), with every
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
import time
from collections.abc import Callable, Collection, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, InterfaceError, OperationalError, connection
from django.db.models import Q

from causal.clock import Clock
from causal.limits import Causal, CausalRefused, derived_atomic
from causal.models import Event, RouteState
from infra.identity import loop_identity
from infra.queries import Listed
from infra.snapshots import read_snapshot
from routing.config.effective import Configuration
from routing.config.selectors import live_generation, live_generation_id, load_configuration
from routing.engine.asking import Asking, RouteAsker
from routing.engine.claims import COMMIT_LOCK_ID, claim_window, withdraw_targets
from routing.engine.coordination import INTERRUPTIBLE_SLEEP, Carried, Coordination, EarlierClaimed
from routing.engine.evaluate import Evaluation, panic, snapshots_isolated
from routing.engine.handler_pool import HandlerPool
from routing.engine.logs import log_decided, log_decided_enabled
from routing.engine.options import RouterOptions
from routing.engine.pipeline import Ahead
from routing.engine.ratelimit import RateLedger
from routing.engine.settle import BEHIND_COMMIT_BESIDE, CONFLICT_RECHECK, RouteOutcome, Settlement
from routing.engine.window import settle_window
from routing.engine.world import SnapshotReads, explicit_tokens
from routing.engine.writes import Writes
from routing.extension import EventSnapshot
from routing.models import Generation, RouteRecord
from worklife.tracing import trace_fields, traceparents_of

logger = logging.getLogger("conduit.routing")


class GenerationChanged(RuntimeError):
    """A newer configuration generation was applied: the router must be rebuilt."""


class Router:
    """Routes Events with one configuration generation (R1, R4).

    ``handlers`` maps handler names to classes (or factories); each is instantiated once for
    this generation. The map is copied here: a caller mutating its dict afterwards changes
    nothing. The router makes no execution or control calls (R33).

    Its ideas live beside it: asking the routes (:mod:`~routing.engine.asking`), the
    claim-ahead pipeline (:mod:`~routing.engine.pipeline`), coordination with other route
    loops (:mod:`~routing.engine.coordination`) and the window's settlement, which the commit
    writes and trace only shows (:func:`~routing.engine.window.settle_window`).
    """

    def __init__(
        self,
        *,
        clock: Clock,
        generation: Generation,
        handlers: Mapping[str, Callable[[], Any]],
        options: RouterOptions | None = None,
        pool: HandlerPool | None = None,
        owner: str | None = None,
    ) -> None:
        self.clock = clock
        self.generation = generation
        self.options = options or RouterOptions()
        self.handler_classes = dict(handlers)
        self.handlers: dict[str, Any] = {name: factory() for name, factory in self.handler_classes.items()}
        self.configuration: Configuration = load_configuration(generation)
        self._own_pool = pool is None
        self.pool = pool or HandlerPool(
            workers=self.options.workers, max_abandoned=self.options.max_abandoned
        )
        self.coordination = Coordination(owner=owner or loop_identity(), clock=clock, options=self.options)
        self.causal = Causal(clock)
        self.asker = RouteAsker(
            configuration=self.configuration,
            handlers=self.handlers,
            pool=self.pool,
            timeout=self.options.route_timeout,
            clock=clock,
        )
        self.last_window: tuple[int, ...] = ()  # the Events of the latest pass (doctor names them)
        # The latest pass's Events' scopes and its commits' times (routing.engine.metrics).
        self.last_scopes: dict[int, str] = {}
        self.last_commits: list[datetime] = []
        self._claimed_until: datetime | None = None  # the latest claim's end (claim_window)
        # The next window, claimed before this pass's commit, its routes asked while the
        # commit's own transaction ends (a commit alone, with a backlog: see route_pending).
        self._ahead: Ahead | None = None

    @property
    def owner(self) -> str:
        """The name this router's claims, published targets and heartbeats carry."""
        return self.coordination.owner

    @owner.setter
    def owner(self, owner: str) -> None:
        self.coordination.owner = owner

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
        mine = self._until_decided(
            window,
            seq,
            lambda window: self._pass_isolated(window, honour_claims=False),
            retries=self.options.max_retries,
        )
        return mine or RouteOutcome(seq, RouteState.UNROUTED, reason="retry")

    def route_pending(self, *, limit: int | None = None, claim_ahead: bool = True) -> list[RouteOutcome]:
        """One pass over the oldest routable Events (the route loop's step).

        With a full window on a commit alone, the next window is claimed and asked while this
        one's commit ends (:mod:`~routing.engine.pipeline`). ``claim_ahead=False``: no window
        is claimed ahead (a last pass)."""
        self.last_window = ()
        self.last_commits = []
        size = limit or self.options.batch_size
        carried = self.coordination.take_carried()
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            window = ahead.window
        else:
            window = self.claim_window(size, held=carried)
        if carried:
            if not window:
                # Nothing new: wait for the commits the carried Events wait for, not a pass a
                # moment until they are over.
                self.coordination.await_commits({c.behind for c in carried.values()}, time.monotonic() + 1.0)
            window = sorted([*(c.event for c in carried.values()), *window], key=lambda e: e.seq)
        self.last_window = tuple(e.seq for e in window)
        self.last_scopes = {e.seq: e.scope for e in window}
        if not window:
            return []
        following: Ahead | None = None
        if claim_ahead and len(window) >= size and not carried and not self.coordination.beside(True):
            following = Ahead(self.claim_window(size, after=window[-1].seq), self.asker.ask)
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
                    # Wait for the workers now: each of the loop's next statements would wait
                    # for the interpreter while they run.
                    following.settle_answers()
                    self._ahead = following
        return outcomes

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
        """Give back every claim this router holds and stop its pool (if its own)."""
        if self._ahead is not None:
            self._give_back(self._ahead)
            self._ahead = None
        if self._own_pool:
            self.pool.close()
        carried = self.coordination.take_carried()
        if carried:
            self._release(carried)
        if self._claimed_until is not None and connection.vendor == "postgresql":
            withdraw_targets(self.owner)

    # -- trace: the same window, settled in a read snapshot, nothing written (R39) -------------
    def simulate(
        self,
        event: EventSnapshot,
        *,
        window: list[EventSnapshot] | None = None,
        memo: SnapshotReads | None = None,
        accepted: bool = True,
        only: frozenset[str] | None = None,
        replay: tuple[RateLedger, datetime] | None = None,
    ) -> tuple[Settlement, Evaluation | None]:
        """What :meth:`route` would do with ``event`` now, writing nothing: the same window (the
        earlier unrouted input it must wait behind), the same evaluation (an Event backing off
        is not asked about) and the same settlement. ``event`` may be a hypothetical Event not
        accepted yet (a trace's), last in acceptance order. Returns its settlement and its
        evaluation (``None`` when its handlers were not asked).

        For a run of traces in one read snapshot: ``window`` is :meth:`window_for` the Event
        when the caller has read it already, ``memo`` remembers world reads for the next
        trace, and ``accepted=False`` says the Event is hypothetical (it has no failures to
        read). ``only`` asks the Event's routes in those slots alone (a trace's filter, R37);
        the earlier input it waits behind is asked about all of its routes, as routing asks.
        ``replay`` (a ledger, a time): the hypothetical Event's rate limits count as if it was
        accepted then, in the ledger (an impact preview's replay, :class:`RateLedger`)."""
        window = list(window) if window is not None else self.window_for(event)
        absent = frozenset() if accepted else frozenset({event.seq})
        asked: dict[int, Evaluation] = {}

        def simulated(window: list[EventSnapshot]) -> list[RouteOutcome]:
            limits = {event.seq: only} if only is not None else None
            evaluations, backing_off = self.asker.ask(window, absent=absent, only=limits).result()
            asked.clear()
            asked.update(evaluations)
            with read_snapshot():
                settled = settle_window(
                    window,
                    evaluations,
                    backing_off,
                    now=self.clock(),
                    configuration=self.configuration,
                    options=self.options,
                    causal=self.causal,
                    owner=self.owner,
                    honour_claims=False,
                    hypothetical=True,
                    memo=memo,
                    replay=replay,
                )
            return [RouteOutcome.of(o) if type(o) is Settlement else o for o in settled.outcomes]

        mine = self._until_decided(window, event.seq, simulated, retries=0)
        return mine.settlement or Settlement(event.seq, mine.state, reason=mine.reason), asked.get(event.seq)

    def evaluate_one(self, event: EventSnapshot) -> Evaluation:
        """Ask the routes about one Event on the handler pool, under the deadline (the impact
        preview compares what configurations answer before tracing)."""
        return self.asker.evaluate([event])[event.seq]

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

    def _until_decided(
        self,
        window: list[EventSnapshot],
        seq: int,
        run: Callable[[list[EventSnapshot]], list[RouteOutcome]],
        *,
        retries: int,
    ) -> RouteOutcome | None:
        """Run ``run`` on the window until the Event ``seq`` is decided: the one window loop
        of :meth:`route` (``run`` commits) and :meth:`simulate` (``run`` writes nothing).
        Earlier input the Event waits behind (known only once its route decided its keys)
        joins the window, in acceptance order (R17, R25); a pass that gave it back undecided
        ("retry") runs again up to ``retries`` times."""
        attempts = 0
        while True:
            mine = next((o for o in run(window) if o.seq == seq), None)
            if mine is None or mine.settled:
                return mine
            behind = mine.waiting_on
            if (
                behind is not None
                and behind not in {e.seq for e in window}
                and len(window) < self.options.batch_size
            ):
                window = sorted(
                    [*window, *snapshots_isolated(Event.objects.filter(seq=behind))], key=lambda e: e.seq
                )
                continue
            if mine.reason == "retry" and attempts < retries:
                attempts += 1
                continue
            return mine

    # -- a pass ---------------------------------------------------------------------------
    def _pass_isolated(
        self,
        window: list[EventSnapshot],
        *,
        honour_claims: bool,
        carried: Mapping[int, Carried] | None = None,
        asked: Asking | None = None,
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

    def _pass(
        self,
        window: list[EventSnapshot],
        *,
        honour_claims: bool,
        carried: Mapping[int, Carried] | None = None,
        asked: Asking | None = None,
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
            asked = self.asker.ask([e for e in window if e.seq not in kept_evaluations])
        evaluations, backing_off = asked.result()
        evaluations = {**evaluations, **kept_evaluations}
        coordination = self.coordination
        if coordination.beside(honour_claims) and coordination.other_loops():
            coordination.publish(window, evaluations, backing_off, carried, self._claimed_until)
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
            except EarlierClaimed as earlier:
                # Earlier Events are undecided: this window commits after them (acceptance
                # order). When another loop holds them, wait for it; the evaluations stand.
                # When nobody does (a released or lapsed claim), give the window back at once:
                # the next claim starts at the oldest unrouted Event, so it routes first.
                if earlier.orphaned or time.monotonic() > wait_until:
                    break
                INTERRUPTIBLE_SLEEP.wait(0.02)
                continue
            beside = {o.seq: o for o in outcomes if o.reason == BEHIND_COMMIT_BESIDE}
            done.update((o.seq, o) for o in outcomes if o.seq not in beside)
            if not beside:
                return [done[e.seq] for e in window]
            # Events sharing a target with an earlier Event another loop is committing beside
            # this window (only a commit beside others leaves any): settled once that commit
            # is over, on the same evaluations. In the loop's next pass, with its next window,
            # while their claim is young; else here, after waiting.
            pending = [e for e in pending if e.seq in beside]
            if coordination.carry(pending, beside, carried, evaluations, backing_off, self._claimed_until):
                done.update(beside)
                return [done[e.seq] for e in window]
            if not coordination.await_commits({o.waiting_on for o in beside.values()}, wait_until):
                break
        self._release([e.seq for e in window if e.seq not in done])
        return [done.get(e.seq) or RouteOutcome(e.seq, RouteState.UNROUTED, reason="retry") for e in window]

    def _commit(
        self,
        window: list[EventSnapshot],
        evaluations: Mapping[int, Evaluation],
        backing_off: set[int],
        *,
        honour_claims: bool,
        then: Callable[[], None] | None = None,
    ) -> list[RouteOutcome]:
        """Settle the window in acceptance order on the world read now and write what the
        settlements say, all or nothing. ``then`` is called after the writes, before the
        transaction ends."""
        # Beside other route loops' commits (PostgreSQL, a transaction of its own): in one
        # snapshot of the database, under the commit lock shared (operator controls take it
        # alone). Otherwise (a single Event's route, inside a caller's transaction) alone.
        beside = self.coordination.beside(honour_claims)
        in_flight: dict[tuple, int] | None = {} if beside else None
        # derived_atomic: a refused wake bridge's diagnostic survives whatever happens next.
        with derived_atomic():
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    if beside:
                        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                        cursor.execute("SELECT pg_advisory_xact_lock_shared(%s)", [COMMIT_LOCK_ID])
                    else:
                        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [COMMIT_LOCK_ID])
            now = self.clock()
            if live_generation_id() != self.generation.pk:
                raise GenerationChanged(f"generation {self.configuration.label} is no longer live")
            settled = settle_window(
                window,
                evaluations,
                backing_off,
                now=now,
                configuration=self.configuration,
                options=self.options,
                causal=self.causal,
                owner=self.owner,
                honour_claims=honour_claims,
                in_flight=in_flight,
            )
            if beside and settled.met_other_loop:
                self.coordination.met_other_loop()
            writer = Writes(
                now=now,
                generation=self.configuration.label,
                causal=self.causal,
                waiting=settled.waiting,
                route_priorities=self.configuration.route_priorities,
            )
            for seq in settled.released:
                writer.release(seq)
            for event, settlement, evaluation in settled.settled:
                writer.write(event, settlement, evaluation)
            writer.rate_takes = settled.rate_takes
            ids = writer.flush()
            self.last_commits.append(now)
            # Each outcome is built once, after the writes, naming the Work it started by its id.
            outcomes = [RouteOutcome.of(o, ids) if type(o) is Settlement else o for o in settled.outcomes]
            if then is not None:
                then()
        decided = log_decided_enabled()
        logged = [
            o.seq
            for o in outcomes
            if o.decision is not None and o.settled and (decided or o.error is not None)
        ]
        # The lines about an Event carry its trace: one query a window, only when lines are written.
        traces = traceparents_of(logged)
        for outcome in outcomes:
            if outcome.decision is not None and outcome.settled:
                traceparent = traces.get(outcome.seq, "")
                if outcome.error is not None:
                    logger.warning(
                        "route.gave_up",
                        extra={
                            "event": outcome.seq,
                            "code": outcome.error.code.value,
                            "attempts": outcome.error.attempts,
                            "route": outcome.error.route,
                            **trace_fields(traceparent),
                        },
                    )
                if decided:
                    log_decided(outcome, self.configuration.label, now, traceparent=traceparent)
        return outcomes

    def _give_back(self, ahead: Ahead) -> None:
        """Give back a window claimed ahead (its routes' answers, if asked, are dropped)."""
        ahead.settle_answers()
        self._release([e.seq for e in ahead.window])

    def _release(self, seqs: Collection[int]) -> None:
        """Give back this loop's claims on ``seqs``: the next claim may take them."""
        Event.objects.filter(seq__in=Listed(seqs), claimed_by=self.owner).update(
            claimed_by="", claimed_until=None
        )

    def _settled_outcome(self, event: Event) -> RouteOutcome:
        record = RouteRecord.objects.filter(event_id=event.seq).first()
        return RouteOutcome(event.seq, event.route_state, record_id=record.pk if record else None)


# PostgreSQL's answers to a write on a stale snapshot: a serialization failure, a deadlock.
_RETRIED_SQLSTATES = frozenset({"40001", "40P01"})


def _sqlstate(exc: BaseException) -> str | None:
    return getattr(exc.__cause__, "sqlstate", None)


def _concurrent_update(exc: OperationalError) -> bool:
    """Whether a commit failed because another transaction changed what it read (retry it)."""
    return _sqlstate(exc) in _RETRIED_SQLSTATES


def build_router(
    *,
    clock: Clock,
    generation: Generation | None = None,
    options: RouterOptions | None = None,
    pool: HandlerPool | None = None,
) -> Router | None:
    """A router for the live generation (or ``generation``) with the registered handlers;
    ``None`` when no configuration was ever applied."""
    from routing.handlers.registry import find_handler_class

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
        options=options,
        pool=pool,
    )


def import_registered_handlers() -> None:
    """Import every registered handler class (``CONDUIT_ROUTE_HANDLERS``) that can be: a loop
    started before any configuration was applied builds its first router without importing."""
    from routing.handlers.registry import find_handler_class, registered_handlers

    for name in registered_handlers():
        find_handler_class(name)


def _handler_names(generation: Generation) -> set[str]:
    """The handlers the generation's routes name (every declared route is among the effective
    routes of the scope that declares it), from its kept configuration: no query."""
    configuration = load_configuration(generation)
    return {route.handler for scope in configuration.scopes.values() for route in scope.routes}
