"""The executor contract (Outcome, Execution, Executor), its settings and limits, binding
validation (R2) and the registry that names executors (``CONDUIT_EXECUTORS``)."""

from __future__ import annotations

import abc
import inspect
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from causal.checks import MAX_SOURCE, EnvelopeInvalid, check_string, kind_of, reserved_problem
from infra.plugins import PluginRegistry
from worklife.child import Run

PythonRun = Run  # the name targets of the first version import

logger = logging.getLogger(__name__)

CONTROLS: tuple[str, ...] = ("inject", "interrupt")
"""The optional controls a binding may claim, in a stable order."""


# --- the executor contract ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an attempt ended: ``ok`` with an optional JSON-like ``result``, or an ``error``.

    ``exit_status`` is the process's exit status when a process ran the attempt; a failed
    Python target says what it raised (``error_types``: the class and its bases' names) and
    whether it asked not to be retried, or to be retried after ``retry_after`` seconds
    (``worklife.retry``)."""

    ok: bool
    result: Any = None
    error: str = ""
    exit_status: int | None = None
    error_types: tuple[str, ...] = ()
    non_retryable: bool = False
    retry_after: float | None = None


class Execution(abc.ABC):
    """A handle on one started attempt, returned by :meth:`Executor.start`.

    ``poll`` and ``wait`` are required. The rest have defaults for executors that run
    nothing the loop can talk to: no calls, no output, nothing to end."""

    attempt_id: int
    pid: int | None = None

    @abc.abstractmethod
    def poll(self) -> Outcome | None:
        """The outcome when the attempt has ended, else ``None``; never blocks."""

    @abc.abstractmethod
    def wait(self, timeout: float | None = None) -> Outcome | None:
        """Block up to ``timeout`` seconds (for ever when ``None``) for the outcome."""

    def take_calls(self) -> list[dict]:
        """The attempt API calls the process made since the last time (emit, wait, …)."""
        return []

    def reply(self, call_id: Any, *, ok: bool, value: Any = None, error: str = "") -> None:
        """Answer a call that carried an ``id``."""
        return None

    def send_inputs(self, events: Sequence[Any]) -> bool:
        """Give the running attempt more input (inject); ``False`` when it cannot take it."""
        return False

    def send_interrupt(self, reason: str) -> bool:
        """Tell the running attempt to stop what it is doing; ``False`` when it cannot."""
        return False

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the attempt's process group (no-op without a process)."""
        return None

    def kill(self) -> None:
        """End at once every process the attempt started (``setsid`` included)."""
        return None

    def output(self) -> tuple[str, str]:
        """The last :data:`~worklife.executors.output.OUTPUT_TAIL` bytes of standard output and standard error."""
        return "", ""

    def release(self) -> None:
        """Give back what the execution holds (a reusable worker) once its outcome is in."""
        return None

    def wake_with(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` whenever the loop has something to do for this attempt (a call to
        answer, its outcome), so that an idle loop need not wait out its poll interval; at once
        when it has already. A hint only: the loop polls as well (the default never calls it)."""
        return None


class Executor(abc.ABC):
    """Base class of executors. Subclasses implement :meth:`start`, and optionally ``inject``
    and ``interrupt`` (deliberately not defined here: see the module docstring, R2).

    An executor is instantiated with no arguments; the scheduler passes each attempt's
    binding settings to :meth:`start`.
    """

    @abc.abstractmethod
    def start(
        self,
        *,
        work_id: int,
        attempt_id: int,
        binding_settings: Mapping[str, Any],
        inputs: Sequence[Any],
        traceparent: str = "",
        idempotency_key: str = "",
    ) -> Execution:
        """Start one attempt of a Work with its first inputs; return a handle on it.

        ``traceparent``: the W3C trace context of the Event that triggered the attempt (``""``
        when its sender gave none), for the attempt to continue the sender's trace.
        ``idempotency_key`` is the same for every attempt that presents these inputs again: an
        executor makes its side effects exactly-once with it. An executor whose ``start`` does
        not take one of them is called without it (:func:`start_attempt`)."""

    @classmethod
    def validate_settings(cls, settings: Mapping[str, Any]) -> Iterable[tuple[str, str]]:
        """Yield ``(place, message)`` for each problem in a binding's settings; none here."""
        return ()

    def close(self) -> None:
        """End what the executor keeps between attempts (idle workers)."""
        return None


@lru_cache(maxsize=64)
def _start_takes(cls: type, name: str) -> bool:
    parameters = inspect.signature(cls.start).parameters.values()
    return any(p.name == name or p.kind is p.VAR_KEYWORD for p in parameters)


# What the runner passes to ``start`` beyond the contract's first version: only to a ``start``
# that takes it.
OPTIONAL_START_ARGUMENTS = ("traceparent", "idempotency_key")


def start_attempt(executor: Executor, **arguments: Any) -> Execution:
    """``executor.start(**arguments)``, leaving out each of :data:`OPTIONAL_START_ARGUMENTS`
    that is empty or that its ``start`` does not take (an executor written before it was
    passed)."""
    for name in OPTIONAL_START_ARGUMENTS:
        if name in arguments and not (arguments[name] and _start_takes(type(executor), name)):
            del arguments[name]
    return executor.start(**arguments)


def unknown_settings(settings: Mapping[str, Any], allowed: Iterable[str]) -> Iterator[tuple[str, str]]:
    allowed = tuple(allowed)
    for key in settings:
        if key not in allowed:
            yield str(key), f"unknown setting {key!r} (expected one of: {', '.join(allowed)})"


# Settings every process executor takes: the run-time bound, the interrupt's grace, and the
# sources its attempts may emit as beside their Work's own (conduit.work/<id>).
TIMING_SETTINGS = ("timeout", "interrupt_grace")
EMIT_SOURCES = "emit_sources"
COMMON_SETTINGS = (*TIMING_SETTINGS, EMIT_SOURCES)


# --- binding validation (R2) -------------------------------------------------------------


class BindingInvalid(ValueError):
    """A binding cannot be used as declared. ``problems`` lists ``(place, message)`` with
    places relative to the binding (``controls``, ``settings.target``, ``executor``)."""

    def __init__(self, name: str, problems: Sequence[tuple[str, str]]) -> None:
        self.name = name
        self.problems = list(problems)
        detail = "; ".join(f"{place}: {message}" for place, message in self.problems)
        super().__init__(f"binding {name!r}: {detail}")


def implements(cls: type, control: str) -> bool:
    """Whether ``cls`` really implements ``control`` as a method (its own or inherited).

    A flag, a constant or ``None`` under that name is not an implementation (R2).
    """
    attr = inspect.getattr_static(cls, control, None)
    if isinstance(attr, staticmethod | classmethod):
        attr = attr.__func__
    return inspect.isfunction(attr)


def supported_controls(cls: type | None) -> frozenset[str]:
    """The optional controls ``cls`` implements (none for a queue-only binding)."""
    if cls is None:
        return frozenset()
    return frozenset(control for control in CONTROLS if implements(cls, control))


def validate_binding(
    name: str,
    executor_name: str,
    executor_cls: type | None,
    settings: Mapping[str, Any],
    controls: Iterable[str],
) -> frozenset[str]:
    """Check a binding against its executor implementation; return its capabilities (R2).

    A control is supported only if ``executor_cls`` implements it as a method; a queue-only
    binding (no executor) may not claim any. Settings are checked by the class's
    ``validate_settings``. Raises :class:`BindingInvalid` listing every problem.
    """
    problems: list[tuple[str, str]] = []
    claimed: list[str] = []
    for index, control in enumerate(controls):
        if control not in CONTROLS:
            problems.append(
                (
                    f"controls[{index}]",
                    f"unknown control {control!r} (expected one of: {', '.join(CONTROLS)})",
                )
            )
        elif control in claimed:
            problems.append((f"controls[{index}]", f"control {control!r} is listed twice"))
        else:
            claimed.append(control)
    if executor_cls is None:
        if executor_name:
            problems.append(("executor", f"executor {executor_name!r} is not registered"))
        elif claimed:
            problems.append(
                (
                    "controls",
                    f"a queue-only binding (no executor) cannot claim controls: {', '.join(claimed)}",
                )
            )
        elif settings:
            problems.append(("settings", "a queue-only binding (no executor) takes no settings"))
    else:
        label = f"executor {executor_name!r} ({executor_cls.__module__}.{executor_cls.__qualname__})"
        if not implements(executor_cls, "start"):
            problems.append(("executor", f"{label} has no start method"))
        missing = [control for control in claimed if not implements(executor_cls, control)]
        if missing:
            problems.append(("controls", f"{label} does not implement {', '.join(missing)}"))
        check = getattr(executor_cls, "validate_settings", None)
        if callable(check):
            problems.extend((f"settings.{place}", message) for place, message in check(settings))
    if problems:
        raise BindingInvalid(name, problems)
    return frozenset(claimed)


# --- the registry ------------------------------------------------------------------------


class ExecutorMissing(LookupError):
    """No executor is registered under the name (or its registration cannot be loaded)."""


# The registry of ``CONDUIT_EXECUTORS``: a name that is not registered, or whose path cannot be
# imported or is not a class, raises ExecutorMissing saying which.
EXECUTORS = PluginRegistry(setting="CONDUIT_EXECUTORS", kind="executor", missing=ExecutorMissing)


def registered_executors() -> dict[str, str]:
    """``CONDUIT_EXECUTORS`` as read now: registration name -> dotted path."""
    return EXECUTORS.registered()


def executor_class(name: str) -> type:
    """The executor class registered as ``name``.

    Raises :class:`ExecutorMissing` when the name is not registered or its path cannot be
    imported (the message says which).
    """
    return EXECUTORS.load(name)


def find_executor_class(name: str) -> type | None:
    """The executor class registered as ``name``, or ``None`` when there is none usable."""
    return EXECUTORS.find(name)


@dataclass(frozen=True, slots=True)
class ExecutorInfo:
    """A registration as listed by :func:`executor_catalog`."""

    name: str
    path: str
    controls: frozenset[str] = field(default_factory=frozenset)
    problem: str = ""


def executor_catalog() -> list[ExecutorInfo]:
    """Every registered executor with the controls it implements, or why it cannot load."""
    catalog = []
    for name, path in sorted(registered_executors().items()):
        try:
            cls = executor_class(name)
        except ExecutorMissing as exc:
            catalog.append(ExecutorInfo(name=name, path=path, problem=str(exc)))
        else:
            catalog.append(ExecutorInfo(name=name, path=path, controls=supported_controls(cls)))
    return catalog


def common_settings_problems(settings: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    for key in TIMING_SETTINGS:
        value = settings.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            yield key, f"expected a positive number of seconds, got {value!r}"
    yield from emit_sources_problems(settings)


def emit_sources_of(settings: Mapping[str, Any]) -> tuple[str, ...]:
    """The sources a binding's attempts may emit as beside their Work's own: its
    ``emit_sources`` setting (validated with the configuration; refused again at each emit
    when reserved)."""
    value = settings.get(EMIT_SOURCES)
    if not isinstance(value, list | tuple):
        return ()
    return tuple(source for source in value if isinstance(source, str) and source)


def emit_sources_problems(settings: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """Problems of the ``emit_sources`` setting: a list of sources, each within acceptance's
    limits and none reserved (``core.*``, ``conduit.work/…``)."""
    value = settings.get(EMIT_SOURCES)
    if value is None:
        return
    if not isinstance(value, list | tuple):
        yield EMIT_SOURCES, f"expected a list of sources the binding's Work may emit as, got {kind_of(value)}"
        return
    for index, source in enumerate(value):
        place = f"{EMIT_SOURCES}[{index}]"
        try:
            check_string(source, "source", MAX_SOURCE)
        except EnvelopeInvalid as invalid:
            yield place, invalid.message
            continue
        reserved = reserved_problem(source=source)
        if reserved is not None:
            yield place, f"{reserved.message} (a Work emits as conduit.work/<its id> without saying so)"
