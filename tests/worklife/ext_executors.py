"""Executor implementations for tests, registered through ``settings.CONDUIT_EXECUTORS``."""

from __future__ import annotations

from worklife.executors import Executor, PythonExecutor


class FlagOnly(Executor):
    """Claims inject and interrupt by flags only: it implements neither (R2)."""

    inject = True
    interrupt = None
    capabilities = frozenset({"inject", "interrupt"})
    supports_inject = True

    def start(self, *, work_id, attempt_id, binding_settings, inputs):
        raise NotImplementedError


class InheritsPython(PythonExecutor):
    """Inherits PythonExecutor's real inject and interrupt methods."""


class InjectOnly(Executor):
    """Implements inject (a real method) but not interrupt."""

    def start(self, *, work_id, attempt_id, binding_settings, inputs):
        raise NotImplementedError

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
