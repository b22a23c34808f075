"""Demo agents for ``demo/conduit.yaml``.

The ``python`` executor calls ``triage``, ``responder`` and ``oncall`` with a
:class:`worklife.child.Run` in a worker process; the ``command`` executor runs ``python3 -m
demo.agents triage`` and speaks the line protocol on its standard input and output (see the
README's "Writing an executor").
"""

from __future__ import annotations

import json
import select
import sys
import time
from typing import Any

from worklife.child import Run

# How long an agent waits for more input before it finishes.
IDLE_SECONDS = 3.0


def _summary(item: Any) -> str:
    if isinstance(item, dict):
        return f"{item.get('type', '?')} #{item.get('seq', '')}".strip(" #")
    return str(item)


def _text(data: dict[str, Any]) -> str:
    """A message's text: a Slack delivery holds it in its event."""
    event = data.get("event")
    return str(data.get("text") or (event.get("text") if isinstance(event, dict) else "") or "")


def _work(run: Run, role: str) -> dict[str, Any]:
    """Handle the first inputs, then injected ones, until interrupted or idle."""
    seen = []
    for item in run.inputs:
        data = item.get("data") if isinstance(item, dict) else None
        if isinstance(data, dict) and "crash" in _text(data).lower():
            # The demo's failing input: the attempt fails, is retried with backoff, then parked.
            raise RuntimeError(f"{role} cannot handle {_summary(item)}: it asked to crash")
        seen.append(_summary(item))
        print(f"{role}: handled {_summary(item)}")
    while not run.interrupted.is_set():
        item = run.receive(timeout=IDLE_SECONDS)
        if item is None:
            break
        seen.append(_summary(item))
        print(f"{role}: handled injected {_summary(item)}")
    return {
        "role": role,
        "work_id": run.work_id,
        "handled": seen,
        "interrupted": run.interrupted.is_set(),
        "reason": run.interrupt_reason,
    }


def triage(run: Run) -> dict[str, Any]:
    """Review a pull request's events."""
    return _work(run, "triage")


def responder(run: Run) -> dict[str, Any]:
    """Answer a chat thread."""
    return _work(run, "responder")


def oncall(run: Run) -> dict[str, Any]:
    """Respond to an incident until it resolves (an interrupt) or goes quiet."""
    return _work(run, "oncall")


def digest(run: Run) -> dict[str, Any]:
    """Sum up the day for the on-call channel (fired by the daily-digest schedule)."""
    return _work(run, "digest")


def main(argv: list[str]) -> int:
    """The command-executor entry point: read input lines until ``started``, then take more
    for a while, and report what was handled with a ``complete`` call."""
    role = argv[1] if len(argv) > 1 else "triage"
    handled = []
    started = False
    deadline = None
    while True:
        if started:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([sys.stdin], [], [], left)[0]:
                break
        line = sys.stdin.readline()
        if not line:
            break
        message = json.loads(line)
        if message.get("kind") == "input":
            handled.append(_summary(message.get("event")))
            print(f"{role}: handled {_summary(message.get('event'))}", flush=True)
        elif message.get("kind") == "started":
            started, deadline = True, time.monotonic() + IDLE_SECONDS
        elif message.get("kind") == "interrupt":
            break
    print(
        "@conduit " + json.dumps({"op": "complete", "result": {"role": role, "handled": handled}}), flush=True
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
