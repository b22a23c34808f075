"""Asking a window's routes on the handler pool, outside any transaction, each handler call
under the route deadline of its own (R5, R12); Events backing off are not asked (R14)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from causal.clock import Clock
from routing.config.effective import Configuration, EffectiveScope
from routing.engine.evaluate import Evaluation, RouteVerdict, UnreadableSnapshot, Verdict, evaluate
from routing.engine.failures import failures_read
from routing.engine.handler_pool import CallOutcome, HandlerPool, PoolExhausted
from routing.errors import RouteError, RouteErrorCode
from routing.extension import EventSnapshot


class Asking:
    """A window's routes being asked (:meth:`RouteAsker.ask`): the Events backing off, the
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
        """Each asked Event's evaluation, and the seqs backing off (waits for the pool)."""
        if self._answers is not None:
            self._evaluations.update(self._answers())
            self._answers = None
        return self._evaluations, self._backing_off


class RouteAsker:
    """Asks one configuration generation's routes (its handlers, instantiated once) on a
    handler pool."""

    def __init__(
        self,
        *,
        configuration: Configuration,
        handlers: Mapping[str, Any],
        pool: HandlerPool,
        timeout: float,
        clock: Clock,
    ) -> None:
        self.configuration = configuration
        self.handlers = handlers
        self.pool = pool
        self.timeout = timeout
        self.clock = clock

    def ask(
        self,
        window: Sequence[EventSnapshot],
        *,
        absent: frozenset[int] = frozenset(),
        only: Mapping[int, frozenset[str]] | None = None,
    ) -> Asking:
        """Start asking the routes about the window's Events, except those backing off (R14):
        their handlers are not called before the backoff ends. Events in ``absent`` (a
        trace's hypothetical Event) have no failures to read; an Event in ``only`` is asked
        only about the routes (slots) it names (a trace's filter, R37)."""
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
        return Asking(evaluations, backing_off, self.start(to_evaluate, only=only))

    def evaluate(self, events: Sequence[EventSnapshot]) -> dict[int, Evaluation]:
        """Each Event's evaluation, asked now whatever its failures."""
        return self.start(events)()

    def start(
        self, events: Sequence[EventSnapshot], *, only: Mapping[int, frozenset[str]] | None = None
    ) -> Callable[[], dict[int, Evaluation]]:
        """Ask the routes about ``events`` on the handler pool; the function returned waits
        for the answers and returns each Event's evaluation. ``only`` limits an Event's
        routes to the slots it names, in route order (:func:`limited`)."""
        results: dict[int, Evaluation] = {}
        calls: list[Callable[..., Evaluation]] = []
        scoped: list[tuple[EventSnapshot, EffectiveScope, list[RouteVerdict]]] = []
        handlers = self.handlers
        for event in events:
            scope = self.configuration.scope(event.scope)
            if scope is None:
                # The scope left the configuration: no route can select the Event.
                results[event.seq] = Evaluation(())
                continue
            if only and event.seq in only:
                scope = limited(scope, only[event.seq])
            # The verdicts said before a handler overran its deadline stay the Event's.
            said: list[RouteVerdict] = []
            calls.append(
                lambda steps, snap=event, scope=scope, said=said: evaluate(snap, scope, handlers, steps, said)
            )
            scoped.append((event, scope, said))
        if not calls:
            return lambda: results
        timeout = self.timeout
        try:
            # One step a handler call: each has the whole deadline from its own start (R12).
            started = self.pool.start_all(calls, timeout=timeout, stepped=True)
        except PoolExhausted as exc:
            exhausted = [CallOutcome(exception=exc) for _ in calls]
            started = None

        def answers() -> dict[int, Evaluation]:
            outcomes = exhausted if started is None else started.outcomes()
            for (event, scope, said), outcome in zip(scoped, outcomes, strict=True):
                results[event.seq] = _evaluation_from(outcome, scope, said, timeout)
            return results

        return answers


def limited(scope: EffectiveScope, slots: Collection[str]) -> EffectiveScope:
    """``scope`` with only the routes in ``slots``, in route order: what a trace's filter asks
    (R37), evaluated as routing evaluates the whole scope."""
    return replace(scope, routes=tuple(route for route in scope.routes if route.slot in slots))


def _evaluation_from(
    outcome: CallOutcome, scope: EffectiveScope, said: list[RouteVerdict], timeout: float
) -> Evaluation:
    if outcome.timed_out:
        return _timed_out(scope, outcome.step, said, timeout)
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


def _timed_out(scope: EffectiveScope, slot: str, said: list[RouteVerdict], timeout: float) -> Evaluation:
    """The evaluation of an Event whose route ``slot`` gave no decision within its deadline:
    the routes before it as they answered, it in error, the rest not reached (R12, R16)."""
    routes = scope.routes
    index = next((i for i, r in enumerate(routes) if r.slot == slot), None)
    if index is None:  # the deadline passed before any handler was called
        error = RouteError(RouteErrorCode.HANDLER_TIMEOUT, f"no decision within {timeout:g}s")
        return Evaluation(
            tuple(RouteVerdict(r.slot, r.scope, Verdict.NOT_REACHED) for r in routes), error=error
        )
    route = routes[index]
    message = f"route {slot}: no decision within {timeout:g}s"
    error = RouteError(RouteErrorCode.HANDLER_TIMEOUT, message, route=slot)
    verdicts = (
        *said[:index],
        RouteVerdict(route.slot, route.scope, Verdict.ERROR, message),
        *(RouteVerdict(r.slot, r.scope, Verdict.NOT_REACHED) for r in routes[index + 1 :]),
    )
    return Evaluation(verdicts, route=route, error=error)
