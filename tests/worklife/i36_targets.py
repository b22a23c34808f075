"""Python targets of the containment tests (issue 36), run in worker processes."""

from __future__ import annotations

import os
import subprocess
import time


def environment(run):
    """The worker's environment, as the target sees it."""
    return dict(os.environ)


def floods_stdout(run):
    """Write ``run.params["bytes"]`` bytes and a newline straight to file descriptor 1 (past
    ``sys.stdout``), then give the loop a moment to read them before the result."""
    size = int(run.params["bytes"])
    block = b"y" * (1024 * 1024)
    for _ in range(size // len(block)):
        os.write(1, block)
    os.write(1, b"y" * (size % len(block)) + b"\n")
    time.sleep(1.0)
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


def emits_as(run):
    """Make the emit calls of ``run.params["calls"]`` in order (``[name, the call's fields]``
    pairs: a list, as jsonb keeps no key order; a field ``<name>_chars: n`` becomes ``<name>``
    of n characters) and return, by name, the seq the loop answered or its refusal."""
    from worklife.child import CallRefused

    results = {}
    for name, fields in run.params["calls"]:
        call = {"op": "emit"}
        for key, value in fields.items():
            if key.endswith("_chars"):
                call[key[: -len("_chars")]] = "x" * value
            else:
                call[key] = value
        try:
            results[name] = {"seq": run._call(call)}
        except CallRefused as refused:
            results[name] = {"refused": str(refused)}
    return results


def emits_many(run):
    """Emit ``run.params["count"]`` Events, one call after the other; return how many the loop
    accepted and refused."""
    from worklife.child import CallRefused

    counts = {"accepted": 0, "refused": 0}
    for n in range(run.params["count"]):
        try:
            run.emit("t.loop", {"n": n})
        except CallRefused:
            counts["refused"] += 1
        else:
            counts["accepted"] += 1
    return counts
