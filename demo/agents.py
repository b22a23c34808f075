"""Demo agents for ``demo/conduit.yaml``.

The ``python`` executor calls ``triage``, ``responder`` and ``oncall`` with a
:class:`worklife.executors.PythonRun`; the ``command`` executor runs ``python3 -m demo.agents
triage`` with the inputs as a JSON array on standard input.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from worklife.executors import PythonRun

IDLE_SECONDS = 5.0


def _summary(item: Any) -> str:
    if isinstance(item, dict):
        return f"{item.get('type', '?')} {item.get('id', '')}".strip()
    return str(item)


def _work(run: PythonRun, role: str) -> dict[str, Any]:
    """Handle the first inputs, then injected ones, until interrupted or idle."""
    seen = [_summary(item) for item in run.inputs]
    while not run.interrupted.is_set():
        item = run.receive(timeout=IDLE_SECONDS)
        if item is None:
            break
        seen.append(_summary(item))
    return {
        "role": role,
        "work_id": run.work_id,
        "handled": seen,
        "interrupted": run.interrupted.is_set(),
        "reason": run.interrupt_reason,
    }


def triage(run: PythonRun) -> dict[str, Any]:
    """Review a pull request's events."""
    return _work(run, "triage")


def responder(run: PythonRun) -> dict[str, Any]:
    """Answer a chat thread."""
    return _work(run, "responder")


def oncall(run: PythonRun) -> dict[str, Any]:
    """Respond to an incident until it resolves."""
    return _work(run, "oncall")


def main(argv: list[str]) -> int:
    """The command-executor entry point: summarise the inputs read from standard input."""
    role = argv[1] if len(argv) > 1 else "triage"
    inputs = json.load(sys.stdin)
    print(json.dumps({"role": role, "handled": [_summary(item) for item in inputs]}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
