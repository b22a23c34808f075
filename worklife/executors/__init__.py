"""Executors: what runs an attempt of Work, and the registry that names them.

One module a concept: :mod:`~worklife.executors.base` (the contract, binding validation, the
registry), :mod:`~worklife.executors.environment`, :mod:`~worklife.executors.output`,
:mod:`~worklife.executors.containment`, :mod:`~worklife.executors.process` (the child and its
pipes), :mod:`~worklife.executors.python` and :mod:`~worklife.executors.command`. The dotted
names ``worklife.executors.PythonExecutor`` and ``worklife.executors.CommandExecutor`` are the
ones ``CONDUIT_EXECUTORS`` uses.

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

from infra.plugins import RegistrationError, import_dotted, split_dotted
from worklife.executors.base import (
    COMMON_SETTINGS,
    CONTROLS,
    BindingInvalid,
    Execution,
    Executor,
    ExecutorInfo,
    ExecutorMissing,
    Outcome,
    PythonRun,
    emit_sources_of,
    executor_catalog,
    executor_class,
    find_executor_class,
    implements,
    registered_executors,
    start_attempt,
    supported_controls,
    validate_binding,
)
from worklife.executors.command import CommandExecution, CommandExecutor
from worklife.executors.process import ProcessExecution
from worklife.executors.python import PythonExecution, PythonExecutor

__all__ = [
    "BindingInvalid",
    "COMMON_SETTINGS",
    "CONTROLS",
    "CommandExecution",
    "CommandExecutor",
    "Execution",
    "Executor",
    "ExecutorInfo",
    "ExecutorMissing",
    "Outcome",
    "ProcessExecution",
    "PythonExecution",
    "PythonExecutor",
    "PythonRun",
    "RegistrationError",
    "emit_sources_of",
    "executor_catalog",
    "executor_class",
    "find_executor_class",
    "implements",
    "import_dotted",
    "registered_executors",
    "split_dotted",
    "start_attempt",
    "supported_controls",
    "validate_binding",
]
