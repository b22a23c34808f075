"""The fork server of a Python binding: a process that imports ``worklife.child`` and the
binding's target module once, then forks a fresh process for each attempt.

It runs in the attempt's side of the protocol (no Django). The loop starts it as
``python -m worklife.forkserver MODULE`` with a ``SOCK_SEQPACKET`` socket named by
``CONDUIT_CONTROL_FD``, and asks for an attempt process with a message carrying its
environment and, as file descriptors, its standard input, output and error, its call pipe and
(when there is one) its cgroup's ``cgroup.procs``. The server forks: the new process joins the
cgroup, becomes the leader of a session of its own, takes those descriptors and the
environment, runs one attempt (:func:`worklife.child.serve_attempts`) and exits. The server answers
``{"op": "forked", "id": …, "pid": …}`` and, when one of its processes ends,
``{"op": "exited", "pid": …, "status": …}``. It holds no attempt's secret: the attempt's run line
goes to the attempt's own standard input.

An attempt process starts from the server's memory, which no attempt can write: the server and
its processes are undumpable (no process of their user can read or trace them), and each
attempt's changes (a patched module, a thread, a global) stay in its own process.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import select
import signal
import socket
import sys
import traceback

CONTROL_FD_ENV = "CONDUIT_CONTROL_FD"
PR_SET_DUMPABLE = 4


def _undumpable() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def _send(control: socket.socket, message: dict) -> None:
    control.send(json.dumps(message).encode())


def _attempt(request: dict, fds: list[int], closing: list[int]) -> None:
    """In the forked process: become the attempt's process and run it; never returns."""
    code = 70
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in closing:
            os.close(fd)
        stdin, stdout, stderr, call, *cgroup = fds
        if cgroup:
            os.write(cgroup[0], b"0")
            os.close(cgroup[0])
        os.setsid()
        for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
            os.dup2(fd, target)
            os.close(fd)
        os.set_inheritable(call, True)
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ["CONDUIT_CALL_FD"] = str(call)
        from worklife.child import serve_attempts

        code = serve_attempts(once=True)
    except BaseException:  # noqa: BLE001 - the process's boundary: it must never return to the server
        traceback.print_exc()
    finally:
        os._exit(code)


def main() -> int:
    control = socket.socket(fileno=int(os.environ.pop(CONTROL_FD_ENV)))
    _undumpable()
    import worklife.child  # noqa: F401 - imported once, here, for every attempt

    module = sys.argv[1] if len(sys.argv) > 1 else ""
    if module:
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - each attempt imports it again and reports the error
            pass
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    while True:
        try:
            ready, _, _ = select.select([control, wake_read], [], [])
        except InterruptedError:
            ready = []
        if wake_read in ready:
            os.read(wake_read, 4096)
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            _send(control, {"op": "exited", "pid": pid, "status": os.waitstatus_to_exitcode(status)})
        if control in ready:
            message, fds, _, _ = socket.recv_fds(control, 1 << 20, 8)
            if not message:
                return 0  # the loop went away
            request = json.loads(message)
            pid = os.fork()
            if pid == 0:
                _attempt(request, fds, [control.fileno(), wake_read, wake_write])
            for fd in fds:
                os.close(fd)
            _send(control, {"op": "forked", "id": request["id"], "pid": pid})


if __name__ == "__main__":
    sys.exit(main())
