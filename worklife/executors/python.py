"""The ``python`` executor: a target function called with ``run`` in a worker process, reused
only for the same binding after an attempt that succeeded and left nothing running; every line
a worker writes for an attempt carries that attempt's id and secret."""

from __future__ import annotations

import hmac
import json
import logging
import os
import re
import secrets
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

logger = logging.getLogger("conduit.worklife.executors")


def binding_key(binding_settings: Mapping[str, Any]) -> str:
    """What names a binding to the worker pool: its settings (target, params, env, …) as
    canonical JSON. A worker runs attempts of one binding only."""
    return json.dumps(binding_settings, sort_keys=True, separators=(",", ":"), default=str)


class _Worker:
    """A ``python -m worklife.child`` process that runs Python targets one attempt at a time,
    all of one binding (``key``)."""

    def __init__(self, binding_env: Mapping[str, str] | None = None, *, key: str = "") -> None:
        self.current: PythonExecution | None = None
        self.key = key
        # Set when the worker wrote a line for no attempt it runs: never reused again.
        self.tainted = False
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
        if message is None:
            return
        execution = self.current
        if execution is None or not execution.owns(message):
            self._refuse(message, execution)
            return
        if message["op"] == "result":
            error = message.get("error", "")
            if message.get("traceback"):
                execution.stderr.add(message["traceback"].encode("utf-8", errors="replace"))
            self.current = None
            execution._worker_fit = message.get("reusable") is True
            execution._finish(_outcome(message, error))
            return
        execution._call(message)

    def _refuse(self, message: dict, execution: PythonExecution | None) -> None:
        """A line for an attempt this worker does not run now, or without that attempt's secret
        (a target forging another attempt's result or calls, or code an earlier attempt left
        running): refused, logged, and the worker is not reused."""
        self.tainted = True
        claimed = message.get("attempt")
        logger.warning(
            "python.line_refused",
            extra={
                "pid": self.pid,
                "op": str(message.get("op"))[:32],
                "claimed_attempt": claimed if isinstance(claimed, int) else None,
                "current_attempt": execution.attempt_id if execution is not None else None,
                "reason": "another attempt"
                if execution is None or claimed != execution.attempt_id
                else "bad token",
            },
        )

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

    def __init__(self, attempt_id: int, worker: _Worker, pool: PythonExecutor, *, reuse: bool = True) -> None:
        super().__init__(attempt_id)
        self.worker = worker
        self.pid = worker.pid
        self._pool = pool
        self._tainted = not reuse
        # The attempt's secret, given to its worker in the run line only.
        self.token = secrets.token_hex(16)
        # The worker said, with the result, that the target left no thread behind.
        self._worker_fit = False

    def owns(self, message: dict) -> bool:
        """Whether a line the worker wrote is this attempt's: its id and its secret."""
        token = message.get("token")
        return (
            message.get("attempt") == self.attempt_id
            and isinstance(token, str)
            and hmac.compare_digest(token.encode(), self.token.encode())
        )

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
        outcome = self.poll()
        # Reused only after an attempt that succeeded, was never interrupted or ended, and
        # whose target left no thread (nor process: _give_back) behind.
        fit = outcome is not None and outcome.ok and self._worker_fit and not self._tainted
        self._pool._give_back(self.worker, reusable=fit)


class PythonExecutor(Executor):
    """Runs a Python function in a worker process: settings ``{"target": "module:function"}``
    (plus ``params``, a mapping the function reads as ``run.params``, ``env``, variables added
    to the worker's environment, ``timeout``, ``interrupt_grace`` and ``emit_sources``).

    The worker's environment is built, never inherited: the allow-list of the loop's own
    (:data:`ENV_ALLOWED`), the binding's ``env``, ``PYTHONPATH`` (the binding's, then the
    loop's import path, so the worker imports what the loop imports) and, while an attempt
    runs, ``CONDUIT_WORK_ID``, ``CONDUIT_ATTEMPT_ID``, ``CONDUIT_IDEMPOTENCY_KEY`` and
    ``TRACEPARENT`` (the triggering Event's, also ``run.traceparent``, when its sender gave
    one).

    The function is called with a :class:`worklife.child.Run`. A worker runs the next attempt
    (no start-up cost) only of the same binding (the same settings: :func:`binding_key`), and
    only after an attempt that succeeded and left no thread or process running; one whose
    attempt failed, was interrupted, timed out or was cancelled, or that wrote a line for
    another attempt or without its attempt's secret, is ended. ``reuse: false`` gives every
    attempt of the binding a worker of its own. Implements ``inject`` (input the function reads
    with ``run.receive()``) and ``interrupt`` (sets ``run.interrupted``).
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
        problems = list(unknown_settings(settings, ("target", "params", "env", "reuse", *COMMON_SETTINGS)))
        problems.extend(env_setting_problems(settings))
        if "reuse" in settings and not isinstance(settings["reuse"], bool):
            problems.append(("reuse", f"expected true or false, got {settings['reuse']!r}"))
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
        traceparent: str = "",
        idempotency_key: str = "",
    ) -> PythonExecution:
        """Run the target on an idle worker of the same binding (or a new one) with the first
        inputs and the attempt's secret."""
        binding_env = env_of_binding(binding_settings)
        key = binding_key(binding_settings)
        reuse = binding_settings.get("reuse", True) is not False
        for _ in range(3):
            worker = self._take(key) if reuse else None
            worker = worker or _Worker(binding_env, key=key)
            execution = PythonExecution(attempt_id, worker, self, reuse=reuse)
            message = {
                "kind": "run",
                "target": binding_settings["target"],
                "work_id": work_id,
                "attempt_id": attempt_id,
                "token": execution.token,
                "settings": dict(binding_settings),
                "inputs": list(inputs),
                "traceparent": traceparent,
                "idempotency_key": idempotency_key,
            }
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

    def _take(self, key: str) -> _Worker | None:
        """An idle worker that ran attempts of the binding ``key`` only (its environment is the
        binding's), or ``None``."""
        with self._lock:
            for index in range(len(self._idle) - 1, -1, -1):
                worker = self._idle[index]
                if not worker.alive or worker.tainted:
                    del self._idle[index]
                elif worker.key == key:
                    del self._idle[index]
                    return worker
        return None

    def _give_back(self, worker: _Worker, *, reusable: bool) -> None:
        # A worker whose attempt left a process running is not reused: it is ended with it.
        if (
            reusable
            and not worker.tainted
            and worker.alive
            and worker.current is None
            and not worker.process.containment.others()
        ):
            with self._lock:
                self._idle.append(worker)
                # Past the bound, the worker idle longest goes (its binding ran least lately).
                worker = self._idle.pop(0) if len(self._idle) > self.IDLE_WORKERS else None
            if worker is None:
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


def _outcome(message: dict, error: str) -> Outcome:
    """The outcome a worker's result line reports, with what a failure says about retrying it."""
    types = message.get("error_types")
    after = message.get("retry_after")
    return Outcome(
        ok=bool(message.get("ok")),
        result=message.get("value"),
        error=error,
        error_types=tuple(t for t in types if isinstance(t, str)) if isinstance(types, list) else (),
        non_retryable=message.get("non_retryable") is True,
        retry_after=float(after) if isinstance(after, int | float) and not isinstance(after, bool) else None,
    )
