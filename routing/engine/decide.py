"""The policy decision: a pure function of (Event snapshot, evaluation, effective scope, the
world the commit reads, clock).

``route_loop`` computes it inside the commit transaction from state it has just read and
writes the result; ``trace`` computes it from the same reads and only shows it. One code
path: a trace cannot disagree with routing (R39).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from infra.frozen import frozen
from routing.engine import reasons
from routing.engine.evaluate import Evaluation
from routing.errors import RouteError, RouteErrorCode
from routing.extension import EventSnapshot
from routing.models import Fallback, Policy
from worklife.models import TERMINAL_STATUSES, InputKind, WorkStatus
from worklife.views import AttemptView, WaitView, WorkView, addressed_binding

if TYPE_CHECKING:
    from routing.config.effective import EffectiveScope

# The states and kinds decisions compare and write, read once from their models' enums (a
# decision runs for every Event; a plain string compares without the enum's lookup).
_READY, _RUNNING, _WAITING = WorkStatus.READY.value, WorkStatus.RUNNING.value, WorkStatus.WAITING.value
_TERMINAL = frozenset(status.value for status in TERMINAL_STATUSES)
_QUEUE, _CONTEXT, _HELD = InputKind.QUEUE.value, InputKind.CONTEXT.value, InputKind.HELD.value
_POLICY_QUEUE, _INJECT, _DROP = Policy.QUEUE.value, Policy.INJECT.value, Policy.DROP.value
_POLICIES = frozenset(policy.value for policy in Policy)
_INTENT_POLICIES = frozenset({Policy.INJECT.value, Policy.INTERRUPT.value})
_FALLBACK_QUEUE, _FALLBACK_DROP = Fallback.QUEUE.value, Fallback.DROP.value


_SHAPES: dict[type, tuple[Callable[[object], tuple], dict[str, int]] | None] = {}


def replace(obj, /, **changes):
    """``dataclasses.replace``, about twice as fast for the dataclasses routing copies per
    Event (every field positional in ``__init__``): their values are read at once and the
    class is called with them, the changes put in place. Any other dataclass goes to
    ``dataclasses.replace``."""
    cls = type(obj)
    shape = _SHAPES.get(cls, False)
    if shape is False:
        fields = dataclasses.fields(cls)
        usable = len(fields) > 1 and all(f.init and not f.kw_only for f in fields)
        names = [f.name for f in fields]
        shape = _SHAPES[cls] = (
            (operator.attrgetter(*names), {name: i for i, name in enumerate(names)}) if usable else None
        )
    if shape is None:
        return dataclasses.replace(obj, **changes)
    read, index = shape
    values = list(read(obj))
    for name, value in changes.items():
        values[index[name]] = value
    return cls(*values)


class Effect:
    """What a decision does. Recorded as the RouteRecord's ``policy``."""

    START = "start"
    QUEUE = "queue"
    INJECT = "inject"
    INTERRUPT = "interrupt"
    HELD = "held"  # for the running attempt, which cannot take it yet (R11)
    DROP = "drop"
    WAKE = "wake"
    UNMATCHED = "unmatched"
    CONFLICT = "conflict"  # not a settlement: the Event stays unrouted (R8)
    ERROR = "error"  # a route failure: the Event stays unrouted or is given up on


class Reason:
    NO_MATCH = "no_match"
    ADDRESSED = "addressed"
    TERMINAL = "terminal"
    CONTEXT = "context"  # kept as context for a waiting Work (R41)
    NO_WORK = "no_work"


INPUT_EFFECTS = frozenset(
    {Effect.START, Effect.QUEUE, Effect.INJECT, Effect.INTERRUPT, Effect.HELD, Effect.WAKE}
)

MANUAL_SOURCE = "core.manual"


# --- the world a decision reads --------------------------------------------------------------


@frozen
class SubscriptionView:
    """An active dependency subscription of a waiting Work to Events of ``scope`` (R42)."""

    id: int
    work_id: int
    work_scope: str
    wait: WaitView
    scope: str
    match: dict


@dataclass(slots=True)
class World:
    """Work, key owners and attempts as the commit transaction reads them; a window's
    earlier decisions are applied to it in memory so later Events see them."""

    now: datetime
    works: dict[int, WorkView] = field(default_factory=dict)
    owners: dict[tuple[str, str], int] = field(default_factory=dict)  # (scope, key) -> work id
    attempt_work: dict[int, int] = field(default_factory=dict)  # execution (attempt) id -> work id
    missing_works: set[int] = field(default_factory=set)
    subscriptions: list[SubscriptionView] = field(default_factory=list)
    # The Work the window starts, by its temporary (negative) id: the seq of the Event that starts it.
    started: dict[int, int] = field(default_factory=dict)
    _next_new: int = -1

    def new_work_id(self) -> int:
        value = self._next_new
        self._next_new -= 1
        return value

    def apply(self, event: EventSnapshot, decision: Decision) -> None:
        """Mirror a decision's effects so the rest of the window decides on them."""
        for sub in decision.also_wakes:
            woken = self.works.get(sub.work_id)
            if woken is not None:
                self.works[sub.work_id] = replace(woken, status=_RUNNING, active_wait=None)
        if decision.work_id is None or decision.effect not in INPUT_EFFECTS:
            return
        work = self.works.get(decision.work_id)
        if work is None:  # started by this decision
            work = WorkView(id=decision.work_id, scope=event.scope, status=_READY, binding=decision.binding)
            self.started[work.id] = event.seq
        status, active_wait, queued_binding = work.status, work.active_wait, work.queued_binding
        if (
            decision.effect in (Effect.START, Effect.QUEUE)
            and decision.binding
            and decision.input_kind == _QUEUE
        ):
            queued_binding = decision.binding
        if decision.effect == Effect.WAKE:
            status, active_wait = _RUNNING, None
        elif decision.timed_out_wait is not None:
            status, active_wait = _READY, None
        # The Work with this input: built by position, in WorkView's field order (one an
        # Event that becomes input; a test checks the order).
        self.works[work.id] = WorkView(
            work.id,
            work.scope,
            status,
            work.binding,
            work.retry_binding,
            work.rebind_binding,
            work.rebind_after_attempt,
            work.active_attempt,
            work.latest_attempt,
            active_wait,
            queued_binding,
            max(work.max_input_seq, event.seq),
        )
        for key in decision.attach_keys:
            self.owners[(event.scope, key)] = work.id


# --- the decision ----------------------------------------------------------------------------


@frozen
class Decision:
    """What routing does with one Event."""

    effect: str
    reason: str = ""
    work_id: int | None = None
    new_work: bool = False
    route: str = ""
    route_scope: str = ""
    binding: str = ""
    input_kind: str = ""  # WorkInput kind when the Event becomes input
    attach_keys: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()  # every key the Event carries (explicit and decided)
    intent_kind: str = ""
    intent_attempt: AttemptView | None = None
    wake_wait: WaitView | None = None
    timed_out_wait: WaitView | None = None
    error: RouteError | None = None
    refusals: tuple[dict, ...] = ()
    evaluation: Evaluation | None = None
    # Waiting Works whose dependency subscription this Event also wakes (R42).
    also_wakes: tuple[SubscriptionView, ...] = ()

    @property
    def settles(self) -> bool:
        """Whether this decision routes the Event (a conflict or an error does not)."""
        return self.effect not in (Effect.CONFLICT, Effect.ERROR)

    @property
    def policy(self) -> str:
        return self.effect


def glob(pattern: str, value: str) -> bool:
    return fnmatch.fnmatchcase(value, pattern)


def wait_matches(wait: WaitView, event: EventSnapshot, keys: Iterable[str]) -> bool:
    """Whether ``event`` satisfies a wait: its type (and source) globs and, when the wait
    names keys, one of them."""
    match = wait.match or {}
    if "type" in match and not glob(match["type"], event.type):
        return False
    if "source" in match and not glob(match["source"], event.source):
        return False
    wanted = match.get("keys") or []
    return not wanted or bool(set(wanted) & set(keys))


def is_addressed(event: EventSnapshot) -> bool:
    """An operator Event that names its Work (R30)."""
    return event.source == MANUAL_SOURCE and not event.type.startswith("core.") and event.work_id is not None


def decide(*, event: EventSnapshot, evaluation: Evaluation, scope: EffectiveScope, world: World) -> Decision:
    """Decide what routing does with ``event`` given its routes' ``evaluation``; an Event that
    settles also wakes the waiting Works whose dependency subscriptions on its scope it
    matches (R42)."""
    decision = _decide(event=event, evaluation=evaluation, scope=scope, world=world)
    if not decision.settles or not world.subscriptions:  # an error never settles
        return decision
    wakes = tuple(sub for sub in world.subscriptions if _subscription_wakes(sub, event, decision, world))
    return replace(decision, also_wakes=wakes) if wakes else decision


def _subscription_wakes(
    sub: SubscriptionView, event: EventSnapshot, decision: Decision, world: World
) -> bool:
    if sub.scope != event.scope or sub.work_id == decision.work_id:
        return False
    work = world.works.get(sub.work_id)
    if (
        work is None
        or work.status != _WAITING
        or work.active_wait is None
        or work.active_wait.id != sub.wait.id
    ):
        return False
    if sub.wait.blocked_reason:
        return False
    return wait_matches(replace(sub.wait, match=sub.match), event, decision.keys)


def _decide(*, event: EventSnapshot, evaluation: Evaluation, scope: EffectiveScope, world: World) -> Decision:
    decided = evaluation.decision
    decided_keys = decided.keys if decided else ()
    if not event.correlation and len(decided_keys) < 2:
        keys = decided_keys  # the usual Event: no explicit key, its route's one (or none)
    else:
        keys = tuple(dict.fromkeys([*event.correlation, *decided_keys]))

    # Identities: every explicit and decided target must name the same Work (R26).
    targets: dict[int, str] = {}
    if event.work_id is not None:
        if event.work_id in world.missing_works or event.work_id not in world.works:
            return _conflict(evaluation, keys, f"work_id {event.work_id} names no Work")
        targets[event.work_id] = "work_id"
    if event.execution_id is not None:
        work_id = world.attempt_work.get(event.execution_id)
        if work_id is None:
            return _conflict(evaluation, keys, f"execution_id {event.execution_id} names no attempt")
        targets.setdefault(work_id, f"execution_id {event.execution_id}")
    if decided is not None and decided.work_id is not None:
        if decided.work_id not in world.works:
            return _conflict(evaluation, keys, f"route chose Work {decided.work_id}, which does not exist")
        targets.setdefault(decided.work_id, "route")
    for key in keys:
        owner = world.owners.get((event.scope, key))
        if owner is not None:
            targets.setdefault(owner, f"key {key}")
    if len(targets) > 1:
        named = ", ".join(f"{_work_named(w, world)} by {how}" for w, how in sorted(targets.items()))
        return _conflict(evaluation, keys, f"conflicting targets: {named}")
    work = world.works[next(iter(targets))] if targets else None
    if work is not None and work.scope != event.scope:
        return _conflict(evaluation, keys, f"Work {work.id} is in scope {work.scope}, not {event.scope}")
    unowned = tuple([k for k in keys if (event.scope, k) not in world.owners])

    if work is None:
        return _decide_new(evaluation, scope, keys, unowned, world)

    if work.terminal:
        # Terminal records are immutable; late input is checkpointed as terminal (R43, R49).
        return Decision(
            Effect.DROP,
            Reason.TERMINAL,
            work_id=work.id,
            keys=keys,
            evaluation=evaluation.bypassed(f"not asked: Work {work.id} is {work.status}"),
        )
    if work.max_input_seq > event.seq:
        return _conflict(evaluation, keys, f"Work {work.id} already has later input #{work.max_input_seq}")

    timed_out = None
    wait = work.active_wait
    if wait is not None and work.status == _WAITING:
        if wait.timeout_at is not None and wait.timeout_at <= world.now:
            # The due timeout wins first: the Work is ready again and the Event routes to it.
            timed_out, wait = wait, None
            work = replace(work, status=_READY, active_wait=None)
        elif wait_matches(wait, event, keys) and not wait.blocked_reason:
            # A wait the causal limits block cannot be woken: the Event is kept as context.
            return Decision(
                Effect.WAKE,
                f"{reasons.WINS_WAIT}{wait.name or wait.id}",
                work_id=work.id,
                input_kind=_QUEUE,
                attach_keys=unowned,
                keys=keys,
                wake_wait=wait,
                evaluation=evaluation.bypassed(
                    f"not asked: the Event {reasons.WINS_WAIT}{wait.name or wait.id}"
                ),
            )
    decision = _decide_existing(event, evaluation, scope, work, keys, unowned)
    return replace(decision, timed_out_wait=timed_out) if timed_out is not None else decision


def _work_named(work_id: int, world: World) -> str:
    """A Work as a reason names it: a Work this window starts has no id yet (its temporary one
    is negative), so it is named by the Event that starts it."""
    starter = world.started.get(work_id) if work_id < 0 else None
    return f"Work {work_id}" if starter is None else f"the Work Event #{starter} starts"


def _decide_new(
    evaluation: Evaluation,
    scope: EffectiveScope,
    keys: tuple,
    unowned: tuple,
    world: World,
) -> Decision:
    if evaluation.error is not None:
        return _error(evaluation, keys, None)
    route = evaluation.route
    if route is None:
        return _unmatched(evaluation, keys)
    if route.policy == _DROP:
        return Decision(Effect.DROP, evaluation.decision.reason, **_through(None, route, keys, evaluation))
    problem = _binding_problem(route, scope)
    if problem is not None:
        return _error(evaluation, keys, None, problem)
    if not route.start:
        return Decision(
            Effect.UNMATCHED,
            Reason.NO_WORK,
            refusals=tuple(evaluation.refusals),
            **_through(None, route, keys, evaluation),
        )
    # The new Work's id is temporary (negative, one per Work the window starts) until the
    # window's commit inserts it.
    return _queued(
        Effect.START, evaluation.decision.reason, world.new_work_id(), True, route, keys, unowned, evaluation
    )


def _decide_existing(
    event: EventSnapshot,
    evaluation: Evaluation,
    scope: EffectiveScope,
    work: WorkView,
    keys: tuple,
    unowned: tuple,
) -> Decision:
    waiting = work.status == _WAITING
    if evaluation.error is not None:
        return _error(evaluation, keys, work.id)
    route = evaluation.route
    if route is None:
        if is_addressed(event):
            binding = addressed_binding(work)
            if binding and binding in scope.bindings:
                return Decision(
                    Effect.QUEUE,
                    Reason.ADDRESSED,
                    work_id=work.id,
                    binding=binding,
                    input_kind=_CONTEXT if waiting else _QUEUE,
                    attach_keys=unowned,
                    keys=keys,
                    evaluation=evaluation,
                )
        return replace(_unmatched(evaluation, keys), work_id=work.id)

    reason = evaluation.decision.reason
    if route.policy == _DROP:
        return Decision(Effect.DROP, reason, **_through(work.id, route, keys, evaluation))
    problem = _binding_problem(route, scope)
    if problem is not None:
        return _error(evaluation, keys, work.id, problem)
    queue = _queued(Effect.QUEUE, reason, work.id, False, route, keys, unowned, evaluation)
    if waiting:
        # Kept as context: the wait still decides (R41).
        return replace(queue, reason=Reason.CONTEXT, input_kind=_CONTEXT)
    attempt = work.active_attempt
    if route.policy == _POLICY_QUEUE or attempt is None or work.status != _RUNNING:
        return queue  # ready or waiting Work queues ordinary input (R35)
    # inject / interrupt for a running attempt (R32, R34, R11)
    if attempt.binding != route.binding:
        why = f"attempt runs binding {attempt.binding}, route selects {route.binding}"
    elif route.policy not in attempt.capabilities:
        why = f"attempt's pinned capabilities lack {route.policy}"
    else:
        return Decision(
            Effect.INJECT if route.policy == _INJECT else Effect.INTERRUPT,
            reason,
            binding=route.binding,
            input_kind=route.policy,
            attach_keys=unowned,
            intent_kind=route.policy,
            intent_attempt=attempt,
            **_through(work.id, route, keys, evaluation),
        )
    if route.fallback == _FALLBACK_QUEUE:
        return replace(queue, reason=f"{reasons.FALLBACK_QUEUE}{why}")
    if route.fallback == _FALLBACK_DROP:
        return Decision(
            Effect.DROP, f"{reasons.FALLBACK_DROP}{why}", **_through(work.id, route, keys, evaluation)
        )
    return Decision(
        Effect.HELD,
        f"{reasons.HELD}{why}",
        binding=route.binding,
        input_kind=_HELD,
        attach_keys=unowned,
        **_through(work.id, route, keys, evaluation),
    )


def _through(work_id: int | None, route, keys: tuple, evaluation: Evaluation) -> dict:
    """The fields of a decision taken through ``route`` (for ``Decision(**...)``)."""
    return {
        "work_id": work_id,
        "route": route.slot,
        "route_scope": route.scope,
        "keys": keys,
        "evaluation": evaluation,
    }


def _queued(
    effect: str,
    reason: str,
    work_id: int,
    new_work: bool,
    route,
    keys: tuple,
    attach_keys: tuple,
    evaluation: Evaluation,
) -> Decision:
    """The Event queued as input of Work ``work_id`` through ``route`` (it starts the Work
    when ``new_work``). Built by position, in Decision's field order: most routed Events
    take this decision, and matching its keywords cost a third of building it."""
    return Decision(
        effect,
        reason,
        work_id,
        new_work,
        route.slot,
        route.scope,
        route.binding,
        _QUEUE,
        attach_keys,
        keys,
        "",
        None,
        None,
        None,
        None,
        (),
        evaluation,
        (),
    )


def _binding_problem(route, scope: EffectiveScope) -> RouteError | None:
    """A route whose binding is gone or cannot take its policy (R10: binding_invalid,
    policy_invalid)."""
    if route.policy not in _POLICIES:
        return RouteError(
            RouteErrorCode.POLICY_INVALID,
            f"route {route.slot}: unknown policy {route.policy!r}",
            route=route.slot,
        )
    binding = scope.bindings.get(route.binding)
    if binding is None:
        return RouteError(
            RouteErrorCode.BINDING_INVALID,
            f"route {route.slot}: binding {route.binding!r} is not in scope {scope.path}",
            route=route.slot,
        )
    if binding.problem:
        return RouteError(
            RouteErrorCode.BINDING_INVALID,
            f"route {route.slot}: binding {route.binding}: {binding.problem}",
            route=route.slot,
        )
    if route.policy in _INTENT_POLICIES and route.policy not in binding.capabilities and not route.fallback:
        return RouteError(
            RouteErrorCode.POLICY_INVALID,
            f"route {route.slot}: binding {route.binding} cannot {route.policy} and the route has no fallback",
            route=route.slot,
        )
    return None


def _unmatched(evaluation: Evaluation, keys: tuple) -> Decision:
    return Decision(
        Effect.UNMATCHED,
        Reason.NO_MATCH,
        keys=keys,
        refusals=tuple(evaluation.refusals),
        evaluation=evaluation,
    )


def _conflict(evaluation: Evaluation, keys: tuple, why: str) -> Decision:
    return Decision(Effect.CONFLICT, why, keys=keys, evaluation=evaluation)


def _error(
    evaluation: Evaluation, keys: tuple, work_id: int | None, error: RouteError | None = None
) -> Decision:
    error = error or evaluation.error
    return Decision(
        Effect.ERROR,
        error.code.value,
        work_id=work_id,
        route=error.route,
        keys=keys,
        error=error,
        # The routes that declined before the failing one stay on the failed record (R28).
        refusals=tuple(evaluation.refusals),
        evaluation=evaluation,
    )
