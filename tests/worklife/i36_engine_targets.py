"""Python targets of the Work engine's tests, run in worker processes."""

from __future__ import annotations

import os
import signal
import time


def receives(run):
    """Block in ``run.receive`` far longer than any test: only an interrupt ends it in time."""
    started = time.monotonic()
    item = run.receive(timeout=600)
    return {
        "item": item,
        "interrupted": run.interrupted.is_set(),
        "reason": run.interrupt_reason,
        "blocked": round(time.monotonic() - started, 3),
    }


def keyed(run):
    """What an executor makes its side effects exactly-once with: the idempotency key, as
    ``run`` and the environment carry it. Fails once first when its input names a ``marker``
    file that does not exist yet (and creates it)."""
    marker = (run.inputs[0].get("data") or {}).get("marker") if run.inputs else None
    if marker and not os.path.exists(marker):
        open(marker, "w").close()
        raise RuntimeError(f"failing once with key {run.idempotency_key}")
    return {"key": run.idempotency_key, "env": os.environ.get("CONDUIT_IDEMPOTENCY_KEY")}


def kills_its_loop(run):
    """End the work loop that runs it (the worker's parent), as a target that exhausts the
    machine's memory gets its loop killed."""
    os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(30)


def sleeps(run):
    """A piece of work long enough for a kill of its loop to land while it runs."""
    time.sleep(float(run.params.get("seconds", 2)))
    return {"seen": [item["seq"] for item in run.inputs]}
