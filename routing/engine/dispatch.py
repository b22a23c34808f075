"""What a scheduler asks before it runs an attempt (R36).

:class:`RoutingDispatcher` pins each attempt's configuration: the live generation, the binding
the Work runs on next, the executor registration behind that binding and the implementation it
names now, and the capabilities that implementation really supports. ``dispatch_check``
validates a dispatch against the attempt's *pinned* generation — not the live one — and
refuses it when the executor behind the same binding name changed since.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from causal.clock import Clock
from routing.config.effective import Configuration
from routing.config.selectors import find_generation, live_generation, load_configuration
from routing.config.validate import is_scope_path
from routing.engine.decide import addressed_binding
from routing.engine.world import read_work_views
from routing.models import Generation
from worklife.attempts import AttemptSpec, attempt_refused_in_tx, attempts_start_in_tx
from worklife.errors import WorkError
from worklife.executors import find_executor_class, registered_executors, supported_controls
from worklife.models import Attempt


class DispatchRefused(WorkError):
    """The attempt cannot be dispatched; the message says why."""


@dataclass(frozen=True, slots=True)
class Dispatched:
    """An attempt started for a scheduler, with its binding's executor settings."""

    attempt: Attempt
    settings: dict[str, Any]


@dataclass(frozen=True, slots=True)
class DispatchCheck:
    ok: bool
    reason: str = ""


class QueueOnly(DispatchRefused):
    """The Work's binding has no executor: its input waits in the queue, nothing runs."""

    queue_only = True


class ConfigurationCache:
    """Effective configurations by generation: a generation never changes once applied, so a
    scheduler reads each one once."""

    def __init__(self, size: int = 8) -> None:
        self._size = size
        self._by_id: dict[int, Configuration] = {}
        self._generations: dict[int, Generation] = {}

    def generation(self, number: int) -> Generation:
        """The generation numbered ``number`` (applied generations never change)."""
        found = self._generations.get(number)
        if found is None:
            found = find_generation(str(number))
            self._generations[number] = found
        return found

    def get(self, generation: Generation) -> Configuration:
        configuration = self._by_id.get(generation.pk)
        if configuration is None:
            configuration = load_configuration(generation)
            if len(self._by_id) >= self._size:
                self._by_id.pop(next(iter(self._by_id)))
            self._by_id[generation.pk] = configuration
        return configuration


def binding_settings(attempt: Attempt, configurations: ConfigurationCache | None = None) -> dict[str, Any]:
    """The executor settings of the attempt's binding in its pinned generation (plain JSON)."""
    cache = configurations or ConfigurationCache()
    configuration = cache.get(cache.generation(attempt.generation))
    scope = configuration.scope(attempt.work.scope)
    binding = scope.bindings.get(attempt.binding) if scope is not None else None
    return _thaw(binding.settings) if binding is not None else {}


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_thaw(v) for v in value]
    return value


def dispatch_check(attempt: Attempt, configurations: ConfigurationCache | None = None) -> DispatchCheck:
    """Validate a dispatch of ``attempt`` against its pinned generation and executor."""
    cache = configurations or ConfigurationCache()
    work_scope = attempt.work.scope
    scope = cache.get(cache.generation(attempt.generation)).scope(work_scope)
    binding = scope.bindings.get(attempt.binding) if scope is not None else None
    if binding is None:
        return DispatchCheck(
            False,
            f"binding {attempt.binding!r} is not in scope {work_scope} in generation {attempt.generation}",
        )
    if binding.executor != attempt.executor:
        return DispatchCheck(
            False,
            f"binding {attempt.binding!r} runs executor {binding.executor!r}, the attempt pinned {attempt.executor!r}",
        )
    if not attempt.executor:
        return DispatchCheck(True)
    path = registered_executors().get(attempt.executor)
    if path != attempt.executor_path:
        return DispatchCheck(
            False,
            f"executor {attempt.executor!r} is now {path!r}, the attempt pinned {attempt.executor_path!r}",
        )
    cls = find_executor_class(attempt.executor)
    missing = set(attempt.capabilities) - set(supported_controls(cls))
    if cls is None or missing:
        return DispatchCheck(False, f"executor {attempt.executor!r} no longer supports {sorted(missing)}")
    return DispatchCheck(True)


def _unusable(executor: str, capabilities: Iterable[str]) -> str:
    """Why a binding's executor cannot run an attempt now (its registration cannot be loaded,
    or no longer implements a control the binding claims), or ``""``."""
    cls = find_executor_class(executor)
    if cls is None:
        return f"executor {executor!r} cannot be loaded"
    missing = set(capabilities) - set(supported_controls(cls))
    return f"executor {executor!r} no longer supports {sorted(missing)}" if missing else ""


class RoutingDispatcher:
    """The dispatcher ``work_loop`` gives its runner (``worklife.runner.Dispatcher``): attempts
    pinned to the live generation and checked against the pinned one (R36), several Work in
    a fixed number of statements, with their executor settings. A refused Work is left with no
    live attempt: an attempt refused once started is ended (failed, with the reason)."""

    def __init__(self) -> None:
        self.configurations = ConfigurationCache()

    def scope_problem(self, *, scope: str, binding: str = "") -> str:
        """Why the live generation has no scope ``scope`` (or no binding ``binding`` in it), or
        ``""``: what an attempt's wait on another scope (R42) and its child's binding are
        checked against."""
        if not is_scope_path(scope):
            return (
                f"{scope!r} is not a scope path (segments of letters, digits, '.', '_' or '-' joined by '/')"
            )
        generation = live_generation()
        if generation is None:
            return "no configuration has been applied"
        effective = self.configurations.get(generation).scope(scope)
        if effective is None:
            return f"unknown scope {scope!r}: it is not in the live configuration (generation {generation.number})"
        if binding and binding not in effective.bindings:
            return f"binding {binding!r} is not in scope {scope} (generation {generation.number})"
        return ""

    def dispatch_many_in_tx(
        self, *, work_ids: Sequence[int], clock: Clock, lease_until: datetime, lease_owner: str
    ) -> dict[int, Dispatched | WorkError]:
        results: dict[int, Dispatched | WorkError] = {}
        generation = live_generation()
        if generation is None:
            return {work_id: DispatchRefused("no configuration has been applied") for work_id in work_ids}
        configuration = self.configurations.get(generation)
        views = read_work_views(work_ids)
        specs = []
        for work_id in work_ids:
            work = views.get(work_id)
            if work is None:
                results[work_id] = DispatchRefused(f"Work {work_id} does not exist")
                continue
            name = addressed_binding(work)
            scope = configuration.scope(work.scope)
            effective = scope.bindings.get(name) if scope is not None else None
            if effective is None:
                results[work_id] = DispatchRefused(
                    f"binding {name!r} is not in scope {work.scope} (generation {generation.number})"
                )
            elif effective.problem:
                results[work_id] = DispatchRefused(f"binding {name!r}: {effective.problem}")
            elif not effective.executor:
                results[work_id] = QueueOnly(f"binding {name!r} is queue-only: its input waits in the queue")
            elif unusable := _unusable(effective.executor, effective.capabilities):
                # Refused before an attempt exists: a recheck every DISPATCH_RECHECK leaves no rows.
                results[work_id] = DispatchRefused(f"binding {name!r}: {unusable}")
            else:
                specs.append(
                    AttemptSpec(
                        work_id=work_id,
                        binding=name,
                        executor=effective.executor,
                        generation=generation.number,
                        capabilities=effective.capabilities,
                        executor_path=registered_executors().get(effective.executor, ""),
                    )
                )
        now = clock()
        started = attempts_start_in_tx(specs=specs, now=now, lease_until=lease_until, lease_owner=lease_owner)
        for work_id, attempt in started.items():
            if isinstance(attempt, WorkError):
                results[work_id] = attempt
                continue
            check = dispatch_check(attempt, self.configurations)
            if not check.ok:
                # The attempt exists: it ends here, or it would stay running with no process
                # (and hold its Work) until its lease lapsed.
                refused = DispatchRefused(f"dispatch refused: {check.reason}")
                attempt_refused_in_tx(attempt=attempt, reason=str(refused), now=now)
                results[work_id] = refused
            else:
                results[work_id] = Dispatched(attempt, binding_settings(attempt, self.configurations))
        return results
