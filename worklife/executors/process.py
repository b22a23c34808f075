"""An attempt's child process with the protocol's pipes, and the execution that runs one."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from worklife.child import CALL_FD_ENV
from worklife.executors.base import Execution, Outcome
from worklife.executors.containment import Containment
from worklife.executors.environment import PROCESS_MARK_ENV
from worklife.executors.forked import ForkedPopen, ForkServer
from worklife.executors.output import (
    PENDING_CALLS,
    Tail,
    any_line,
    call_line_limit,
    is_call_line,
    start_reader,
)


class ChildProcess:
    """A child process in its own process group with the protocol's pipes: standard input
    (the loop's lines), standard output and error (kept as tails, or parsed for ``@conduit``
    calls), and the call pipe named by ``CONDUIT_CALL_FD``."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str | None,
        on_call: Callable[[bytes], None],
        on_stdout: Callable[[bytes], None],
        on_overlong: Callable[[int], None],
        calls_on_stdout: bool = False,
        server: ForkServer | None = None,
    ) -> None:
        self.containment = Containment()
        if server is not None:
            self.popen = self._fork(server, env)
            call_stream = self.popen.calls
        else:
            read_fd, write_fd = os.pipe()
            os.set_inheritable(write_fd, True)
            full_env = {**env, CALL_FD_ENV: str(write_fd), PROCESS_MARK_ENV: self.containment.mark}
            try:
                self.popen = self.containment.spawn(
                    partial(
                        subprocess.Popen,
                        list(argv),
                        cwd=cwd,
                        env=full_env,
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        pass_fds=(write_fd,),
                        start_new_session=True,  # its own process group (signals reach its children)
                    )
                )
            except BaseException:
                os.close(read_fd)
                self.containment.end()
                raise
            finally:
                os.close(write_fd)
            call_stream = os.fdopen(read_fd, "rb")
        self.containment.started(self.popen)
        self.pid = self.popen.pid
        self._stdin_lock = threading.Lock()
        self.stderr = Tail()
        call_limit = call_line_limit()
        self._threads = [
            start_reader(
                f"conduit-calls-{self.pid}",
                call_stream,
                on_call,
                calls=any_line,
                call_limit=call_limit,
                overlong=on_overlong,
            ),
            start_reader(
                f"conduit-stdout-{self.pid}",
                self.popen.stdout,
                on_stdout,
                calls=is_call_line if calls_on_stdout else None,
                call_limit=call_limit,
                overlong=on_overlong,
            ),
            start_reader(f"conduit-stderr-{self.pid}", self.popen.stderr, self.stderr.add),
        ]

    def _fork(self, server: ForkServer, env: Mapping[str, str]) -> ForkedPopen:
        """The process forked by ``server`` (a Python binding's fork server), in this
        containment's cgroup when there is one."""
        cgroup_fd = self.containment.procs_fd() if self.containment.cgroup is not None else None
        try:
            return server.fork({**env, PROCESS_MARK_ENV: self.containment.mark}, cgroup_fd=cgroup_fd)
        except BaseException:
            self.containment.end()
            raise
        finally:
            if cgroup_fd is not None:
                os.close(cgroup_fd)

    def send(self, message: dict) -> bool:
        line = (json.dumps(message, default=str) + "\n").encode("utf-8")
        with self._stdin_lock:
            try:
                self.popen.stdin.write(line)
                self.popen.stdin.flush()
            except (BrokenPipeError, OSError, ValueError):
                return False
        return True

    def close_stdin(self) -> None:
        with self._stdin_lock, contextlib.suppress(OSError, ValueError):
            self.popen.stdin.close()

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)

    def kill(self) -> None:
        """End the process and every process it started (:class:`Containment`)."""
        self.containment.kill()

    def exited(self) -> int | None:
        return self.popen.poll()

    def exited_within(self, timeout: float) -> bool:
        """Whether the process exits within ``timeout`` seconds."""
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def join_readers(self, timeout: float = 2.0) -> None:
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))


def overlong_error(limit: int) -> str:
    return f"a call line longer than {limit} bytes (the limit) was refused"


def parse_call(line: bytes) -> dict | None:
    """A call line as a dict, or ``None`` for anything else (never raises: a reader thread
    must outlive a hostile line, such as JSON nested past the interpreter's recursion limit)."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return message if isinstance(message, dict) and isinstance(message.get("op"), str) else None


class ProcessExecution(Execution):
    """An attempt run by a process: its calls, its output, its outcome."""

    def __init__(self, attempt_id: int) -> None:
        self.attempt_id = attempt_id
        self._calls: list[dict] = []
        self._lock = threading.Lock()
        self._taken = threading.Condition(self._lock)
        self._done = threading.Event()
        self._outcome: Outcome | None = None
        self.stdout = Tail()
        self.stderr = Tail()
        self.result: Any = None
        self._wake: Callable[[], None] | None = None

    # -- what the reader threads feed ---------------------------------------------------------
    def _call(self, message: dict) -> None:
        op = message["op"]
        if op == "output":
            tail = self.stderr if message.get("stream") == "stderr" else self.stdout
            tail.add(str(message.get("text", "")).encode("utf-8", errors="replace"))
            return
        if op == "complete":
            self.result = message.get("result")
        with self._lock:
            # A child that calls faster than the loop answers waits (its writes block).
            while len(self._calls) >= PENDING_CALLS and not self._done.is_set():
                self._taken.wait(0.1)
            self._calls.append(message)
            wake = self._wake
        if wake is not None:
            wake()

    def _finish(self, outcome: Outcome) -> None:
        with self._lock:
            if self._outcome is None:
                self._outcome = outcome
            wake = self._wake
        self._done.set()
        if wake is not None:
            wake()

    # -- the Execution API --------------------------------------------------------------------
    def poll(self) -> Outcome | None:
        return self._outcome if self._done.is_set() else None

    def wait(self, timeout: float | None = None) -> Outcome | None:
        self._done.wait(timeout)
        return self.poll()

    def take_calls(self) -> list[dict]:
        with self._lock:
            calls, self._calls = self._calls, []
            self._taken.notify_all()
        return calls

    def output(self) -> tuple[str, str]:
        return self.stdout.text(), self.stderr.text()

    def wake_with(self, wake: Callable[[], None]) -> None:
        with self._lock:
            self._wake = wake
            pending = bool(self._calls) or self._outcome is not None
        if pending:
            wake()
