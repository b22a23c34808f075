"""What a scheduler asks before it runs an attempt (R36).

``attempt_dispatch`` pins an attempt's configuration: the live generation, the binding the
Work runs on next, the executor registration behind that binding and the implementation it
names now, and the capabilities that implementation really supports. ``dispatch_check``
validates a dispatch against the attempt's *pinned* generation — not the live one — and
refuses it when the executor behind the same binding name changed since.
"""

from __future__ import annotations

from dataclasses import dataclass

from causal.clock import Clock
from routing.config import find_generation, live_generation, load_configuration
from routing.decide import addressed_binding
from routing.router import read_work_views
from worklife.executors import find_executor_class, registered_executors, supported_controls
from worklife.models import Attempt
from worklife.services import WorkError, attempt_start


class DispatchRefused(WorkError):
    """The attempt cannot be dispatched; the message says why."""


@dataclass(frozen=True, slots=True)
class DispatchCheck:
    ok: bool
    reason: str = ""


def attempt_dispatch(*, work_id: int, clock: Clock, binding: str | None = None) -> Attempt:
    """Start the Work's next attempt with its configuration pinned to the live generation."""
    generation = live_generation()
    if generation is None:
        raise DispatchRefused("no configuration has been applied")
    views = read_work_views([work_id])
    if work_id not in views:
        raise DispatchRefused(f"Work {work_id} does not exist")
    work = views[work_id]
    name = binding or addressed_binding(work)
    scope = load_configuration(generation).scope(work.scope)
    effective = scope.bindings.get(name) if scope is not None else None
    if effective is None:
        raise DispatchRefused(
            f"binding {name!r} is not in scope {work.scope} (generation {generation.number})"
        )
    if effective.problem:
        raise DispatchRefused(f"binding {name!r}: {effective.problem}")
    return attempt_start(
        work_id=work_id,
        binding=name,
        executor=effective.executor,
        executor_path=registered_executors().get(effective.executor, "") if effective.executor else "",
        generation=generation.number,
        capabilities=effective.capabilities,
        clock=clock,
    )


def dispatch_check(attempt: Attempt) -> DispatchCheck:
    """Validate a dispatch of ``attempt`` against its pinned generation and executor."""
    generation = find_generation(str(attempt.generation))
    work_scope = attempt.work.scope
    scope = load_configuration(generation).scope(work_scope)
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
