"""The loop's side of a Python binding's fork server (:mod:`worklife.forkserver`): start it,
ask it for an attempt process, learn when that process ends."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from functools import partial
from typing import Any

from worklife.executors.containment import Containment
from worklife.executors.environment import PROCESS_MARK_ENV
from worklife.executors.output import Tail, start_reader
from worklife.forkserver import CONTROL_FD_ENV

FORK_TIMEOUT = 10.0


class ForkedPopen:
    """What the loop knows of an attempt process a fork server started, shaped as the part of
    :class:`subprocess.Popen` the executors use: its pid, its pipes and its exit status (told
    by the server, whose child it is)."""

    def __init__(self, pid: int, stdin: Any, stdout: Any, stderr: Any) -> None:
        self.pid = pid
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self.calls: Any = None
        self.returncode: int | None = None
        self._exited = threading.Event()

    def _exit(self, status: int) -> None:
        if self.returncode is None:
            self.returncode = status
        self._exited.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
        return self.returncode


class ForkServer:
    """A ``python -m worklife.forkserver MODULE`` process for one binding (its environment),
    started isolated and contained as any attempt process (:class:`Containment`)."""

    def __init__(self, env: Mapping[str, str], *, module: str, cwd: str | None) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.containment = Containment()
        self.env = dict(env)
        full_env = {**self.env, CONTROL_FD_ENV: str(theirs.fileno()), PROCESS_MARK_ENV: self.containment.mark}
        try:
            self.popen = self.containment.spawn(
                partial(
                    subprocess.Popen,
                    [sys.executable, "-m", "worklife.forkserver", module],
                    cwd=cwd,
                    env=full_env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    pass_fds=(theirs.fileno(),),
                    start_new_session=True,
                )
            )
        except BaseException:
            ours.close()
            self.containment.end()
            raise
        finally:
            theirs.close()
        self.containment.started(self.popen)
        self.pid = self.popen.pid
        self.stderr = Tail()
        self._control = ours
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._ids = 0
        self._waiting: dict[int, tuple[threading.Event, list]] = {}
        self._children: dict[int, ForkedPopen] = {}
        self._gone = False
        start_reader(f"conduit-forkserver-stderr-{self.pid}", self.popen.stderr, self.stderr.add)
        threading.Thread(target=self._read, name=f"conduit-forkserver-{self.pid}", daemon=True).start()

    @property
    def alive(self) -> bool:
        return not self._gone and self.popen.poll() is None

    def processes(self) -> int:
        """The attempt processes it started that still run or are being started (those
        forked ahead included)."""
        with self._lock:
            return len(self._children) + len(self._waiting)

    def fork(self, env: Mapping[str, str], *, cgroup_fd: int | None = None) -> ForkedPopen:
        """A new attempt process with ``env`` and pipes of its own (its call pipe is named by
        ``CONDUIT_CALL_FD`` in it)."""
        pipes = [os.pipe() for _ in range(4)]  # stdin, stdout, stderr, calls
        theirs = [pipes[0][0], pipes[1][1], pipes[2][1], pipes[3][1]]
        if cgroup_fd is not None:
            theirs.append(cgroup_fd)
        ours = [pipes[0][1], pipes[1][0], pipes[2][0], pipes[3][0]]
        done, box = threading.Event(), []
        with self._lock:
            self._ids += 1
            request_id = self._ids
            self._waiting[request_id] = (done, box)
        request = {"id": request_id, "env": dict(env)}
        try:
            with self._send_lock:
                socket.send_fds(self._control, [json.dumps(request).encode()], theirs)
        except OSError:
            self._gone = True
        finally:
            for fd in theirs[:4]:
                os.close(fd)
        if self._gone or not done.wait(FORK_TIMEOUT) or not box:
            with self._lock:
                self._waiting.pop(request_id, None)
            for fd in ours:
                os.close(fd)
            raise OSError(f"the Python fork server {self.pid} did not start an attempt process")
        child = box[0]
        child.stdin = os.fdopen(ours[0], "wb")
        child.stdout = os.fdopen(ours[1], "rb")
        child.stderr = os.fdopen(ours[2], "rb")
        child.calls = os.fdopen(ours[3], "rb")
        return child

    def _read(self) -> None:
        while True:
            try:
                message = self._control.recv(65536)
            except OSError:
                message = b""
            if not message:
                break
            reply = json.loads(message)
            if reply.get("op") == "forked":
                child = ForkedPopen(reply["pid"], None, None, None)
                with self._lock:
                    self._children[child.pid] = child
                    done, box = self._waiting.pop(reply["id"], (None, None))
                if done is not None:
                    box.append(child)  # the object: it may exit before fork() reads it
                    done.set()
            elif reply.get("op") == "exited":
                with self._lock:
                    child = self._children.pop(reply["pid"], None)
                if child is not None:
                    child._exit(int(reply["status"]))
        # The server is gone: its processes have no one to tell when they end; they end now.
        self._gone = True
        with self._lock:
            children, self._children = list(self._children.values()), {}
            waiting, self._waiting = list(self._waiting.values()), {}
        for child in children:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGKILL)
            child._exit(-signal.SIGKILL)
        for done, _ in waiting:
            done.set()

    def close(self) -> None:
        """End the server and the attempt processes it still runs."""
        with contextlib.suppress(OSError):
            self._control.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(5)
        self.containment.remove()
        self._control.close()
