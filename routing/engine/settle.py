"""Settlement: one Event's evaluation and the world it meets, turned into its outcome.

The one path from "the routes said this" to "this is what happens to the Event", called by the
route commit (which then writes exactly what it returns) and by trace (which only shows it),
so a trace cannot disagree with routing (R39):

- deduplication: an Event whose ``(source, id)`` is already accepted is stored as nothing;
- ordering: an Event that shares a target with earlier unrouted input waits behind it (I4);
- backoff: within a retryable failure's backoff the handlers are not asked (R14);
- the decision itself (:func:`routing.engine.decide.decide`), a decision that raises being a panic;
- failure counting and the give-up prediction (R13–R16);
- the wake bridge of a won wait (R41) and of dependency subscriptions (R42), each judged by the
  causal limits first: a refused wake blocks the wait, holds the Work and keeps the Event as
  context.

It reads no Work, key or Event itself: the world and the failures counted so far come in, read
by the caller (:func:`routing.engine.window.settle_window`); the causal limits' verdict on a
wake bridge comes in as an object that reads the causal counts when asked
(:class:`~routing.engine.world.BridgeVerdicts`). The :class:`Settler` mirrors each outcome into
the in-memory world so later Events of the same window see it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from causal.models import RouteState
from infra.frozen import frozen
from routing.engine.decide import Decision, Effect, Reason, WaitView, World, decide, replace
from routing.engine.evaluate import Evaluation, panic
from routing.engine.failures import RouteFailure, backoff_for, gives_up
from routing.errors import RouteError, RouteErrorCode
from routing.extension import EventSnapshot

if TYPE_CHECKING:
    from causal.limits import Refusal
    from routing.config.effective import Configuration
    from routing.engine.ratelimit import RateLimits

# An Event whose routing failed unexpectedly, and whose failure could not even be recorded, is
# looked at again after this long (an operator may skip it sooner).
CONFLICT_RECHECK = timedelta(seconds=60)
DUPLICATE = "duplicate"  # not a route state: acceptance stores nothing
# An outcome's reason, nothing stored: the Event shares a target with an earlier Event another
# route loop is committing beside this window (PostgreSQL), so it is settled after that commit,
# by the same loop, on the same evaluation.
BEHIND_COMMIT_BESIDE = "behind an earlier Event committing beside this window"
# An Event a paused route holds is looked at again after this long (a resume releases it sooner).
PAUSE_RECHECK = timedelta(seconds=30)
HELD_BY_PAUSE = "held by a paused route"


class BridgeLimits(Protocol):
    """The causal limits' verdict on deriving a wake bridge from an Event (a read)."""

    def refusal(self, event: EventSnapshot) -> Refusal | None:
        """Why a bridge derived from ``event`` now would be refused, or ``None``; a bridge not
        refused counts as planned for the next verdict on the same root."""


@frozen
class Bridge:
    """A ``core.wait.woken`` bridge an Event derives to wake ``wait`` of ``work_id`` (R41, R42),
    with the causal limits' verdict: refused, the wait is blocked with the reason instead."""

    wait: WaitView
    work_id: int
    scope: str
    event_seq: int
    refusal: Refusal | None = None

    @property
    def blocked_reason(self) -> str:
        if self.refusal is None:
            return ""
        return f"causal limits refuse the wake ({self.refusal.kind}): {self.refusal.detail}"[:500]


@frozen
class Settlement:
    """What happens to one Event: settled (``routed``/``failed``), left unrouted with why, or
    a duplicate. The route commit writes exactly this; trace shows it."""

    seq: int
    state: str  # a RouteState value, or DUPLICATE
    decision: Decision | None = None
    error: RouteError | None = None
    reason: str = ""  # why it is still unrouted, in short (the outcome's reason)
    stored_reason: str | None = None  # the Event's unrouted_reason to store; None: left as it is
    waiting_on: int | None = None
    retry_at: datetime | None = None
    failure: RouteFailure | None = None  # counted and stored: the Event stays unrouted
    forget_failure: bool = False  # settled: the failures counted on it are forgotten
    remember_keys: bool = False  # unsettled: keep the keys its route decided (others wait behind)
    bridges: tuple[Bridge, ...] = ()
    held: str = ""  # the Work's wait is blocked by the causal limits: why (R41)
    # An earlier Event of the window won the wait of the Work this Event routes to: (its seq,
    # the wait). Nothing is stored: trace reports it (R41).
    won_first: tuple[int, WaitView] | None = None

    @property
    def settled(self) -> bool:
        return self.state in (RouteState.ROUTED, RouteState.FAILED, RouteState.SKIPPED)

    @classmethod
    def settled_by(
        cls,
        seq: int,
        decision: Decision,
        *,
        forget_failure: bool,
        bridges: tuple[Bridge, ...],
        held: str,
        won_first: tuple[int, WaitView] | None = None,
    ) -> Settlement:
        """The settlement of an Event ``decision`` routes (``failed`` when it carries the
        error routing gave up with). Built by position, in the fields' order: one a settled
        Event of every window."""
        state = RouteState.FAILED if decision.error else RouteState.ROUTED
        return cls(
            seq,
            state,
            decision,
            decision.error,
            "",
            None,
            None,
            None,
            None,
            forget_failure,
            False,
            bridges,
            held,
            won_first,
        )


def duplicate(seq: int, accepted: int) -> Settlement:
    """An Event whose ``(source, id)`` is already accepted as ``accepted``: acceptance stores
    nothing, so nothing is routed (deduplication)."""
    return Settlement(seq, DUPLICATE, reason=f"already accepted as Event #{accepted}")


class Settler:
    """Settles a window's Events in acceptance order against one world read."""

    def __init__(
        self,
        *,
        world: World,
        blocked: dict[tuple, int],
        configuration: Configuration,
        options,
        failures: Mapping[int, RouteFailure],
        limits: BridgeLimits,
        in_flight: dict[tuple, int] | None = None,
        route_holds: Mapping[tuple[str, str], str] | None = None,
        rate_limits: RateLimits | None = None,
    ) -> None:
        self.world = world
        # The window's rate limits (None: no route of the configuration declares one).
        self.rate_limits = rate_limits
        # Paused routes by (declaring scope, slot): the line the Events they hold record.
        self.route_holds = route_holds or {}
        self.blocked = blocked
        # Targets of earlier Events other loops are committing beside this window, and of the
        # window's Events left for after those commits (BEHIND_COMMIT_BESIDE): target -> earliest seq.
        self.in_flight = in_flight if in_flight is not None else {}
        self.configuration = configuration
        self.options = options
        self.failures = failures
        self.limits = limits
        # The waits the window's Events have won so far: Work id -> (the winner's seq, the wait).
        self.won: dict[int, tuple[int, WaitView]] = {}

    def settle(self, event: EventSnapshot, evaluation: Evaluation | None) -> Settlement:
        """Settle ``event``; ``evaluation`` is ``None`` for an Event that backs off (its handlers
        were not asked)."""
        world = self.world
        blocked = self.blocked
        in_flight = self.in_flight
        # The Event's targets matter only when something blocks one (an earlier unrouted
        # Event, one committing beside) or when it blocks them itself, settling unrouted:
        # usually neither, and then they are not worked out (event_tokens reads nothing that
        # settling it changes first).
        tokens = event_tokens(event, evaluation, world) if blocked or in_flight else None
        behind = (
            min((blocked[t] for t in tokens if t in blocked and blocked[t] < event.seq), default=None)
            if tokens
            else None
        )
        if behind is not None:
            reason = f"waiting behind earlier input #{behind}"
            block(blocked, tokens, event.seq)
            return Settlement(
                event.seq,
                RouteState.UNROUTED,
                reason=reason,
                stored_reason=reason,
                waiting_on=behind,
                remember_keys=True,
            )
        if in_flight:
            if self.rate_limits is not None:
                # The rate limit's counter is a target beside other loops' commits only: an
                # Event counting in it waits for an earlier one committing beside (which it
                # counts), never for one left unrouted.
                tokens = tokens | self.rate_limits.tokens(event.seq)
            beside = min(
                (in_flight[t] for t in tokens if t in in_flight and in_flight[t] < event.seq), default=None
            )
            if beside is not None:
                return self._beside(event, tokens, beside)
        failure = self.failures.get(event.seq)
        if evaluation is None and failure is None:
            # Backing off when the pass began, its failures forgotten since (an operator's
            # reroute, R22): nothing is written, and its routes are asked in the next pass.
            self._block(event, evaluation, tokens)
            return Settlement(event.seq, RouteState.UNROUTED, reason="retry")
        if evaluation is None:
            error = failure.as_error()
            self._block(event, evaluation, tokens)
            # Nothing is written: the Event keeps its reason and its retry time.
            return Settlement(
                event.seq,
                RouteState.UNROUTED,
                error=error,
                reason=error.code.value,
                retry_at=error.backoff_until,
            )
        scope = self.configuration.scope_or_empty(event.scope)
        try:
            decision = decide(event=event, evaluation=evaluation, scope=scope, world=world)
        except Exception as exc:  # noqa: BLE001 - one Event's decision never fails the window
            error = panic(exc, "deciding this Event failed unexpectedly")
            # Counted below as every error is, which gives it its code as reason. The routes
            # were asked: what they answered is kept (R28), for the record and the trace.
            decision = Decision(
                Effect.ERROR,
                error=error,
                refusals=tuple(evaluation.refusals),
                evaluation=evaluation,
            )
        if decision.effect == Effect.CONFLICT:
            # Counted like a retried failure (R13-R15): it backs off and is given up on after
            # the count and the window, dead-lettered without a Work (its targets disagree).
            # Until then it stays unrouted, saying why (R8), and holds its targets' later input.
            counted = self._count(event, _conflict_error(decision), failure)
            if isinstance(counted, Settlement):
                self._block(event, evaluation, tokens)
                why = f"conflicting identity (failure {counted.error.attempts}): {decision.reason}"
                return replace(counted, decision=decision, stored_reason=why[:1000], remember_keys=True)
            decision = counted
        if decision.effect == Effect.ERROR:
            counted = self._count(event, decision, failure)
            if isinstance(counted, Settlement):
                self._block(event, evaluation, tokens)
                return counted
            decision = counted
        if self.route_holds and decision.route:
            line = self.route_holds.get((decision.route_scope, decision.route))
            if line is not None:
                # A paused route: routing goes on, its Event stays unrouted and holds its
                # targets' later input (acceptance order), until a resume releases it.
                self._block(event, evaluation, tokens)
                return Settlement(
                    event.seq,
                    RouteState.UNROUTED,
                    decision,
                    reason=HELD_BY_PAUSE,
                    stored_reason=line[:1000],
                    retry_at=world.now + PAUSE_RECHECK,
                    remember_keys=True,
                )
        if decision.also_wakes and in_flight:
            # A wake through a dependency subscription names no target of the woken Work: an
            # earlier Event committing beside this window may win the same wait (R41, R42).
            earliest = min(in_flight.values())
            if earliest < event.seq:
                return self._beside(event, tokens, earliest)
        if self.rate_limits is not None and decision.route:
            # Over its route's rate limit, an Event the route would take is dropped instead.
            decision = self.rate_limits.settle(event, decision, evaluation)
        won_first = self.won.get(decision.work_id) if self.won and decision.work_id is not None else None
        bridges: list[Bridge] = []
        if decision.effect == Effect.WAKE:
            decision, bridge = self._wake(event, decision)
            bridges.append(bridge)
            if decision.effect == Effect.WAKE:
                self.won[decision.work_id] = (event.seq, decision.wake_wait)
        if decision.also_wakes:
            decision, woken = self._subscription_wakes(event, decision)
            bridges.extend(woken)
            for sub in decision.also_wakes:
                self.won[sub.work_id] = (event.seq, sub.wait)
        held = ""
        work = world.works.get(decision.work_id) if decision.work_id is not None else None
        if decision.reason == Reason.CONTEXT and work is not None and work.active_wait is not None:
            wait = work.active_wait
            if wait.blocked_reason:
                held = f"wait {wait.name or wait.id} is blocked by the causal limits ({wait.blocked_reason})"
        world.apply(event, decision)
        return Settlement.settled_by(
            event.seq,
            decision,
            forget_failure=failure is not None,
            bridges=tuple(bridges),
            held=held,
            won_first=won_first,
        )

    def _beside(self, event: EventSnapshot, tokens: set[tuple], behind: int) -> Settlement:
        """``event`` waits for the commit of ``behind``, an earlier Event committing beside
        this window: nothing is written, and the window's later Events sharing a target with
        it wait too (acceptance order on every target)."""
        block(self.in_flight, tokens, event.seq)
        return Settlement(event.seq, RouteState.UNROUTED, reason=BEHIND_COMMIT_BESIDE, waiting_on=behind)

    def _block(self, event: EventSnapshot, evaluation: Evaluation | None, tokens: set[tuple] | None) -> None:
        """Record that ``event``, settling unrouted, blocks its targets (``tokens``, when they
        were worked out already): later input for them waits behind it (I4)."""
        if tokens is None:
            tokens = event_tokens(event, evaluation, self.world)
        block(self.blocked, tokens, event.seq)

    # -- failures (R13–R18) -------------------------------------------------------------------
    def _count(
        self, event: EventSnapshot, decision: Decision, failure: RouteFailure | None
    ) -> Decision | Settlement:
        """Count a route failure on its Event: the decision to record when routing gives up
        on it (dead-letters it), else the Settlement that leaves it unrouted, backing off."""
        now = self.world.now
        error = decision.error
        count = (failure.count if failure else 0) + 1
        first = (failure.first_failed_at if failure else None) or now
        if gives_up(error=error, failures=count, first_failed_at=first, now=now, options=self.options):
            error = replace(error, attempts=count)
            return replace(decision, error=error, reason=error.code.value)
        until = now + backoff_for(count)  # retried: one that is not is given up on at once
        error = replace(error, attempts=count, backoff_until=until)
        counted = RouteFailure(
            code=error.code.value,
            route=error.route,
            error=error.error_text,
            count=count,
            first_failed_at=first,
            last_failed_at=now,
            backoff_until=until,
            generation=self.configuration.label,
        )
        return Settlement(
            event.seq,
            RouteState.UNROUTED,
            decision,
            error=error,
            reason=error.code.value,
            stored_reason=f"{error.code.value} (failure {count}): {error.message}"[:1000],
            retry_at=until,
            failure=counted,
        )

    # -- wakes (R41, R42) -----------------------------------------------------------------------
    def _wake(self, event: EventSnapshot, decision: Decision) -> tuple[Decision, Bridge]:
        """The won wait's bridge, judged by the causal limits; refused, the wait is blocked with
        the reason, the Work held and the Event kept as context (R41)."""
        wait = decision.wake_wait
        bridge = Bridge(wait, decision.work_id, event.scope, event.seq, self.limits.refusal(event))
        if bridge.refusal is None:
            return decision, bridge
        self._block_wait(decision.work_id, wait, bridge.blocked_reason)
        held = replace(
            decision, effect=Effect.QUEUE, reason=Reason.CONTEXT, input_kind="context", wake_wait=None
        )
        return held, bridge

    def _subscription_wakes(self, event: EventSnapshot, decision: Decision) -> tuple[Decision, list[Bridge]]:
        """Dependency subscriptions wake through the same bridge and the same limits (R42)."""
        bridges = []
        woken = []
        for sub in decision.also_wakes:
            bridge = Bridge(sub.wait, sub.work_id, sub.work_scope, event.seq, self.limits.refusal(event))
            bridges.append(bridge)
            if bridge.refusal is None:
                woken.append(sub)
            else:
                self._block_wait(sub.work_id, sub.wait, bridge.blocked_reason)
        return replace(decision, also_wakes=tuple(woken)), bridges

    def _block_wait(self, work_id: int, wait: WaitView, reason: str) -> None:
        work = self.world.works.get(work_id)
        if work is not None and work.active_wait is not None and work.active_wait.id == wait.id:
            self.world.works[work_id] = replace(work, active_wait=replace(wait, blocked_reason=reason))
        self.world.subscriptions = [
            replace(s, wait=replace(s.wait, blocked_reason=reason)) if s.wait.id == wait.id else s
            for s in self.world.subscriptions
        ]


def _conflict_error(conflict: Decision) -> Decision:
    """The failure a conflicting identity counts as: no route or Work is at fault."""
    error = RouteError(RouteErrorCode.CONFLICTING_IDENTITY, f"conflicting identity: {conflict.reason}")
    return Decision(
        Effect.ERROR, error.code.value, keys=conflict.keys, error=error, evaluation=conflict.evaluation
    )


def event_tokens(snap: EventSnapshot, evaluation: Evaluation | None, world: World) -> set[tuple]:
    """The targets an Event touches: its keys (explicit and decided), its Work."""
    tokens: set[tuple] = set()
    keys = list(snap.correlation)
    if evaluation is not None and evaluation.decision is not None:
        keys.extend(evaluation.decision.keys)
        if evaluation.decision.work_id is not None:
            tokens.add(("work", evaluation.decision.work_id))
    for key in keys:
        tokens.add(("key", snap.scope, key))
        owner = world.owners.get((snap.scope, key))
        if owner is not None:
            tokens.add(("work", owner))
    if snap.work_id is not None:
        tokens.add(("work", snap.work_id))
    if snap.execution_id is not None and snap.execution_id in world.attempt_work:
        tokens.add(("work", world.attempt_work[snap.execution_id]))
    return tokens


def block(blocked: dict[tuple, int], tokens: Iterable[tuple], seq: int) -> None:
    """Record that ``seq`` blocks ``tokens``: later input for them waits behind it (I4)."""
    for token in tokens:
        if token not in blocked or blocked[token] > seq:
            blocked[token] = seq


@frozen
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
    def of(cls, settlement: Settlement, work_ids: Mapping[int, int] | None = None) -> RouteOutcome:
        """The outcome of ``settlement``; its decision names the Work by the id the commit
        gave it when it started it (``work_ids``: the real id of each temporary one)."""
        decision = settlement.decision
        if work_ids and decision is not None and decision.work_id in work_ids:
            decision = replace(decision, work_id=work_ids[decision.work_id])
        # Positional (seq, state, decision, error, reason, record_id, waiting_on, settlement):
        # one an Event of every window.
        return cls(
            settlement.seq,
            settlement.state,
            decision,
            settlement.error,
            settlement.reason,
            None,
            settlement.waiting_on,
            settlement,
        )
