"""The ``command`` executor: a process that reads the protocol's JSON lines on standard input
and calls the loop with ``@conduit`` lines."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.conf import settings as django_settings

from worklife.child import ATTEMPT_ID_ENV, CALL_PREFIX, IDEMPOTENCY_KEY_ENV, WORK_ID_ENV
from worklife.executors.base import (
    COMMON_SETTINGS,
    Executor,
    Outcome,
    common_settings_problems,
    unknown_settings,
)
from worklife.executors.environment import (
    env_of_binding,
    env_setting_problems,
    inherited_environment,
    trace_environment,
)
from worklife.executors.process import ChildProcess, ProcessExecution, overlong_error, parse_call

# --- CommandExecutor ---------------------------------------------------------------------


class CommandExecution(ProcessExecution):
    """A command in its own process group: exit status 0 is success."""

    def __init__(
        self, attempt_id: int, argv: Sequence[str], *, env: Mapping[str, str], cwd: str | None
    ) -> None:
        super().__init__(attempt_id)
        self._refused = ""
        self.process = ChildProcess(
            argv,
            env=env,
            cwd=cwd,
            on_call=self._on_call_line,
            on_stdout=self._on_stdout,
            on_overlong=self._on_overlong,
            calls_on_stdout=True,
        )
        self.pid = self.process.pid
        self._waiter = threading.Thread(target=self._watch, name=f"conduit-command-{self.pid}", daemon=True)
        self._waiter.start()

    def _on_call_line(self, line: bytes) -> None:
        message = parse_call(line)
        if message is not None:
            self._call(message)

    def _on_stdout(self, line: bytes) -> None:
        if line.startswith(CALL_PREFIX.encode()):
            message = parse_call(line[len(CALL_PREFIX) :])
            if message is not None:
                self._call(message)
                return
        self.stdout.add(line)

    def _on_overlong(self, limit: int) -> None:
        """A call over the line limit cannot be answered: the attempt fails, its process ends."""
        self._refused = overlong_error(limit)
        self.kill()

    def _watch(self) -> None:
        code = self.process.popen.wait()
        self.process.containment.end()  # what it left running ends with it
        self.process.join_readers()
        self.process.close_stdin()
        self.stderr.add(self.process.stderr.text().encode("utf-8", errors="replace"))
        if self._refused:
            outcome = Outcome(ok=False, result=self.result, error=self._refused, exit_status=code)
        elif code == 0:
            outcome = Outcome(ok=True, result=self.result, exit_status=0)
        else:
            tail = self.process.stderr.text().strip()[-500:]
            how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
            outcome = Outcome(
                ok=False, result=self.result, error=how + (f": {tail}" if tail else ""), exit_status=code
            )
        self._finish(outcome)

    def reply(self, call_id: Any, *, ok: bool, value: Any = None, error: str = "") -> None:
        self.process.send({"kind": "reply", "id": call_id, "ok": ok, "value": value, "error": error})

    def send_inputs(self, events: Sequence[Any]) -> bool:
        return all(self.process.send({"kind": "input", "event": e, "injected": True}) for e in events)

    def send_interrupt(self, reason: str) -> bool:
        sent = self.process.send({"kind": "interrupt", "reason": reason})
        self.process.signal(signal.SIGINT)
        return sent

    def signal(self, signum: int) -> None:
        self.process.signal(signum)

    def kill(self) -> None:
        self.process.kill()


class CommandExecutor(Executor):
    """Runs a command: settings ``{"argv": [...], "cwd": "...", "env": {...}}`` (``cwd``,
    ``env``, ``timeout``, ``interrupt_grace`` and ``emit_sources`` optional).

    The process runs in its own process group. Its environment is built, never inherited:
    the allow-list of the loop's own (:data:`ENV_ALLOWED`), the binding's ``env``,
    ``PYTHONPATH`` (the project's directory, unless ``env`` sets it), ``CONDUIT_WORK_ID``,
    ``CONDUIT_ATTEMPT_ID``, ``CONDUIT_IDEMPOTENCY_KEY``, ``CONDUIT_CALL_FD``,
    ``CONDUIT_PROCESS_MARK`` and, when the attempt's triggering Event carries one,
    ``TRACEPARENT``. Its inputs arrive
    on standard input as JSON lines (``{"kind": "input", "event": …}``, then
    ``{"kind": "started", …}``); injected input arrives as more such lines and is confirmed
    once written; an interrupt is a ``{"kind": "interrupt"}`` line and SIGINT to its process
    group, then SIGTERM and, after the grace, the kill. Exit status 0 completes the Work.

    Ending the attempt (a kill, or the command's own exit) ends every process it started,
    ``setsid`` included (:class:`Containment`).
    """

    def __init__(self) -> None:
        self._runs: dict[int, CommandExecution] = {}
        self._lock = threading.Lock()

    @classmethod
    def validate_settings(cls, settings: Mapping[str, Any]) -> Iterable[tuple[str, str]]:
        """``argv`` is a non-empty list of strings; ``cwd`` a string; ``env`` string to string."""
        problems = list(unknown_settings(settings, ("argv", "cwd", "env", *COMMON_SETTINGS)))
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
        problems.extend(env_setting_problems(settings))
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
    ) -> CommandExecution:
        """Start the command and write its first inputs as JSON lines on standard input."""
        binding_env = env_of_binding(binding_settings)
        env = {**inherited_environment(), **binding_env, **trace_environment(traceparent)}
        env[WORK_ID_ENV] = str(work_id)
        env[ATTEMPT_ID_ENV] = str(attempt_id)
        if idempotency_key:
            env[IDEMPOTENCY_KEY_ENV] = idempotency_key
        base = str(getattr(django_settings, "BASE_DIR", "") or "")
        if base and "PYTHONPATH" not in binding_env:
            # The project's packages (``python3 -m demo.agents``) import from any Python.
            env["PYTHONPATH"] = os.pathsep.join(p for p in (base, os.environ.get("PYTHONPATH", "")) if p)
        cwd = binding_settings.get("cwd") or base or None
        execution = CommandExecution(attempt_id, list(binding_settings["argv"]), env=env, cwd=cwd)
        for event in inputs:
            execution.process.send({"kind": "input", "event": event})
        execution.process.send({"kind": "started", "work_id": work_id, "attempt_id": attempt_id})
        with self._lock:
            for done in [a for a, e in self._runs.items() if e.poll() is not None]:
                del self._runs[done]
            self._runs[attempt_id] = execution
        return execution

    def inject(self, *, attempt_id: int, inputs: Sequence[Any]) -> None:
        """Write more input lines to a running command."""
        with self._lock:
            execution = self._runs.get(attempt_id)
        if execution is None or not execution.send_inputs(inputs):
            raise LookupError(f"attempt {attempt_id} is not running on this executor")

    def interrupt(self, *, attempt_id: int, reason: str = "") -> None:
        """Send the interrupt line and SIGINT to a running command."""
        with self._lock:
            execution = self._runs.get(attempt_id)
        if execution is None:
            raise LookupError(f"attempt {attempt_id} is not running on this executor")
        execution.send_interrupt(reason)
