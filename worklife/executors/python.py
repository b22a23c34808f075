"""The ``python`` executor: a target function called with ``run`` in a worker process, reused
only for the same binding environment after an attempt that ended normally."""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.conf import settings as django_settings

from worklife.executors.base import (
    COMMON_SETTINGS,
    Executor,
    Outcome,
    common_settings_problems,
    unknown_settings,
)
from worklife.executors.environment import env_of_binding, env_setting_problems, inherited_environment
from worklife.executors.process import ChildProcess, ProcessExecution, overlong_error, parse_call

# --- PythonExecutor ----------------------------------------------------------------------

_TARGET = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")


class _Worker:
    """A ``python -m worklife.child`` process that runs Python targets one attempt at a time."""

    def __init__(self, binding_env: Mapping[str, str] | None = None) -> None:
        self.current: PythonExecution | None = None
        self.binding_env = dict(binding_env or {})
        env = {**inherited_environment(), **self.binding_env}
        # The worker imports ``worklife.child`` and the targets from where this loop imports
        # them (the project, its virtualenv): the loop's own import path, after the binding's.
        paths = [self.binding_env.get("PYTHONPATH", ""), *sys.path]
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        env["PYTHONUNBUFFERED"] = "1"
        self.process = ChildProcess(
            [sys.executable, "-m", "worklife.child"],
            env=env,
            cwd=str(getattr(django_settings, "BASE_DIR", "") or "") or None,
            on_call=self._on_call,
            on_stdout=self._on_stdout,
            on_overlong=self._on_overlong,
        )
        self.pid = self.process.pid
        self._watcher = threading.Thread(target=self._watch, name=f"conduit-worker-{self.pid}", daemon=True)
        self._watcher.start()

    def _on_call(self, line: bytes) -> None:
        message = parse_call(line)
        execution = self.current
        if message is None or execution is None:
            return
        if message["op"] == "result":
            error = message.get("error", "")
            if message.get("traceback"):
                execution.stderr.add(message["traceback"].encode("utf-8", errors="replace"))
            self.current = None
            execution._finish(Outcome(ok=bool(message.get("ok")), result=message.get("value"), error=error))
            return
        execution._call(message)

    def _on_stdout(self, line: bytes) -> None:
        execution = self.current
        if execution is not None:
            execution.stdout.add(line)

    def _on_overlong(self, limit: int) -> None:
        """A call (a result) over the line limit: the attempt fails and the worker ends (its
        target may be waiting for an answer that cannot come)."""
        execution, self.current = self.current, None
        if execution is not None:
            execution._tainted = True
            execution._finish(Outcome(ok=False, error=overlong_error(limit)))
        self.process.kill()

    def _watch(self) -> None:
        code = self.process.popen.wait()
        self.process.containment.end()
        self.process.join_readers()
        execution, self.current = self.current, None
        if execution is not None:
            stderr = self.process.stderr.text().strip()[-500:]
            execution.stderr.add(self.process.stderr.text().encode("utf-8", errors="replace"))
            execution._finish(
                Outcome(
                    ok=False,
                    error=f"the Python worker exited with status {code}" + (f": {stderr}" if stderr else ""),
                    exit_status=code,
                )
            )

    @property
    def alive(self) -> bool:
        return self.process.exited() is None

    def run(self, execution: PythonExecution, message: dict) -> bool:
        self.current = execution
        if not self.process.send(message):
            self.current = None
            return False
        return True


class PythonExecution(ProcessExecution):
    """An attempt of a Python target, run by a worker process of its own."""

    def __init__(self, attempt_id: int, worker: _Worker, pool: PythonExecutor) -> None:
        super().__init__(attempt_id)
        self.worker = worker
        self.pid = worker.pid
        self._pool = pool
        self._tainted = False

    def reply(self, call_id: Any, *, ok: bool, value: Any = None, error: str = "") -> None:
        self.worker.process.send({"kind": "reply", "id": call_id, "ok": ok, "value": value, "error": error})

    def send_inputs(self, events: Sequence[Any]) -> bool:
        return all(self.worker.process.send({"kind": "input", "event": e, "injected": True}) for e in events)

    def send_interrupt(self, reason: str) -> bool:
        self._tainted = True  # an interrupted target may leave state behind: not reused
        return self.worker.process.send({"kind": "interrupt", "reason": reason})

    def signal(self, signum: int) -> None:
        self._tainted = True
        self.worker.process.signal(signum)

    def kill(self) -> None:
        self._tainted = True
        self.worker.process.kill()

    def release(self) -> None:
        self._pool._give_back(self.worker, reusable=not self._tainted and self.poll() is not None)


class PythonExecutor(Executor):
    """Runs a Python function in a worker process: settings ``{"target": "module:function"}``
    (plus ``params``, a mapping the function reads as ``run.params``, ``env``, variables added
    to the worker's environment, ``timeout``, ``interrupt_grace`` and ``emit_sources``).

    The worker's environment is built, never inherited: the allow-list of the loop's own
    (:data:`ENV_ALLOWED`), the binding's ``env``, ``PYTHONPATH`` (the binding's, then the
    loop's import path, so the worker imports what the loop imports) and, while an attempt
    runs, ``CONDUIT_WORK_ID`` and ``CONDUIT_ATTEMPT_ID``. A worker is reused only for a
    binding with the same ``env``, and only when its attempt left no process running (else it
    is ended with them: :class:`Containment`).

    The function is called with a :class:`worklife.child.Run`. A worker whose attempt ended
    normally runs the next attempt (no start-up cost); one that was interrupted, timed out,
    cancelled or crashed is ended. Implements ``inject`` (input the function reads with
    ``run.receive()``) and ``interrupt`` (sets ``run.interrupted``).
    """

    IDLE_WORKERS = 16

    def __init__(self) -> None:
        self._idle: list[_Worker] = []
        self._runs: dict[int, PythonExecution] = {}
        self._lock = threading.Lock()

    @classmethod
    def validate_settings(cls, settings: Mapping[str, Any]) -> Iterable[tuple[str, str]]:
        """``target`` is required and must look like ``"package.module:function"``; ``env``
        maps names to strings."""
        problems = list(unknown_settings(settings, ("target", "params", "env", *COMMON_SETTINGS)))
        problems.extend(env_setting_problems(settings))
        params = settings.get("params")
        if params is not None and not isinstance(params, Mapping):
            problems.append(("params", "expected a mapping (the target reads it as run.params)"))
        target = settings.get("target")
        if target is None:
            problems.append(("target", "required: the function to run, as 'package.module:function'"))
        elif not isinstance(target, str) or not _TARGET.match(target):
            problems.append(("target", f"{target!r} is not a 'package.module:function' reference"))
        problems.extend(common_settings_problems(settings))
        return problems

    def start(
        self,
        *,
        work_id: int,
        attempt_id: int,
        binding_settings: Mapping[str, Any],
        inputs: Sequence[Any],
    ) -> PythonExecution:
        """Run the target on an idle worker (or a new one) with the first inputs."""
        message = {
            "kind": "run",
            "target": binding_settings["target"],
            "work_id": work_id,
            "attempt_id": attempt_id,
            "settings": dict(binding_settings),
            "inputs": list(inputs),
        }
        binding_env = env_of_binding(binding_settings)
        for _ in range(3):
            worker = self._take(binding_env)
            execution = PythonExecution(attempt_id, worker, self)
            if worker.run(execution, message):
                with self._lock:
                    self._forget_finished()
                    self._runs[attempt_id] = execution
                return execution
            worker.process.kill()
        raise OSError("could not start a Python worker process")

    def inject(self, *, attempt_id: int, inputs: Sequence[Any]) -> None:
        """Hand more input to a running attempt, in order."""
        if not self._running(attempt_id).send_inputs(inputs):
            raise LookupError(f"attempt {attempt_id} cannot take input")

    def interrupt(self, *, attempt_id: int, reason: str = "") -> None:
        """Ask a running attempt to stop what it is doing."""
        self._running(attempt_id).send_interrupt(reason)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.process.close_stdin()
            worker.process.signal(signal.SIGTERM)

    def _take(self, binding_env: Mapping[str, str]) -> _Worker:
        """An idle worker started with the same binding ``env`` (its environment is the
        attempt's), or a new one."""
        with self._lock:
            for index in range(len(self._idle) - 1, -1, -1):
                worker = self._idle[index]
                if not worker.alive:
                    del self._idle[index]
                elif worker.binding_env == binding_env:
                    del self._idle[index]
                    return worker
        return _Worker(binding_env)

    def _give_back(self, worker: _Worker, *, reusable: bool) -> None:
        # A worker whose attempt left a process running is not reused: it is ended with it.
        if reusable and worker.alive and worker.current is None and not worker.process.containment.others():
            with self._lock:
                if len(self._idle) < self.IDLE_WORKERS:
                    self._idle.append(worker)
                    return
        worker.process.close_stdin()
        worker.process.kill()

    def _running(self, attempt_id: int) -> PythonExecution:
        with self._lock:
            execution = self._runs.get(attempt_id)
        if execution is None or execution.poll() is not None:
            raise LookupError(f"attempt {attempt_id} is not running on this executor")
        return execution

    def _forget_finished(self) -> None:
        for attempt_id in [a for a, e in self._runs.items() if e.poll() is not None]:
            del self._runs[attempt_id]
