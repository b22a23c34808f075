"""The router: accepted Events, in acceptance order, into Work.

A pass takes a *window* of unrouted Events (the oldest ones, or one Event and the earlier
input it must wait behind), then:

1. **Evaluate** each Event's routes on the handler pool, outside any transaction, on a
   detached snapshot, each call under the deadline (R5, R12). Evaluation depends only on the
   Event and the configuration generation, never on Work state.
2. **Commit** in one transaction: check the generation is still live, read the world the
   decisions need (key owners, Work, attempts, waits, earlier unrouted input), decide each
   Event in acceptance order with :func:`routing.decide.decide` (the same code trace calls),
   mirror each decision into the in-memory world so later Events of the window see it, and
   write every effect with set-based statements. Because the decision is computed from state
   read inside the commit, the snapshot it assumes is the one committed (R7); a changed
   generation discards the window and evaluates again.

Ordering (I3, I4): an Event that shares a target (an explicit key, its Work) with an earlier
unrouted Event waits behind it, and so does everything after it on that target. A uniqueness
violation (another process owns the key first) rolls the window back and the pass is tried
again (bounded): ownership comes from the database constraint, never from a check.

Several route loops (PostgreSQL): each claims its window with ``FOR UPDATE SKIP LOCKED`` and
a short lease; commits are serialised by a transaction-scoped advisory lock and a window only
commits the Events no other live loop holds an earlier claim before, so commit order is
acceptance order on every target. On SQLite, ``BEGIN IMMEDIATE`` serialises writers.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, InterfaceError, OperationalError, connection, transaction
from django.db.models import F, OuterRef, Q, Subquery

from causal.clock import Clock
from causal.limits import Causal, CausalRefused, Refusal, derived_atomic, refuse
from causal.models import Event, EventKey, RouteState
from routing.config import Configuration, EffectiveScope, live_generation, load_configuration
from routing.decide import (
    INPUT_EFFECTS,
    AttemptView,
    Decision,
    Reason,
    SubscriptionView,
    WaitView,
    WorkView,
    World,
)
from routing.errors import RouteError, RouteErrorCode
from routing.evaluate import (
    Evaluation,
    RouteVerdict,
    UnreadableSnapshot,
    Verdict,
    evaluate,
    panic,
    snapshots_isolated,
)
from routing.extension import EventSnapshot
from routing.failures import (
    FAILURES_NAMESPACE,
    RouteFailure,
    backoff_for,
    failure_put_in_tx,
    failures_forget_in_tx,
    failures_read,
    gives_up,
)
from routing.handler_pool import CallOutcome, HandlerPool, PoolExhausted
from routing.live import publish_routed
from routing.models import Disposition, Generation, RouteRecord
from routing.settle import CONFLICT_RECHECK, Bridge, Settlement, Settler, block, event_tokens
from worklife.models import (
    ACTIVE_ATTEMPT_STATES,
    TERMINAL_STATUSES,
    Attempt,
    CorrelationKey,
    DependencySubscription,
    Intent,
    Wait,
    WaitState,
    Work,
    WorkInput,
)
from worklife.scheduling import (
    wait_block_in_tx,
    wait_time_out_in_tx,
    wait_wake_in_tx,
    wake_bridge_envelope,
)

logger = logging.getLogger("conduit.routing")

COMMIT_LOCK_ID = 0x526F7574  # "Rout": serialises route commits on PostgreSQL
# Re-exported for callers of the router's failure arithmetic (owned by routing.failures).
__all__ = ["FAILURES_NAMESPACE", "backoff_for", "gives_up"]


@dataclass(frozen=True, slots=True)
class RouterOptions:
    """How a router runs. Defaults come from settings (``CONDUIT_ROUTE_TIMEOUT``…)."""

    route_timeout: float = 5.0
    max_route_failures: int = 5
    route_failure_window: timedelta = timedelta(minutes=15)
    workers: int = 4
    max_abandoned: int = 16
    batch_size: int = 500
    claim_seconds: float = 60.0
    max_retries: int = 3

    @classmethod
    def from_settings(cls, **overrides: Any) -> RouterOptions:
        values = {
            "route_timeout": float(settings.CONDUIT_ROUTE_TIMEOUT),
            "max_route_failures": int(settings.CONDUIT_MAX_ROUTE_FAILURES),
            "route_failure_window": timedelta(seconds=int(settings.CONDUIT_ROUTE_FAILURE_WINDOW)),
            "claim_seconds": float(settings.CONDUIT_ROUTE_CLAIM_SECONDS),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


@dataclass(frozen=True, slots=True)
class RouteOutcome:
    """What happened to one Event in a pass."""

    seq: int
    state: str  # an Event route_state: unrouted, routed, skipped, failed
    decision: Decision | None = None
    error: RouteError | None = None
    reason: str = ""  # why it is still unrouted
    record_id: int | None = None
    waiting_on: int | None = None
    settlement: Settlement | None = None

    @property
    def settled(self) -> bool:
        return self.state != RouteState.UNROUTED

    @classmethod
    def of(cls, settlement: Settlement) -> RouteOutcome:
        return cls(
            settlement.seq,
            settlement.state,
            settlement.decision,
            error=settlement.error,
            reason=settlement.reason,
            waiting_on=settlement.waiting_on,
            settlement=settlement,
        )


_FOREIGN = ("claimed by another loop",)
_ORPHAN = ("undecided and unclaimed",)
# How many earlier unrouted Events a commit reads in full; past it, only those that share a
# target with the window (or are undecided) are read.
BLOCKER_SCAN = 10_000
_PAUSE = threading.Event()  # never set: a wait that a signal handler's exit can interrupt


class _EarlierClaimed(Exception):
    """Earlier Events whose targets are not known yet (another live loop holds them, or no
    pass has decided them) come before this whole window."""

    def __init__(self, seq: int, *, orphaned: bool) -> None:
        super().__init__(seq)
        self.seq = seq
        self.orphaned = orphaned


class GenerationChanged(RuntimeError):
    """A newer configuration generation was applied: the router must be rebuilt."""


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
        window = self._window_for(snapshots_isolated(Event.objects.filter(seq=seq))[0])
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

    def route_pending(self, *, limit: int | None = None) -> list[RouteOutcome]:
        """One pass over the oldest routable Events (the route loop's step)."""
        self.last_window = ()
        window = self._claim_window(limit or self.options.batch_size)
        self.last_window = tuple(e.seq for e in window)
        if not window:
            return []
        return self._pass_isolated(window, honour_claims=True)

    def close(self) -> None:
        if self._own_pool:
            self.pool.close()

    # -- trace: the same pass, nothing written (R39) --------------------------------------------
    def simulate(self, event: EventSnapshot) -> tuple[Settlement, Evaluation | None]:
        """What :meth:`route` would do with ``event`` now, writing nothing: the same window (the
        earlier unrouted input it must wait behind), the same evaluation (an Event backing off
        is not asked about) and the same settlement. ``event`` may be a hypothetical Event not
        accepted yet (a trace's), last in acceptance order. Returns its settlement and its
        evaluation (``None`` when its handlers were not asked)."""
        window = self._window_for(event)
        while True:
            outcomes, evaluations = self._pass_dry(window)
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

    def _pass_dry(self, window: list[EventSnapshot]) -> tuple[list[RouteOutcome], dict[int, Evaluation]]:
        evaluations, backing_off = self._evaluate_window(window)
        # Read what routing reads, in a transaction that is rolled back: nothing is written.
        with transaction.atomic():
            outcomes = self._commit(window, evaluations, backing_off, honour_claims=False, dry=True)
            transaction.set_rollback(True)
        return outcomes, evaluations

    # -- windows --------------------------------------------------------------------------
    def _window_for(self, event: EventSnapshot) -> list[EventSnapshot]:
        """The Event and the earlier unrouted Events that share an explicit target with it
        (R17, R25), or that no pass has decided yet (their targets are not known: one may win
        the same wait, R41): they route first, in acceptance order, as the route loop's window
        would route them."""
        tokens = self._explicit_tokens([event])
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

    def _claim_window(self, limit: int) -> list[EventSnapshot]:
        """Claim the oldest unrouted Events that are not backing off or held by another loop."""
        now = self.clock()
        until = now + timedelta(seconds=self.options.claim_seconds)
        with transaction.atomic():
            query = (
                Event.objects.filter(route_state=RouteState.UNROUTED)
                .filter(Q(retry_at__isnull=True) | Q(retry_at__lte=now))
                .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now) | Q(claimed_by=self.owner))
                # Pass over Events waiting behind an earlier one that has not settled (I7).
                .filter(Q(waiting_on__isnull=True) | ~Q(waiting_on__route_state=RouteState.UNROUTED))
                .order_by("seq")
            )
            if connection.features.has_select_for_update_skip_locked:
                query = query.select_for_update(skip_locked=True, of=("self",))
            window = snapshots_isolated(query[:limit])
            if window:
                Event.objects.filter(seq__in=[e.seq for e in window]).update(
                    claimed_by=self.owner, claimed_until=until
                )
        return window

    # -- a pass ---------------------------------------------------------------------------
    def _pass_isolated(self, window: list[EventSnapshot], *, honour_claims: bool) -> list[RouteOutcome]:
        """A pass that no single Event's content can fail: when the window's pass raises
        something unexpected, its Events are routed one by one, in acceptance order, and an
        Event whose own pass still raises is given up on with a ``handler_panic`` carrying
        the exception and its stack (dead-lettered, R16). The database being unavailable and
        a new generation are not an Event's doing: they still end the pass."""
        try:
            return self._pass(window, honour_claims=honour_claims)
        except (GenerationChanged, OperationalError, InterfaceError):
            raise
        except Exception as exc:  # noqa: BLE001 - isolated below, one Event at a time
            if len(window) == 1:
                return [self._give_up_unexpected(window[0], exc, honour_claims=honour_claims)]
        outcomes: list[RouteOutcome] = []
        for event in window:
            outcomes.extend(self._pass_isolated([event], honour_claims=honour_claims))
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

    def _evaluate_window(self, window: list[EventSnapshot]) -> tuple[dict[int, Evaluation], set[int]]:
        """Ask the routes about the window's Events, except those backing off (R14): their
        handlers are not called before the backoff ends. Returns the evaluations and the seqs
        backing off."""
        now = self.clock()
        failures = failures_read(e.seq for e in window)
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
        evaluations.update(self._evaluate(to_evaluate))
        return evaluations, backing_off

    def _pass(self, window: list[EventSnapshot], *, honour_claims: bool) -> list[RouteOutcome]:
        evaluations, backing_off = self._evaluate_window(window)
        attempt = 0
        wait_until = time.monotonic() + self.options.claim_seconds / 2
        while attempt <= self.options.max_retries:
            try:
                return self._commit(window, evaluations, backing_off, honour_claims=honour_claims)
            except (IntegrityError, CausalRefused):
                # Another process took a key or decided an Event first, or spent the causal
                # limits' tokens the settlement counted on: read again and retry.
                attempt += 1
                logger.info("route.commit_retry", extra={"attempt": attempt})
            except _EarlierClaimed as earlier:
                # Earlier Events are undecided: this window commits after them (acceptance
                # order). When another loop holds them, wait for it; the evaluations stand.
                # When nobody does (a released or lapsed claim), give the window back at once:
                # the next claim starts at the oldest unrouted Event, so it routes first.
                if earlier.orphaned or time.monotonic() > wait_until:
                    break
                _PAUSE.wait(0.02)
        Event.objects.filter(seq__in=[e.seq for e in window], claimed_by=self.owner).update(
            claimed_by="", claimed_until=None
        )
        return [RouteOutcome(e.seq, RouteState.UNROUTED, reason="retry") for e in window]

    def _evaluate(self, events: Sequence[EventSnapshot]) -> dict[int, Evaluation]:
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
            return results
        try:
            outcomes = self.pool.run_all(calls, timeout=self.options.route_timeout)
        except PoolExhausted as exc:
            outcomes = [CallOutcome(exception=exc) for _ in calls]
        for (event, scope), outcome in zip(scoped, outcomes, strict=True):
            results[event.seq] = _evaluation_from(outcome, scope, self.options.route_timeout)
        return results

    def _commit(
        self,
        window: list[EventSnapshot],
        evaluations: Mapping[int, Evaluation],
        backing_off: set[int],
        *,
        honour_claims: bool,
        dry: bool = False,
    ) -> list[RouteOutcome]:
        """Settle the window in acceptance order on the world read now and write what the
        settlements say, all or nothing. ``dry`` (trace) writes nothing and checks no
        generation: the caller rolls the transaction back; an Event of the window not
        accepted yet is a trace's hypothetical Event."""
        # derived_atomic: a refused wake bridge's diagnostic survives whatever happens next.
        with transaction.atomic() if dry else derived_atomic():
            if connection.vendor == "postgresql" and not dry:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_xact_lock(%s)", [COMMIT_LOCK_ID])
            now = self.clock()
            if not dry:
                live = live_generation()
                if live is None or live.pk != self.generation.pk:
                    raise GenerationChanged(f"generation {self.configuration.label} is no longer live")
            seqs = [e.seq for e in window]
            states = dict(Event.objects.filter(seq__in=seqs).values_list("seq", "route_state"))
            hypothetical = {seq for seq in seqs if seq not in states} if dry else set()
            states.update(dict.fromkeys(hypothetical, RouteState.UNROUTED))
            still = {seq for seq, state in states.items() if state == RouteState.UNROUTED}
            events = [e for e in window if e.seq in still]
            # The failures as they are now: an operator's reroute may have forgotten an Event's
            # failures while its handlers ran, and counting on the stale read undoes it.
            failures = failures_read(still)
            world = self._read_world(events, evaluations, now)
            blocked = self._outside_blockers(events, world, honour_claims, now, evaluations)
            foreign = blocked.pop(_FOREIGN, None)
            orphan = blocked.pop(_ORPHAN, None)
            if foreign is not None and not any(e.seq < foreign for e in events):
                raise _EarlierClaimed(foreign, orphaned=foreign == orphan)
            settler = Settler(
                world=world,
                blocked=blocked,
                configuration=self.configuration,
                options=self.options,
                failures=failures,
                limits=BridgeVerdicts(self.causal, hypothetical=hypothetical),
            )
            writer = _Writes(now=now, generation=self.configuration.label, causal=self.causal)
            outcomes: list[RouteOutcome] = []
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
                outcomes.append(RouteOutcome.of(settlement))
            if dry:
                return outcomes
            ids = writer.flush()
            if ids:
                outcomes = [_with_real_work(o, ids) for o in outcomes]
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
                _log_decided(outcome, self.configuration.label, now)
        return outcomes

    # -- reading the world -------------------------------------------------------------------
    def _explicit_tokens(self, events: Iterable[EventSnapshot]) -> set[tuple]:
        tokens: set[tuple] = set()
        for event in events:
            if event.work_id is not None:
                tokens.add(("work", event.work_id))
            for key in event.correlation or ():
                tokens.add(("key", event.scope, key))
        return tokens

    def _read_world(
        self,
        events: Sequence[EventSnapshot],
        evaluations: Mapping[int, Evaluation],
        now: datetime,
    ) -> World:
        world = World(now=now)
        keys_by_scope: dict[str, set[str]] = {}
        work_ids: set[int] = set()
        execution_ids: set[int] = set()
        for snap in events:
            wanted = keys_by_scope.setdefault(snap.scope, set())
            wanted.update(snap.correlation)
            evaluation = evaluations.get(snap.seq)
            if evaluation is not None and evaluation.decision is not None:
                wanted.update(evaluation.decision.keys)
                if evaluation.decision.work_id is not None:
                    work_ids.add(evaluation.decision.work_id)
            if snap.work_id is not None:
                work_ids.add(snap.work_id)
            if snap.execution_id is not None:
                execution_ids.add(snap.execution_id)
        wanted_pairs = [(scope, key) for scope, keys in keys_by_scope.items() for key in keys]
        for scope, key, work_id in CorrelationKey.objects.filter(_pairs(wanted_pairs)).values_list(
            "scope", "key", "work_id"
        ):
            world.owners[(scope, key)] = work_id
            work_ids.add(work_id)
        for sub in DependencySubscription.objects.filter(
            active=True, scope__in=list(keys_by_scope), wait__state=WaitState.ACTIVE
        ).select_related("wait", "work"):
            world.subscriptions.append(
                SubscriptionView(
                    id=sub.pk,
                    work_id=sub.work_id,
                    work_scope=sub.work.scope,
                    wait=WaitView(
                        sub.wait.pk,
                        sub.wait.name,
                        dict(sub.wait.match or {}),
                        sub.wait.timeout_at,
                        sub.wait.blocked_reason,
                    ),
                    scope=sub.scope,
                    match=dict(sub.match or {}),
                )
            )
            work_ids.add(sub.work_id)
        if execution_ids:
            for attempt_id, work_id in Attempt.objects.filter(pk__in=execution_ids).values_list(
                "pk", "work_id"
            ):
                world.attempt_work[attempt_id] = work_id
                work_ids.add(work_id)
        world.works.update(read_work_views(work_ids))
        world.missing_works = work_ids - set(world.works)
        return world

    def _outside_blockers(
        self,
        events: Sequence[EventSnapshot],
        world: World,
        honour_claims: bool,
        now: datetime,
        evaluations: Mapping[int, Evaluation],
    ) -> dict[tuple, int]:
        """Earlier unrouted Events outside the window, by the targets they block (I4)."""
        if not events:
            return {}
        window = [e.seq for e in events]
        query = Event.objects.filter(route_state=RouteState.UNROUTED, seq__lt=max(window)).exclude(
            seq__in=window
        )
        fields = ("seq", "scope", "work_id", "execution_id", "claimed_by", "claimed_until", "unrouted_reason")
        blocked: dict[tuple, int] = {}
        rows = list(query.order_by("seq").values_list(*fields)[:BLOCKER_SCAN])
        if len(rows) == BLOCKER_SCAN:
            # More earlier unrouted input than one scan reads (a long backlog behind failing
            # input): of the rest, read what shares a target with the window or is undecided.
            tokens = set().union(*(event_tokens(e, evaluations.get(e.seq), world) for e in events))
            rest = query.filter(seq__gt=rows[-1][0]).filter(self._sharing(tokens, honour_claims, now))
            rows.extend(rest.order_by("seq").values_list(*fields))
        if not rows:
            return blocked
        seqs = [r[0] for r in rows]
        keys: dict[int, list[tuple[str, str]]] = {}
        for seq, scope, key in EventKey.objects.filter(event_id__in=seqs).values_list(
            "event_id", "scope", "key"
        ):
            keys.setdefault(seq, []).append((scope, key))
        extra_keys = {k for pairs in keys.values() for k in pairs if k not in world.owners}
        if extra_keys:
            owners = dict(
                ((s, k), w)
                for s, k, w in CorrelationKey.objects.filter(_pairs(extra_keys)).values_list(
                    "scope", "key", "work_id"
                )
            )
        else:
            owners = {}
        for seq, _scope, work_id, execution_id, claimed_by, claimed_until, reason in rows:
            held = (
                bool(claimed_by)
                and claimed_by != self.owner
                and claimed_until is not None
                and claimed_until > now
            )
            if honour_claims and (held or not reason):
                # An earlier Event whose targets are not known yet: another live loop holds it,
                # or no pass has decided it (its claim was released or lapsed). Its route may
                # attach any key, so nothing after it commits before it does (acceptance order).
                blocked[_FOREIGN] = min(blocked.get(_FOREIGN, seq), seq)
                if not held and _ORPHAN not in blocked:
                    blocked[_ORPHAN] = seq
            tokens: set[tuple] = set()
            if work_id is not None:
                tokens.add(("work", work_id))
            if execution_id is not None and execution_id in world.attempt_work:
                tokens.add(("work", world.attempt_work[execution_id]))
            for pair in keys.get(seq, []):
                tokens.add(("key", *pair))
                owner = world.owners.get(pair, owners.get(pair))
                if owner is not None:
                    tokens.add(("work", owner))
            block(blocked, tokens, seq)
        return blocked

    def _sharing(self, tokens: set[tuple], honour_claims: bool, now: datetime) -> Q:
        """Unrouted Events that share one of ``tokens`` (a key, a Work, through a key that
        Work owns or an attempt of it), or, for a route loop, whose route is not decided yet."""
        works = {t[1] for t in tokens if t[0] == "work"}
        keys = {(t[1], t[2]) for t in tokens if t[0] == "key"}
        keys.update(CorrelationKey.objects.filter(work_id__in=works).values_list("scope", "key"))
        sharing = (
            Q(work_id__in=works)
            | Q(execution_id__in=Attempt.objects.filter(work_id__in=works).values("pk"))
            | Q(seq__in=EventKey.objects.filter(_pairs(keys)).values("event_id"))
        )
        if honour_claims:
            sharing |= Q(unrouted_reason="") | (
                Q(claimed_until__gt=now) & ~Q(claimed_by="") & ~Q(claimed_by=self.owner)
            )
        return sharing

    def _settled_outcome(self, event: Event) -> RouteOutcome:
        record = RouteRecord.objects.filter(event_id=event.seq).first()
        return RouteOutcome(event.seq, event.route_state, record_id=record.pk if record else None)


# The Work columns a WorkView copies, under the names it uses.
WORK_VIEW_FIELDS = (
    "id",
    "scope",
    "status",
    "version",
    "binding",
    "retry_binding",
    "rebind_binding",
    "rebind_after_attempt",
)


def read_work_views(work_ids: Iterable[int]) -> dict[int, WorkView]:
    """What routing (and trace) reads of these Works, in a fixed number of queries."""
    ids = sorted(set(work_ids))
    if not ids:
        return {}
    pending_queue = WorkInput.objects.filter(work=OuterRef("pk"), state="pending", kind="queue").order_by(
        "-seq"
    )
    latest_input = WorkInput.objects.filter(work=OuterRef("pk")).order_by("-seq")
    latest_attempt = Attempt.objects.filter(work=OuterRef("pk")).order_by("-number")
    works = list(
        Work.objects.filter(pk__in=ids)
        .annotate(
            queued_binding=Subquery(pending_queue.values("binding")[:1]),
            max_input_seq=Subquery(latest_input.values("seq")[:1]),
            latest_attempt_id=Subquery(latest_attempt.values("pk")[:1]),
        )
        .values(*WORK_VIEW_FIELDS, "queued_binding", "max_input_seq", "latest_attempt_id")
    )
    attempt_ids = [w["latest_attempt_id"] for w in works if w["latest_attempt_id"]]
    attempts = {
        pk: (AttemptView(pk, number, binding, frozenset(capabilities or ()), epoch, state), work_id)
        for pk, number, binding, capabilities, epoch, state, work_id in Attempt.objects.filter(
            Q(pk__in=attempt_ids) | Q(work_id__in=ids, state__in=ACTIVE_ATTEMPT_STATES)
        ).values_list("pk", "number", "binding", "capabilities", "lease_epoch", "state", "work_id")
    }
    active = {work_id: a for a, work_id in attempts.values() if a.state in ACTIVE_ATTEMPT_STATES}
    waiting = [w["id"] for w in works if w["status"] == "waiting"]
    waits = {}
    if waiting:
        for wait in Wait.objects.filter(work_id__in=waiting, state=WaitState.ACTIVE).order_by(
            "created_at", "pk"
        ):
            waits.setdefault(wait.work_id, wait)
    views: dict[int, WorkView] = {}
    for work in works:
        latest = attempts.get(work.pop("latest_attempt_id"))
        wait = waits.get(work["id"])
        work["queued_binding"] = work["queued_binding"] or ""
        work["max_input_seq"] = work["max_input_seq"] or 0
        views[work["id"]] = WorkView(
            **work,
            active_attempt=active.get(work["id"]),
            latest_attempt=latest[0] if latest else None,
            active_wait=(
                WaitView(wait.pk, wait.name, dict(wait.match or {}), wait.timeout_at, wait.blocked_reason)
                if wait
                else None
            ),
        )
    return views


# --- helpers -------------------------------------------------------------------------------------


def _pairs(pairs: Iterable[tuple[str, str]]) -> Q:
    """Rows whose (scope, key) is one of ``pairs``: one ``key IN`` per scope, so thousands of
    keys stay one shallow condition."""
    by_scope: dict[str, list[str]] = {}
    for scope, key in pairs:
        by_scope.setdefault(scope, []).append(key)
    condition = Q(pk__in=[])
    for scope, keys in by_scope.items():
        condition |= Q(scope=scope, key__in=sorted(keys))
    return condition


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


def _with_real_work(outcome: RouteOutcome, ids: Mapping[int, int]) -> RouteOutcome:
    decision = outcome.decision
    if decision is None or decision.work_id not in ids:
        return outcome
    return replace(outcome, decision=replace(decision, work_id=ids[decision.work_id]))


# What a log line keeps of a reason: field names and the words reasons are made of. Any other
# token (a value, a pattern, a glob, a quoted string) becomes "…": payload values stay in the
# stored RouteRecord (for operators), never in log lines.
_REASON_WORDS = frozenset(
    """is not missing expected one of a an to string matching which does match matches present
    absent key needs null scalar renders characters at most route handler no decision within
    returned failed unexpectedly deciding routing this event cannot be read for its the data
    fallback queue drop held until attempt ends runs binding selects pinned capabilities lack
    inject interrupt wins wait terminal no_match addressed context no_work conflicting targets
    work by names exist chose does in scope already has later input and or with registered
    panic handler_panic handler_failed handler_invalid handler_timeout handler_missing
    binding_invalid policy_invalid unknown policy""".split()
)
_FIELD = re.compile(
    r"(data(\.[\w-]+|\[\d+\])*|type|source|subject|scope|id|time|correlation(\[\d+\])?|work_id|execution_id)"
)
_TOKEN = re.compile(r"[^\s,;:()]+")
_ELIDED = re.compile(r"…(?:[\s,:;]*…)+")


def redacted(text: str, *, names: Iterable[str] = ()) -> str:
    """``text`` with every token that is not a field name, a word of a reason or one of
    ``names`` (route names, from the configuration) replaced by ``…``:
    ``data.action is 'secret', not 'opened'`` → ``data.action is …, not …``."""
    return _redacted(text, frozenset(names))


# Reasons repeat (one per route and type of Event): each distinct one is redacted once.
@functools.lru_cache(maxsize=4096)
def _redacted(text: str, names: frozenset[str]) -> str:
    def keep(match: re.Match) -> str:
        token = match.group()
        if token.lower() in _REASON_WORDS or token in names or _FIELD.fullmatch(token):
            return token
        return "…"

    return _ELIDED.sub("…", _TOKEN.sub(keep, text))


def _log_decided(outcome: RouteOutcome, generation: str, decided_at: datetime) -> None:
    """One ``route.decided`` record per decision, with the fields of the route's JSON; reasons
    and errors are :func:`redacted` (the RouteRecord keeps them whole)."""
    if not logger.isEnabledFor(logging.INFO):
        return
    decision = outcome.decision
    routes = {decision.route, *(str(refusal.get("route", "")) for refusal in decision.refusals)}
    logger.info(
        "route.decided",
        extra={
            "event": outcome.seq,
            "disposition": outcome.state,
            "decided_at": decided_at.isoformat(),
            "work": decision.work_id,
            "route": decision.route,
            "binding": decision.binding,
            "generation": generation,
            "policy": decision.policy if not decision.error else "failed",
            "reason": redacted(decision.reason, names=routes),
            "route.refusals": [
                {**refusal, "reason": redacted(str(refusal.get("reason", "")), names=routes)}
                for refusal in decision.refusals
            ],
            # The message only, redacted: the stack may quote values (the record keeps both).
            "route.error": redacted(decision.error.message, names=routes) if decision.error else "",
            "route.attempts": decision.error.attempts if decision.error else 0,
        },
    )


class BridgeVerdicts:
    """The causal limits' verdict on each wake bridge a window plans (a
    :class:`~routing.settle.BridgeLimits`): a dry run of derivation that counts the bridges
    planned before it on the same root, since they are derived only when the window is
    written. An Event in ``hypothetical`` is not accepted yet (a trace's): it would be a root
    of its own."""

    def __init__(self, causal: Causal, *, hypothetical: Iterable[int] = ()) -> None:
        self.causal = causal
        self.hypothetical = frozenset(hypothetical)
        self.planned: dict[int, int] = {}

    def refusal(self, event: EventSnapshot) -> Refusal | None:
        if event.seq in self.hypothetical:
            root, depth = None, event.depth
        else:
            row = Event.objects.filter(seq=event.seq).values_list("root_id", "depth").first()
            if row is None:
                return self.causal.would_refuse(parent=Event(seq=event.seq))
            root, depth = row[0] or event.seq, row[1]
        counted = root if root is not None else event.seq
        refusal = self.causal.would_refuse_child(
            parent_seq=event.seq, root_seq=root, depth=depth, pending=self.planned.get(counted, 0)
        )
        if refusal is None:
            self.planned[counted] = self.planned.get(counted, 0) + 1
        return refusal


@dataclass
class _Writes:
    """The window's effects, written with set-based statements at the end of the commit.

    Rows are plain tuples inserted with one ``executemany`` per table: building a model
    instance per row costs more than the database does on this path."""

    now: datetime
    generation: str
    causal: Causal
    new_works: dict[int, tuple] = field(default_factory=dict)
    keys: list[list] = field(default_factory=list)
    inputs: list[list] = field(default_factory=list)
    intents: list[list] = field(default_factory=list)
    records: list[list] = field(default_factory=list)
    settled: dict[str, list[int]] = field(default_factory=dict)
    touched_works: set[int] = field(default_factory=set)
    shown_works: set[int] = field(default_factory=set)  # terminal: refreshed on pages, never written
    wakes: list[tuple[int, int, int]] = field(default_factory=list)  # (work, wait, event)
    timeouts: list[tuple[int, int]] = field(default_factory=list)  # (work, wait)
    reasons: dict[int, tuple[str, int | None, datetime | None]] = field(default_factory=dict)
    failures: dict[int, tuple[RouteFailure, datetime | None, str]] = field(default_factory=dict)
    bridges: list[Bridge] = field(default_factory=list)
    cleared_failures: list[int] = field(default_factory=list)
    decided_keys: list[EventKey] = field(default_factory=list)
    released: list[int] = field(default_factory=list)
    blocked_waits: dict[int, tuple[str, int]] = field(default_factory=dict)  # wait -> (reason, event)

    def write(self, event: EventSnapshot, settlement: Settlement, evaluation: Evaluation | None) -> None:
        """Queue exactly what ``settlement`` says happens to ``event``."""
        if settlement.settled:
            self.settle(event, settlement.decision, forget_failure=settlement.forget_failure)
            for bridge in settlement.bridges:
                if bridge.refusal is not None:
                    self.blocked_waits[bridge.wait.id] = (bridge.blocked_reason, event.seq)
                self.bridges.append(bridge)
            return
        if settlement.failure is not None:
            self.failure(
                event.seq, settlement.failure, retry_at=settlement.retry_at, reason=settlement.stored_reason
            )
        elif settlement.stored_reason is not None:
            self.unrouted(
                event.seq,
                settlement.stored_reason,
                waiting_on=settlement.waiting_on,
                retry_at=settlement.retry_at,
            )
        if settlement.remember_keys:
            self.remember_keys(event, evaluation)

    def release(self, seq: int) -> None:
        self.released.append(seq)

    def remember_keys(self, event: EventSnapshot, evaluation: Evaluation | None) -> None:
        """Keep the keys an unsettled Event's route decided, so later input for them waits
        behind it even in another route loop."""
        if evaluation is None or evaluation.decision is None:
            return
        for key in evaluation.decision.keys:
            if key not in event.correlation:
                self.decided_keys.append(
                    EventKey(event_id=event.seq, scope=event.scope, key=key, decided=True)
                )

    def unrouted(self, seq: int, reason: str, *, waiting_on: int | None, retry_at: datetime | None) -> None:
        self.reasons[seq] = (reason, waiting_on, retry_at)

    def failure(self, seq: int, failure: RouteFailure, *, retry_at: datetime | None, reason: str) -> None:
        self.failures[seq] = (failure, retry_at, reason)

    def settle(self, event: EventSnapshot, decision: Decision, *, forget_failure: bool) -> None:
        work_id = decision.work_id
        seq = event.seq
        if decision.new_work:
            self.new_works[work_id] = (event.scope, decision.binding, seq)
        elif decision.reason == Reason.TERMINAL:
            # Terminal Work never changes (R49, I5): the record names it, its row stays as it is;
            # its open pages still refresh to show the record.
            self.shown_works.add(work_id)
        elif work_id is not None:
            self.touched_works.add(work_id)
        for key in decision.attach_keys:
            self.keys.append([event.scope, key, work_id, seq, self.now])
        if decision.effect in INPUT_EFFECTS and work_id is not None and not decision.error:
            attempt = decision.intent_attempt
            self.inputs.append(
                [
                    work_id,
                    seq,
                    seq,
                    decision.binding,
                    decision.input_kind or "queue",
                    "pending",
                    attempt.id if attempt else None,
                    self.now,
                ]
            )
            if attempt is not None:
                self.intents.append(
                    [work_id, attempt.id, attempt.lease_epoch, seq, decision.intent_kind, "pending", self.now]
                )
        if decision.wake_wait is not None:
            self.wakes.append((work_id, decision.wake_wait.id, seq))
        for sub in decision.also_wakes:
            self.wakes.append((sub.work_id, sub.wait.id, seq))
            self.touched_works.add(sub.work_id)
        if decision.timed_out_wait is not None:
            self.timeouts.append((work_id, decision.timed_out_wait.id))
        error = decision.error
        disposition = Disposition.FAILED if error else Disposition.ROUTED
        self.records.append(
            [
                seq,
                work_id,
                event.scope,
                decision.route,
                decision.binding,
                self.generation,
                "failed" if error else decision.policy,
                decision.reason[:500],
                disposition.value,
                list(decision.refusals),
                list(decision.keys),
                error.error_text if error else "",
                error.attempts if error else 0,
                self.now,
                "",
            ]
        )
        self.settled.setdefault(disposition.value, []).append(seq)
        if forget_failure:
            self.cleared_failures.append(seq)

    def flush(self) -> dict[int, int]:
        """Write everything; returns the ids of the Work this window created, by temporary id."""
        ids: dict[int, int] = {}
        if self.new_works:
            temp = list(self.new_works)
            created = _insert(
                Work,
                ("scope", "status", "binding", "trigger", "created_at", "updated_at"),
                [
                    [scope, "ready", binding, seq, self.now, self.now]
                    for scope, binding, seq in (self.new_works[t] for t in temp)
                ],
                returning=True,
            )
            ids = dict(zip(temp, created, strict=True))

        def resolve(rows: list[list], column: int) -> list[list]:
            for row in rows:
                row[column] = ids.get(row[column], row[column])
            return rows

        _insert(CorrelationKey, ("scope", "key", "work", "attached_by", "attached_at"), resolve(self.keys, 2))
        _insert(
            WorkInput,
            ("work", "event", "seq", "binding", "kind", "state", "attempt", "created_at"),
            resolve(self.inputs, 0),
        )
        _insert(
            Intent,
            ("work", "attempt", "lease_epoch", "event", "kind", "state", "created_at"),
            resolve(self.intents, 0),
        )
        _insert(
            RouteRecord,
            (
                "event",
                "work",
                "scope",
                "route",
                "binding",
                "generation",
                "policy",
                "reason",
                "disposition",
                "refusals",
                "keys",
                "error",
                "attempts",
                "decided_at",
                "decided_by",
            ),
            resolve(self.records, 1),
        )
        for state, seqs in self.settled.items():
            Event.objects.filter(seq__in=seqs).update(
                route_state=state,
                routed_at=self.now,
                unrouted_reason="",
                waiting_on=None,
                retry_at=None,
                claimed_by="",
                claimed_until=None,
            )
        if self.touched_works:
            # Never a terminal Work's row (R49), even one another process ended since it was read.
            Work.objects.filter(pk__in=self.touched_works).exclude(status__in=TERMINAL_STATUSES).update(
                version=F("version") + 1, updated_at=self.now
            )
        # The wake bridges the settlements planned, derived through the causal limits; a
        # refused one leaves its diagnostic (R55). A limit spent meanwhile by another writer
        # raises CausalRefused: the window is settled again on fresh reads.
        for bridge in self.bridges:
            envelope = wake_bridge_envelope(
                wait_id=bridge.wait.id, work_id=bridge.work_id, scope=bridge.scope, event_seq=bridge.event_seq
            )
            if bridge.refusal is None:
                self.causal.derive_in_tx(parent=Event(seq=bridge.event_seq), envelope=envelope)
            else:
                refuse(bridge.refusal, clock=lambda: self.now, envelope=envelope)
        # Wait transitions are worklife's (W7: the router records, it runs nothing).
        for _work_id, wait_id, seq in self.wakes:
            wait_wake_in_tx(wait_id=wait_id, event_seq=seq, now=self.now)
        for _work_id, wait_id in self.timeouts:
            wait_time_out_in_tx(wait_id=wait_id, now=self.now)
        failures_forget_in_tx(self.cleared_failures)
        if self.decided_keys:
            EventKey.objects.bulk_create(self.decided_keys, ignore_conflicts=True)
        for wait_id, (reason, seq) in self.blocked_waits.items():
            wait_block_in_tx(wait_id=wait_id, reason=reason, event_seq=seq)
        if self.released:
            Event.objects.filter(seq__in=self.released).update(claimed_by="", claimed_until=None)
        by_reason: dict[tuple[str, int | None, datetime | None], list[int]] = {}
        for seq, reason in self.reasons.items():
            by_reason.setdefault(reason, []).append(seq)
        for (reason, waiting_on, retry_at), seqs in by_reason.items():
            Event.objects.filter(seq__in=seqs).update(
                unrouted_reason=reason[:1000],
                waiting_on_id=waiting_on,
                retry_at=retry_at,
                claimed_by="",
                claimed_until=None,
            )
        for seq, (failure, retry_at, reason) in self.failures.items():
            failure_put_in_tx(seq, failure, self.now)
            Event.objects.filter(seq=seq).update(
                unrouted_reason=reason, waiting_on=None, retry_at=retry_at, claimed_by="", claimed_until=None
            )
        # Open console pages refresh once this window commits (bounded; never raises).
        publish_routed(
            [row[0] for row in self.records] + [*self.reasons, *self.failures],
            self.touched_works | self.shown_works | set(ids.values()),
        )
        return ids


def _insert(model: type, fields: Sequence[str], rows: list[list], *, returning: bool = False) -> list[int]:
    """Insert rows (values in ``fields`` order; every other column takes its field's
    default) with set-based statements: one ``executemany``, or multi-row ``INSERT …
    RETURNING`` chunks when the new primary keys are wanted (in row order, as Django's own
    ``bulk_create`` relies on). JSON and datetime values are prepared by their fields for the
    backend in use, each distinct object once (a window's rows share one timestamp)."""
    if not rows:
        return []
    meta = model._meta
    given = [meta.get_field(name) for name in fields]
    defaults = [f for f in meta.concrete_fields if not f.primary_key and f not in given]
    columns = given + defaults
    default_values = [f.get_default() for f in defaults]
    adapt_json = connection.ops.adapt_json_value
    json_columns = [(i, c.encoder) for i, c in enumerate(columns) if c.get_internal_type() == "JSONField"]
    time_columns = [(i, c) for i, c in enumerate(columns) if c.get_internal_type() == "DateTimeField"]
    times: dict[tuple[int, int], Any] = {}
    values = []
    for row in rows:
        full = [*row, *default_values]
        for index, encoder in json_columns:
            if full[index] is not None:
                full[index] = adapt_json(full[index], encoder)
        for index, column in time_columns:
            key = (index, id(full[index]))
            if key not in times:
                times[key] = column.get_db_prep_save(full[index], connection)
            full[index] = times[key]
        values.append(full)
    quote = connection.ops.quote_name
    head = "INSERT INTO {} ({})".format(quote(meta.db_table), ", ".join(quote(c.column) for c in columns))
    placeholder = "({})".format(", ".join(["%s"] * len(columns)))
    with connection.cursor() as cursor:
        if not returning:
            cursor.executemany(f"{head} VALUES {placeholder}", values)
            return []
        ids: list[int] = []
        chunk = max(1, 900 // len(columns))  # under SQLite's bound-variable limit
        for start in range(0, len(values), chunk):
            part = values[start : start + chunk]
            cursor.execute(
                f"{head} VALUES {', '.join([placeholder] * len(part))} RETURNING {quote(meta.pk.column)}",
                [value for row in part for value in row],
            )
            ids.extend(row[0] for row in cursor.fetchall())
        return ids


def build_router(
    *,
    clock: Clock,
    generation: Generation | None = None,
    options: RouterOptions | None = None,
    pool: HandlerPool | None = None,
) -> Router | None:
    """A router for the live generation (or ``generation``) with the registered handlers and
    executors; ``None`` when no configuration was ever applied."""
    from routing.registry import find_handler_class
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
    from routing.models import Route

    return set(Route.objects.filter(scope__generation=generation).values_list("handler", flat=True))
