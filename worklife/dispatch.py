"""What the work loop asks before it runs an attempt (R36).

Each attempt pins its configuration: the live generation, the binding the Work runs on next,
the executor registration behind that binding and the implementation it names now, and the
capabilities that implementation really supports. :func:`dispatch_check` validates a dispatch
against the attempt's *pinned* generation — not the live one — and refuses it when the
executor behind the same binding name changed since.

The configuration itself is routing's: the loop is handed a reader of it
(:class:`Configurations`, ``routing.engine.configurations.LiveConfigurations``) that returns
generations as values; every decision made with them is taken here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol

from causal.clock import Clock
from worklife.attempts import AttemptSpec, attempt_refused_in_tx, attempts_start_in_tx
from worklife.calls import Scopes
from worklife.errors import WorkError
from worklife.executors import find_executor_class, registered_executors, supported_controls
from worklife.flow import NO_FLOW, Candidate, FlowPolicy, Hold, flow_admit_in_tx
from worklife.models import Attempt
from worklife.retry import RetryPolicy, retry_policy_from
from worklife.views import addressed_binding, read_work_views


class DispatchRefused(WorkError):
    """The attempt cannot be dispatched; the message says why."""


@dataclass(frozen=True, slots=True)
class Dispatched:
    """An attempt started for a scheduler, with its binding's executor settings."""

    attempt: Attempt
    settings: dict[str, Any]
    retry: RetryPolicy | None = None


@dataclass(frozen=True, slots=True)
class DispatchCheck:
    ok: bool
    reason: str = ""


class FlowHeld(WorkError):
    """Flow control holds the Work (its hold is recorded on its row already): not a refusal."""

    def __init__(self, hold: Hold) -> None:
        super().__init__(hold.text)
        self.hold = hold


class QueueOnly(DispatchRefused):
    """The Work's binding has no executor: its input waits in the queue, nothing runs."""

    queue_only = True


# --- the configuration, as the work loop reads it ----------------------------------------------


class Binding(Protocol):
    """A binding visible in a scope: its executor (``""``: queue-only), its settings, the
    claimed controls its implementation really supports, and why it cannot run (``""``)."""

    @property
    def executor(self) -> str: ...

    @property
    def settings(self) -> Mapping[str, Any]: ...

    @property
    def capabilities(self) -> frozenset[str]: ...

    @property
    def problem(self) -> str: ...

    @property
    def flow(self) -> FlowPolicy:
        """Its flow control (``worklife.flow``): limits, priority, debounce, batch."""
        ...


class Scope(Protocol):
    """A scope's bindings by name."""

    @property
    def bindings(self) -> Mapping[str, Binding]: ...


class Configuration(Protocol):
    """One generation's effective configuration (immutable)."""

    def scope(self, path: str) -> Scope | None:
        """The scope declared at ``path``, or ``None``."""
        ...


@dataclass(frozen=True, slots=True)
class AppliedGeneration:
    """An applied generation: its number and its effective configuration."""

    number: int
    configuration: Configuration


class Configurations(Scopes, Protocol):
    """What the work loop reads of the configuration (``routing.engine.configurations``): the
    live generation, an applied one by number, and the checks of its attempts' calls
    (:class:`~worklife.calls.Scopes`)."""

    def live(self) -> AppliedGeneration | None:
        """The live generation, or ``None`` before the first apply."""
        ...

    def applied(self, number: int) -> AppliedGeneration:
        """The applied generation numbered ``number`` (applied generations never change)."""
        ...


# --- the decisions -----------------------------------------------------------------------------


def binding_settings(
    attempt: Attempt, configurations: Configurations, pinned: AppliedGeneration | None = None
) -> dict[str, Any]:
    """The executor settings of the attempt's binding in its pinned generation (plain JSON);
    ``pinned`` is that generation when the caller has it already."""
    pinned = pinned or configurations.applied(attempt.generation)
    scope = pinned.configuration.scope(attempt.work.scope)
    binding = scope.bindings.get(attempt.binding) if scope is not None else None
    return _thaw(binding.settings) if binding is not None else {}


def binding_retry(
    attempt: Attempt, configurations: Configurations, pinned: AppliedGeneration | None = None
) -> RetryPolicy | None:
    """The retry policy of the attempt's binding in its pinned generation (``None``: the
    defaults); a binding reader without ``retry`` declares none."""
    pinned = pinned or configurations.applied(attempt.generation)
    scope = pinned.configuration.scope(attempt.work.scope)
    binding = scope.bindings.get(attempt.binding) if scope is not None else None
    return retry_policy_from(getattr(binding, "retry", None))


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_thaw(v) for v in value]
    return value


def dispatch_check(
    attempt: Attempt, configurations: Configurations, pinned: AppliedGeneration | None = None
) -> DispatchCheck:
    """Validate a dispatch of ``attempt`` against its pinned generation and executor;
    ``pinned`` is that generation when the caller has it already."""
    pinned = pinned or configurations.applied(attempt.generation)
    work_scope = attempt.work.scope
    scope = pinned.configuration.scope(work_scope)
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


def dispatch_many_in_tx(
    *,
    work_ids: Sequence[int],
    configurations: Configurations,
    clock: Clock,
    lease_until: datetime,
    lease_owner: str,
) -> dict[int, Dispatched | WorkError]:
    """Start the next attempt of each Work in the caller's transaction, pinned to the live
    generation and checked against the pinned one (R36), several Work in a fixed number of
    statements: by Work id, the attempt with its executor settings, or the ``WorkError`` saying
    why it was refused (:class:`QueueOnly` for a binding with no executor). A refused Work is
    left with no live attempt: an attempt refused once started is ended (failed, with the
    reason)."""
    results: dict[int, Dispatched | WorkError] = {}
    generation = configurations.live()
    if generation is None:
        return {work_id: DispatchRefused("no configuration has been applied") for work_id in work_ids}
    configuration = generation.configuration
    views = read_work_views(work_ids)
    specs = []
    candidates: list[Candidate] = []
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
            candidates.append(
                Candidate(
                    work_id,
                    name,
                    getattr(effective, "scope", work.scope),
                    getattr(effective, "flow", NO_FLOW) or NO_FLOW,
                )
            )
    now = clock()
    # Flow control (concurrency, throttle, debounce, batch) admits the specs or holds them.
    admission = flow_admit_in_tx(candidates=candidates, now=now)
    for work_id, hold in admission.held.items():
        results[work_id] = FlowHeld(hold)
    specs = [
        replace(
            spec,
            concurrency_key=admission.admitted[spec.work_id][0],
            throttle_key=admission.admitted[spec.work_id][1],
        )
        for spec in specs
        if spec.work_id in admission.admitted
    ]
    if admission.locked:
        # Read after the gates' locks: an attempt's start is then after the end of every attempt
        # the admission did not count (its start and end times show the limit held).
        now = clock()
    started = attempts_start_in_tx(specs=specs, now=now, lease_until=lease_until, lease_owner=lease_owner)
    for work_id, attempt in started.items():
        if isinstance(attempt, WorkError):
            results[work_id] = attempt
            continue
        check = dispatch_check(attempt, configurations, generation)
        if not check.ok:
            # The attempt exists: it ends here, or it would stay running with no process
            # (and hold its Work) until its lease lapsed.
            refused = DispatchRefused(f"dispatch refused: {check.reason}")
            attempt_refused_in_tx(attempt=attempt, reason=str(refused), now=now)
            results[work_id] = refused
        else:
            results[work_id] = Dispatched(
                attempt,
                binding_settings(attempt, configurations, generation),
                binding_retry(attempt, configurations, generation),
            )
    return results
