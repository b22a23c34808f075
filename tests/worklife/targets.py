"""Python targets the engine tests run in worker processes (imported there, not here)."""

from __future__ import annotations

import os
import time


def echo(run):
    """Return the inputs' seqs, then what is injected until interrupted or 0.5 s idle."""
    seen = [item["seq"] for item in run.inputs]
    while not run.interrupted.is_set():
        item = run.receive(timeout=0.5)
        if item is None:
            break
        seen.append(item["seq"])
    print("echo saw", seen)
    return {"seen": seen, "interrupted": run.interrupted.is_set(), "reason": run.interrupt_reason}


def listen(run):
    """Take injected input until interrupted (no idle end)."""
    seen = [item["seq"] for item in run.inputs]
    while not run.interrupted.is_set():
        item = run.receive(timeout=0.05)
        if item is not None:
            seen.append(item["seq"])
    return {"seen": seen, "reason": run.interrupt_reason}


def boom(run):
    raise RuntimeError("agent crashed")


def forever(run):
    """Ignore interrupts; write its pid so a test can see the process end."""
    path = run.params.get("pidfile")
    if path:
        with open(path, "w") as handle:
            handle.write(str(os.getpid()))
    while True:
        time.sleep(0.05)


def noop(run):
    return None


def waits(run):
    """Wait for a matching Event (or the timeout in settings) and return what came."""
    came = run.wait(type="t.answer", timeout=run.params.get("wait_timeout"), name="answer")
    return {"came": came["seq"] if came else None}


def emits(run):
    return {"emitted": run.emit("t.derived", {"n": 1})}


def spawns(run):
    child = run.create_child("py", keys=[f"child-of-{run.work_id}"], data={"task": "sub"})
    return {"child": child}


def hands_over(run):
    run.successor("py", keys=[f"next-{run.work_id}"], data={"from": run.work_id})
    return "handed over"


def schedules(run):
    """Schedule a tick in 0.2 s and wait for it."""
    timer = run.schedule(0.2, "t.tick", {"n": 1})
    came = run.wait(type="t.tick", timeout=30, name="tick")
    return {"timer": timer, "came": came["seq"] if came else None}


def brief(run):
    """A short piece of work (so that a kill often lands while it runs)."""
    time.sleep(0.3)
    return {"seen": [item["seq"] for item in run.inputs]}


def traced(run):
    """What the attempt got of its trigger's trace context: run.traceparent and TRACEPARENT."""
    return {"run": run.traceparent, "env": os.environ.get("TRACEPARENT")}
