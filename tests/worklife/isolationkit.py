"""What a Work tries to read of the server, as a command and as a Python target."""

from __future__ import annotations

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
        pass
    return pids


def peek(paths: list[str]) -> str:
    """One line per attempt: ``PATH: read N bytes <start>`` or ``PATH: refused (error)``."""
    attempts = [f"/proc/{pid}/{part}" for pid in _ancestors() for part in ("environ", "mem")]
    attempts += ["/proc/1/environ", *paths]
    lines = []
    for path in attempts:
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
