"""The ``python`` executor: a target function called with ``run`` in a process of its own per
attempt, forked from its binding's pre-imported fork server (or, with ``reuse: false``, a new
interpreter); every line the process writes carries its attempt's id and secret."""

from __future__ import annotations

import hmac
import json
import logging
import os
import queue
import re
import secrets
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
from worklife.executors.forked import ForkServer
from worklife.executors.process import ChildProcess, ProcessExecution, overlong_error, parse_call

# --- PythonExecutor ----------------------------------------------------------------------

_TARGET = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")

logger = logging.getLogger("conduit.worklife.executors")

RELEASE_WAIT = 0.05
"""Seconds an attempt's process has to exit after its result before it is ended."""


def binding_key(binding_settings: Mapping[str, Any]) -> str:
    """What names a binding to the worker pool: its settings (target, params, env, …) as
    canonical JSON. A worker runs attempts of one binding only."""
    return json.dumps(binding_settings, sort_keys=True, separators=(",", ":"), default=str)


def worker_environment(binding_env: Mapping[str, str]) -> dict[str, str]:
    """The environment of a binding's worker processes: the allow-list, the binding's ``env``,
    and ``PYTHONPATH`` so that they import ``worklife.child`` and the targets from where this
    loop imports them (the project, its virtualenv): the binding's, then the loop's."""
    env = {**inherited_environment(), **binding_env}
    paths = [binding_env.get("PYTHONPATH", ""), *sys.path]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def project_directory() -> str | None:
    return str(getattr(django_settings, "BASE_DIR", "") or "") or None


class _Worker:
    """The process of one attempt of a Python target: forked by its binding's fork server
    (``server``), or, without one, a ``python -m worklife.child`` of its own."""

    def __init__(
        self, binding_env: Mapping[str, str] | None = None, *, key: str = "", server: ForkServer | None = None
    ) -> None:
        self.current: PythonExecution | None = None
        self.key = key
        self.server = server
        # Set when the worker wrote a line for no attempt it runs.
        self.tainted = False
        self.binding_env = dict(binding_env or {})
        self.process = ChildProcess(
            [sys.executable, "-m", "worklife.child"],
            env=server.env if server is not None else worker_environment(self.binding_env),
            cwd=project_directory(),
            on_call=self._on_call,
            on_stdout=self._on_stdout,
            on_overlong=self._on_overlong,
            server=server,
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
            execution._finish(_outcome(message, error))
            return
        execution._call(message)

    def _refuse(self, message: dict, execution: PythonExecution | None) -> None:
        """A line for an attempt this process does not run now, or without that attempt's
        secret (a target forging another attempt's result or calls): refused and logged."""
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

    def __init__(self, attempt_id: int, worker: _Worker) -> None:
        super().__init__(attempt_id)
        self.worker = worker
        self.pid = worker.pid
        # The attempt's secret, given to its process in the run line only.
        self.token = secrets.token_hex(16)

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
        return self.worker.process.send({"kind": "interrupt", "reason": reason})

    def signal(self, signum: int) -> None:
        self.worker.process.signal(signum)

    def kill(self) -> None:
        self.worker.process.kill()

    def release(self) -> None:
        """The attempt's process exits right after its result (what it left running is ended
        with it, :class:`Containment`); one still running a moment later (its target wrote its
        own result line and went on) is ended now."""
        self.worker.process.close_stdin()
        if not self.worker.process.exited_within(RELEASE_WAIT):
            self.worker.process.kill()
        else:
            self.worker.process.containment.end()  # now, not only once its watcher gets to it


class PythonExecutor(Executor):
    """Runs a Python function in a process of its own per attempt: settings
    ``{"target": "module:function"}`` (plus ``params``, a mapping the function reads as
    ``run.params``, ``env``, variables added to the process's environment, ``reuse``,
    ``timeout``, ``interrupt_grace`` and ``emit_sources``).

    The environment is built, never inherited: the allow-list of the loop's own
    (:data:`ENV_ALLOWED`), the binding's ``env``, ``PYTHONPATH`` (the binding's, then the
    loop's import path, so the process imports what the loop imports) and, while an attempt
    runs, ``CONDUIT_WORK_ID``, ``CONDUIT_ATTEMPT_ID``, ``CONDUIT_IDEMPOTENCY_KEY`` and
    ``TRACEPARENT`` (the triggering Event's, also ``run.traceparent``, when its sender gave
    one).

    The function is called with a :class:`worklife.child.Run`. Every attempt runs in a process
    of its own, which exits after its result: nothing of one attempt (a patched module, a
    thread, its secret) reaches another. By default (``reuse: true``) a binding (the same
    settings: :func:`binding_key`) keeps a fork server that imported ``worklife.child`` and the
    target's module once, and each attempt's process is forked from it (no interpreter start,
    no imports); ``reuse: false`` starts a new interpreter for each attempt (the target's
    module imported afresh each time). Implements ``inject`` (input the function reads with
    ``run.receive()``) and ``interrupt`` (sets ``run.interrupted``).
    """

    SERVERS = 16
    """Fork servers kept (one per binding); past this the one used least lately ends."""

    AHEAD = 16
    """Attempt processes a binding's fork server keeps forked ahead at most (each with its
    pipes, its readers and its cgroup, waiting for an attempt's run line, having run nothing):
    an attempt starts on a ready process, and the executor's threads fork its replacement off
    the loop's thread. A binding keeps as many as its attempts took lately, up to this."""

    FORKERS = 4
    """Threads that fork processes ahead (their requests to the fork servers overlap)."""

    def __init__(self) -> None:
        self._servers: dict[str, ForkServer] = {}
        self._runs: dict[int, PythonExecution] = {}
        self._lock = threading.Lock()
        # Processes forked ahead, by binding key, how many are being forked, and the threads
        # that fork them (their jobs: a binding's key and server).
        self._ready: dict[str, list[_Worker]] = {}
        self._forking: dict[str, int] = {}
        self._jobs: queue.SimpleQueue[tuple[str, ForkServer] | None] = queue.SimpleQueue()
        self._forkers: list[threading.Thread] = []
        self._closed = False

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
        """Start the attempt's process (forked from the binding's server, or a new one) and
        give it the target, the first inputs and the attempt's secret."""
        binding_env = env_of_binding(binding_settings)
        key = binding_key(binding_settings)
        reuse = binding_settings.get("reuse", True) is not False
        for _ in range(3):
            server = self._server(key, binding_env, str(binding_settings["target"])) if reuse else None
            worker = self._take_ready(key, server) if server is not None else None
            try:
                worker = worker or _Worker(binding_env, key=key, server=server)
            except OSError:
                if server is None:
                    raise
                # A server that cannot fork (its import hangs or killed it): this attempt gets
                # an interpreter of its own, the next a new server.
                self._drop(key, server)
                worker = _Worker(binding_env, key=key)
            execution = PythonExecution(attempt_id, worker)
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
        raise OSError("could not start a Python attempt process")

    def inject(self, *, attempt_id: int, inputs: Sequence[Any]) -> None:
        """Hand more input to a running attempt, in order."""
        if not self._running(attempt_id).send_inputs(inputs):
            raise LookupError(f"attempt {attempt_id} cannot take input")

    def interrupt(self, *, attempt_id: int, reason: str = "") -> None:
        """Ask a running attempt to stop what it is doing."""
        self._running(attempt_id).send_interrupt(reason)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            servers, self._servers = list(self._servers.values()), {}
            forkers, self._forkers = self._forkers, []
        for _ in forkers:
            self._jobs.put(None)
        for server in servers:
            server.close()  # its processes forked ahead end with it

    # -- processes forked ahead --------------------------------------------------------------
    def _take_ready(self, key: str, server: ForkServer) -> _Worker | None:
        """A process ``server`` forked ahead for the binding, if one is ready; its replacement
        is forked off this thread (two when none was ready, up to :data:`AHEAD`)."""
        with self._lock:
            ready = self._ready.setdefault(key, [])
            worker = None
            while ready and worker is None:
                candidate = ready.pop(0)
                if candidate.server is server and candidate.alive and candidate.current is None:
                    worker = candidate
                else:
                    candidate.process.kill()
            forking = self._forking.get(key, 0)
            wanted = (
                0 if self._closed else min(1 if worker is not None else 2, self.AHEAD - len(ready) - forking)
            )
            self._forking[key] = forking + max(0, wanted)
            for _ in range(wanted):
                self._jobs.put((key, server))
            while len(self._forkers) < min(self.FORKERS, self._jobs.qsize() + len(self._forkers)):
                thread = threading.Thread(target=self._fork_ahead, name="conduit-fork-ahead", daemon=True)
                self._forkers.append(thread)
                thread.start()
        return worker

    def _fork_ahead(self) -> None:
        """A thread of the executor that forks the processes the bindings are owed (several at
        once: their forks overlap)."""
        while True:
            job = self._jobs.get()
            if job is None:
                return
            key, server = job
            try:
                worker = _Worker(key=key, server=server) if server.alive else None
            except OSError:
                worker = None  # the server cannot fork: the next attempt's start finds it so
            with self._lock:
                if key in self._forking:
                    self._forking[key] -= 1
                if worker is not None and not self._closed and self._servers.get(key) is server:
                    self._ready.setdefault(key, []).append(worker)
                    worker = None
            if worker is not None:
                worker.process.kill()

    def _server(self, key: str, binding_env: Mapping[str, str], target: str) -> ForkServer:
        """The binding's fork server (started on its first attempt)."""
        with self._lock:
            server = self._servers.pop(key, None)
            if server is not None and server.alive:
                self._servers[key] = server  # the most recently used last
                return server
        fresh = ForkServer(
            worker_environment(binding_env), module=target.partition(":")[0], cwd=project_directory()
        )
        with self._lock:
            self._servers[key] = fresh
            idle = [
                k
                for k, s in self._servers.items()
                if k != key and s.processes() <= len(self._ready.get(k, ()))
            ]
            ended = [self._servers.pop(k) for k in idle[: max(0, len(self._servers) - self.SERVERS)]]
            for k in idle[: len(ended)]:
                self._ready.pop(k, None)
        for old in [*ended, *([server] if server is not None else [])]:
            old.close()  # with the processes it forked ahead
        return fresh

    def _drop(self, key: str, server: ForkServer) -> None:
        with self._lock:
            if self._servers.get(key) is server:
                del self._servers[key]
                self._ready.pop(key, None)
        server.close()

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
