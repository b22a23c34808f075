"""Executor implementations for tests, registered through ``settings.CONDUIT_EXECUTORS``."""

from __future__ import annotations

from worklife.executors import Execution, Executor, Outcome, PythonExecutor


class Finished(Execution):
    """An attempt that ended as soon as it started: ok, its result the inputs it was given."""

    def __init__(self, attempt_id, inputs):
        self.attempt_id = attempt_id
        self.outcome = Outcome(ok=True, result=list(inputs))

    def poll(self):
        return self.outcome

    def wait(self, timeout=None):
        return self.outcome


class Instant(Executor):
    """Starts attempts that finish at once (the tests here are about controls, not runs)."""

    def start(self, *, work_id, attempt_id, binding_settings, inputs):
        return Finished(attempt_id, inputs)


class FlagOnly(Instant):
    """Claims inject and interrupt by flags only: it implements neither (R2)."""

    inject = True
    interrupt = None
    capabilities = frozenset({"inject", "interrupt"})
    supports_inject = True


class InheritsPython(PythonExecutor):
    """Inherits PythonExecutor's real inject and interrupt methods."""


class InjectOnly(Instant):
    """Implements inject (a real method) but not interrupt."""

    def inject(self, *, attempt_id, inputs):
        return None


class NotAnExecutor:
    """Has no start method."""


def echo(run):
    """A Python target: returns its inputs, then what is injected until interrupted."""
    seen = list(run.inputs)
    while not run.interrupted.is_set():
        item = run.receive(timeout=0.05)
        if item is not None:
            seen.append(item)
    while (item := run.receive(timeout=0)) is not None:  # what was injected before the interrupt
        seen.append(item)
    return {"seen": seen, "reason": run.interrupt_reason, "work_id": run.work_id}


def boom(run):
    """A Python target that fails."""
    raise RuntimeError("agent crashed")
