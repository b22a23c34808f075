"""Executors: what runs an attempt of Work, and the registry that names them.

An executor class is registered in ``CONDUIT_EXECUTORS`` (name -> dotted path, either
``"pkg.mod.Class"`` or ``"pkg.mod:Class"``) and a binding names it. The router never calls an
executor (R33); a scheduler starts attempts with :meth:`Executor.start`.

Optional controls (R2). ``inject`` (give a running attempt more input) and ``interrupt`` (ask
it to stop what it is doing) are optional. An implementation supports a control only when its
class really implements it, as a method named after the control::

    class MyExecutor(Executor):
        def start(self, *, work_id, attempt_id, binding_settings, inputs) -> Execution: ...
        def inject(self, *, attempt_id, inputs) -> None: ...           # optional
        def interrupt(self, *, attempt_id, reason="") -> None: ...     # optional

The base class defines neither, so a subclass that does not write them does not support
them; a capability flag (``inject = True``, ``capabilities = {"inject"}``) establishes
nothing. A binding claims the controls it wants in the configuration and
:func:`validate_binding` refuses a claim the implementation cannot honour.

An executor class may also check its binding settings at configuration time with a
classmethod ``validate_settings(settings) -> Iterable[tuple[str, str]]`` yielding
``(place inside settings, message)`` for each problem.
"""

from __future__ import annotations

import abc
import importlib
import inspect
import json
import logging
import os
import queue
import re
import subprocess
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from django.conf import settings as django_settings

logger = logging.getLogger(__name__)

CONTROLS: tuple[str, ...] = ("inject", "interrupt")
"""The optional controls a binding may claim, in a stable order."""


# --- loading dotted paths ----------------------------------------------------------------


class RegistrationError(ImportError):
    """A registered dotted path cannot be imported, or names the wrong kind of object."""


_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def split_dotted(path: str) -> tuple[str, str]:
    """Split ``"pkg.mod:Attr"`` or ``"pkg.mod.Attr"`` into ``("pkg.mod", "Attr")``.

    The part after a colon may itself be dotted (``"pkg.mod:Outer.Inner"``).
    """
    if not isinstance(path, str):
        raise RegistrationError(f"expected a dotted path string, got {type(path).__name__}")
    if ":" in path:
        module, _, attr = path.partition(":")
    else:
        module, _, attr = path.rpartition(".")
    if not module or not attr or not _DOTTED.match(module) or not _DOTTED.match(attr):
        raise RegistrationError(f"{path!r} is not a dotted path like 'pkg.mod.Name' or 'pkg.mod:Name'")
    return module, attr


@lru_cache(maxsize=256)
def import_dotted(path: str) -> Any:
    """Import and return the object a dotted path names (cached per path).

    Raises :class:`RegistrationError` naming the path when the module or attribute is
    missing.
    """
    module_name, attr = split_dotted(path)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise RegistrationError(f"cannot import {module_name!r} for {path!r}: {exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise RegistrationError(f"{module_name!r} has no attribute {attr!r} (from {path!r})") from None
    return obj


# --- the executor contract ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an attempt ended: ``ok`` with an optional JSON-like ``result``, or an ``error``."""

    ok: bool
    result: Any = None
    error: str = ""


class Execution(abc.ABC):
    """A handle on one started attempt, returned by :meth:`Executor.start`."""

    attempt_id: int

    @abc.abstractmethod
    def poll(self) -> Outcome | None:
        """The outcome when the attempt has ended, else ``None``; never blocks."""

    @abc.abstractmethod
    def wait(self, timeout: float | None = None) -> Outcome | None:
        """Block up to ``timeout`` seconds (for ever when ``None``) for the outcome."""


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
    ) -> Execution:
        """Start one attempt of a Work with its first inputs; return a handle on it."""

    @classmethod
    def validate_settings(cls, settings: Mapping[str, Any]) -> Iterable[tuple[str, str]]:
        """Yield ``(place, message)`` for each problem in a binding's settings; none here."""
        return ()


def _settings_keys(settings: Mapping[str, Any], allowed: Iterable[str]) -> Iterator[tuple[str, str]]:
    allowed = tuple(allowed)
    for key in settings:
        if key not in allowed:
            yield str(key), f"unknown setting {key!r} (expected one of: {', '.join(allowed)})"


# --- PythonExecutor ----------------------------------------------------------------------

_TARGET = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")


class PythonRun:
    """What a Python target receives: the attempt, its inputs, and the controls.

    The target is called as ``target(run)`` on its own thread. It reads injected input with
    :meth:`receive` and should return soon after :attr:`interrupted` is set.
    """

    def __init__(
        self, *, work_id: int, attempt_id: int, settings: Mapping[str, Any], inputs: Sequence[Any]
    ) -> None:
        self.work_id = work_id
        self.attempt_id = attempt_id
        self.settings = settings
        self.inputs = tuple(inputs)
        self.interrupted = threading.Event()
        self.interrupt_reason = ""
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def receive(self, timeout: float | None = None) -> Any | None:
        """The next injected input, waiting up to ``timeout`` seconds; ``None`` if none came."""
        try:
            return self._inbox.get(timeout=timeout) if timeout != 0 else self._inbox.get_nowait()
        except queue.Empty:
            return None


class PythonExecution(Execution):
    """A Python target running on a thread."""

    def __init__(self, run: PythonRun, target: Any) -> None:
        self.attempt_id = run.attempt_id
        self.run = run
        self._target = target
        self._outcome: Outcome | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._main, name=f"conduit-attempt-{run.attempt_id}", daemon=True
        )

    def _main(self) -> None:
        try:
            result = self._target(self.run)
        except Exception as exc:  # noqa: BLE001 - the attempt thread's boundary: logged, the attempt fails
            logger.exception("executor.python.failed", extra={"attempt_id": self.attempt_id})
            self._outcome = Outcome(ok=False, error=f"{type(exc).__name__}: {exc}")
        else:
            self._outcome = Outcome(ok=True, result=result)
        finally:
            if self._outcome is None:  # SystemExit and the like end the thread without a result
                self._outcome = Outcome(ok=False, error="the target exited without a result")
            self._done.set()

    def poll(self) -> Outcome | None:
        return self._outcome if self._done.is_set() else None

    def wait(self, timeout: float | None = None) -> Outcome | None:
        self._done.wait(timeout)
        return self.poll()


class PythonExecutor(Executor):
    """Runs a Python function in-process: settings ``{"target": "module:function"}``.

    The function is called with a :class:`PythonRun`. Implements ``inject`` (queues input the
    function reads with ``run.receive()``) and ``interrupt`` (sets ``run.interrupted``).
    """

    def __init__(self) -> None:
        self._runs: dict[int, PythonExecution] = {}
        self._lock = threading.Lock()

    @classmethod
    def validate_settings(cls, settings: Mapping[str, Any]) -> Iterable[tuple[str, str]]:
        """``target`` is required and must look like ``"package.module:function"``."""
        problems = list(_settings_keys(settings, ("target",)))
        target = settings.get("target")
        if target is None:
            problems.append(("target", "required: the function to run, as 'package.module:function'"))
        elif not isinstance(target, str) or not _TARGET.match(target):
            problems.append(("target", f"{target!r} is not a 'package.module:function' reference"))
        return problems

    def start(
        self,
        *,
        work_id: int,
        attempt_id: int,
        binding_settings: Mapping[str, Any],
        inputs: Sequence[Any],
    ) -> PythonExecution:
        """Import the target and run it on its own thread."""
        target = import_dotted(binding_settings["target"])
        if not callable(target):
            raise RegistrationError(f"{binding_settings['target']!r} is not callable")
        run = PythonRun(work_id=work_id, attempt_id=attempt_id, settings=binding_settings, inputs=inputs)
        execution = PythonExecution(run, target)
        with self._lock:
            self._forget_finished()
            if attempt_id in self._runs:
                raise ValueError(f"attempt {attempt_id} is already running")
            self._runs[attempt_id] = execution
        execution._thread.start()
        return execution

    def inject(self, *, attempt_id: int, inputs: Sequence[Any]) -> None:
        """Hand more input to a running attempt, in order."""
        run = self._running(attempt_id).run
        for item in inputs:
            run._inbox.put(item)

    def interrupt(self, *, attempt_id: int, reason: str = "") -> None:
        """Ask a running attempt to stop what it is doing."""
        run = self._running(attempt_id).run
        run.interrupt_reason = reason
        run.interrupted.set()

    def _running(self, attempt_id: int) -> PythonExecution:
        with self._lock:
            execution = self._runs.get(attempt_id)
        if execution is None or execution.poll() is not None:
            raise LookupError(f"attempt {attempt_id} is not running on this executor")
        return execution

    def _forget_finished(self) -> None:
        for attempt_id in [a for a, e in self._runs.items() if e.poll() is not None]:
            del self._runs[attempt_id]


# --- CommandExecutor ---------------------------------------------------------------------


class CommandExecution(Execution):
    """A child process; exit status 0 is success, its stdout the result text."""

    def __init__(self, attempt_id: int, process: subprocess.Popen[bytes], stdin: bytes) -> None:
        self.attempt_id = attempt_id
        self.process = process
        self._outcome: Outcome | None = None
        self._lock = threading.Lock()
        # communicate() feeds stdin and drains stdout/stderr without deadlocking on full pipes.
        self._reader = threading.Thread(target=self._communicate, args=(stdin,), daemon=True)
        self._reader.start()

    def _communicate(self, stdin: bytes) -> None:
        out, err = self.process.communicate(stdin)
        code = self.process.returncode
        text = out.decode("utf-8", errors="replace")
        if code == 0:
            outcome = Outcome(ok=True, result=text)
        else:
            tail = err.decode("utf-8", errors="replace").strip()[-500:]
            outcome = Outcome(
                ok=False, result=text, error=f"exit status {code}" + (f": {tail}" if tail else "")
            )
        with self._lock:
            self._outcome = outcome

    def poll(self) -> Outcome | None:
        with self._lock:
            return self._outcome

    def wait(self, timeout: float | None = None) -> Outcome | None:
        self._reader.join(timeout)
        return self.poll()


class CommandExecutor(Executor):
    """Runs a command: settings ``{"argv": [...], "cwd": "...", "env": {...}}`` (``cwd`` and
    ``env`` optional).

    The process gets ``CONDUIT_WORK_ID`` and ``CONDUIT_ATTEMPT_ID`` in its environment and
    its inputs as a JSON array on stdin. It implements no optional control.
    """

    @classmethod
    def validate_settings(cls, settings: Mapping[str, Any]) -> Iterable[tuple[str, str]]:
        """``argv`` is a non-empty list of strings; ``cwd`` a string; ``env`` string to string."""
        problems = list(_settings_keys(settings, ("argv", "cwd", "env")))
        argv = settings.get("argv")
        if argv is None:
            problems.append(("argv", "required: the command to run, as a list of strings"))
        elif not isinstance(argv, Sequence) or isinstance(argv, str) or not argv:
            problems.append(("argv", "expected a non-empty list of strings"))
        else:
            for index, arg in enumerate(argv):
                if not isinstance(arg, str):
                    problems.append((f"argv[{index}]", f"expected a string, got {type(arg).__name__}"))
        cwd = settings.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            problems.append(("cwd", "expected a string"))
        env = settings.get("env")
        if env is not None:
            if not isinstance(env, Mapping):
                problems.append(("env", "expected a mapping of names to strings"))
            else:
                for name, value in env.items():
                    if not isinstance(value, str):
                        problems.append((f"env.{name}", "expected a string (quote numbers)"))
        return problems

    def start(
        self,
        *,
        work_id: int,
        attempt_id: int,
        binding_settings: Mapping[str, Any],
        inputs: Sequence[Any],
    ) -> CommandExecution:
        """Start the command with the inputs on stdin."""
        env = dict(os.environ)
        env.update(binding_settings.get("env") or {})
        env["CONDUIT_WORK_ID"] = str(work_id)
        env["CONDUIT_ATTEMPT_ID"] = str(attempt_id)
        process = subprocess.Popen(
            list(binding_settings["argv"]),
            cwd=binding_settings.get("cwd") or None,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        payload = json.dumps(list(inputs), default=str).encode("utf-8")
        return CommandExecution(attempt_id, process, payload)


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


def registered_executors() -> dict[str, str]:
    """``CONDUIT_EXECUTORS`` as read now: registration name -> dotted path."""
    return dict(getattr(django_settings, "CONDUIT_EXECUTORS", {}) or {})


def executor_class(name: str) -> type:
    """The executor class registered as ``name``.

    Raises :class:`ExecutorMissing` when the name is not registered or its path cannot be
    imported (the message says which).
    """
    path = registered_executors().get(name)
    if path is None:
        raise ExecutorMissing(f"executor {name!r} is not registered")
    try:
        cls = import_dotted(path)
    except RegistrationError as exc:
        raise ExecutorMissing(
            f"executor {name!r} is registered as {path!r} but cannot be loaded: {exc}"
        ) from exc
    if not inspect.isclass(cls):
        raise ExecutorMissing(f"executor {name!r} is registered as {path!r}, which is not a class")
    return cls


def find_executor_class(name: str) -> type | None:
    """The executor class registered as ``name``, or ``None`` when there is none usable."""
    try:
        return executor_class(name)
    except ExecutorMissing:
        return None


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
