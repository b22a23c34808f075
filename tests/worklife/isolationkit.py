"""What a Work tries to read of the server, as a command and as a Python target."""

from __future__ import annotations

import ctypes
import os

# A command: its first input line carries the paths; it prints what it could read of each.
PEEK = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from tests.worklife.isolationkit import peek
print(peek(json.loads(sys.stdin.readline())["event"]["data"]["paths"]))
"""


def _ancestors() -> list[int]:
    """This process's parent and the parent's parent (the loop, for a forked Python attempt)."""
    pids = [os.getppid()]
    try:
        with open(f"/proc/{pids[0]}/status") as handle:
            pids += [int(line.split()[1]) for line in handle if line.startswith("PPid:")]
    except OSError:
        pass  # it ended meanwhile: the pids found so far stand
    return pids


def peek(paths: list[str]) -> str:
    """One line per attempt: ``PATH: read N bytes <start>`` or ``PATH: refused (error)``, each
    after an attempt to unmount what may cover it."""
    attempts = [f"/proc/{pid}/{part}" for pid in _ancestors() for part in ("environ", "mem")]
    attempts += ["/proc/1/environ", *paths]
    lines = []
    libc = ctypes.CDLL(None, use_errno=True)
    for path in attempts:
        # First try to take away what covers it (a namespace's tmpfs): that must fail too.
        libc.umount2(path.encode(), 2)  # MNT_DETACH
        try:
            if os.path.isdir(path):
                got = ",".join(sorted(os.listdir(path))).encode()
            else:
                with open(path, "rb") as handle:
                    got = handle.read(65536)
        except OSError as exc:
            lines.append(f"{path}: refused ({type(exc).__name__})")
        else:
            lines.append(f"{path}: read {len(got)} bytes {got[:4096]!r}")
    return "\n".join(lines)


# Run as an ordinary user (the work user), as a work loop that is not root: start a command
# attempt that peeks at the paths given, and print the isolation line and what it read.
UNPRIVILEGED_LOOP = r"""
import json, sys
import django
django.setup()
from worklife.executors import CommandExecutor
from worklife.executors.isolation import isolation
paths = json.loads(sys.argv[1])
print("isolation:", isolation().describe())
executor = CommandExecutor()
execution = executor.start(
    work_id=1, attempt_id=1, inputs=[{"data": {"paths": paths}}],
    binding_settings={"argv": [sys.executable, "-c", sys.argv[2], sys.argv[3]]},
)
outcome = execution.wait(timeout=60)
print(execution.output()[0])
print("outcome:", outcome)
"""
