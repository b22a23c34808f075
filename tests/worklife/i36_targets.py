"""Python targets of the containment tests (issue 36), run in worker processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time


def environment(run):
    """The worker's environment, as the target sees it."""
    return dict(os.environ)


def floods_stdout(run):
    """Write ``run.params["bytes"]`` bytes without a newline, through ``sys.stdout`` (in
    pieces of a MiB) and straight to file descriptor 1."""
    size = int(run.params["bytes"])
    piece = "x" * (1024 * 1024)
    for _ in range(size // len(piece) // 2):
        sys.stdout.write(piece)
    block = b"y" * (1024 * 1024)
    for _ in range(size // len(block) // 2):
        os.write(1, block)
    return "flooded"


def prints_once(run):
    """One ``print`` of ``run.params["bytes"]`` characters, then a short last line."""
    print("z" * int(run.params["bytes"]))
    print("the end")
    return "printed"


def huge_result(run):
    return "r" * int(run.params["bytes"])


def leaves_a_daemon(run):
    """Start ``sleep`` in a session of its own (``setsid``), write its pid, then return at
    once or run until ended."""
    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
    with open(run.params["pidfile"], "w") as handle:
        handle.write(str(child.pid))
    if run.params.get("returns"):
        return child.pid
    while True:
        time.sleep(0.05)
