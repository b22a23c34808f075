"""Helpers for Work engine tests: a configuration whose bindings run the targets in
``tests/worklife/targets.py`` (and small commands), acceptance, routing, a runner."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable

from routing.engine.configurations import LiveConfigurations
from tests.routing.routerkit import accept, apply, router
from worklife.models import Attempt, Work
from worklife.runner import WorkRunner

# A command that reads its inputs, then injected lines until an interrupt line or 1 s idle,
# and completes with the seqs it saw; exit status from the first input's data.exit.
COMMAND = r"""
import json, select, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)  # the interrupt line says why; SIGINT comes with it
seen, started, deadline, code = [], False, None, 0
while True:
    if started and not select.select([sys.stdin], [], [], max(0, deadline - time.monotonic()))[0]:
        break
    line = sys.stdin.readline()
    if not line:
        break
    m = json.loads(line)
    if m["kind"] == "input":
        seen.append(m["event"]["seq"])
        code = code or (m["event"].get("data") or {}).get("exit", 0)
    elif m["kind"] == "started":
        started, deadline = True, time.monotonic() + 1.0
    elif m["kind"] == "interrupt":
        print("interrupted:", m["reason"], flush=True)
        break
print("@conduit " + json.dumps({"op": "complete", "result": {"seen": seen}}), flush=True)
sys.exit(code)
"""

# A command that ignores SIGINT and stdin and sleeps: only SIGTERM/SIGKILL end it.
STUBBORN = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(600)"

BINDINGS = {
    "py": {
        "executor": "python",
        "settings": {"target": "tests.worklife.targets:echo"},
        "controls": ["inject", "interrupt"],
    },
    "listen": {
        "executor": "python",
        "settings": {"target": "tests.worklife.targets:listen"},
        "controls": ["inject", "interrupt"],
    },
    "boom": {"executor": "python", "settings": {"target": "tests.worklife.targets:boom"}},
    "forever": {"executor": "python", "settings": {"target": "tests.worklife.targets:forever", "timeout": 1}},
    "hang": {"executor": "python", "settings": {"target": "tests.worklife.targets:forever"}},
    "waits": {
        "executor": "python",
        "settings": {"target": "tests.worklife.targets:waits", "params": {"wait_timeout": 60}},
    },
    "waits_briefly": {
        "executor": "python",
        "settings": {"target": "tests.worklife.targets:waits", "params": {"wait_timeout": 0.3}},
    },
    "emits": {"executor": "python", "settings": {"target": "tests.worklife.targets:emits"}},
    "spawns": {"executor": "python", "settings": {"target": "tests.worklife.targets:spawns"}},
    "hands_over": {"executor": "python", "settings": {"target": "tests.worklife.targets:hands_over"}},
    "schedules": {"executor": "python", "settings": {"target": "tests.worklife.targets:schedules"}},
    "noop": {"executor": "python", "settings": {"target": "tests.worklife.targets:noop"}},
    "brief": {"executor": "python", "settings": {"target": "tests.worklife.targets:brief"}},
    "cmd": {
        "executor": "command",
        "settings": {"argv": [sys.executable, "-c", COMMAND], "interrupt_grace": 1},
        "controls": ["inject", "interrupt"],
    },
    "stubborn": {
        "executor": "command",
        "settings": {"argv": [sys.executable, "-c", STUBBORN], "interrupt_grace": 0.5},
        "controls": ["inject", "interrupt"],
    },
    "archive": {},
}


def document() -> str:
    """Per binding B: ``t.B`` starts or queues, ``t.B.more`` injects, ``t.B.stop`` interrupts,
    all keyed ``k:{data.key}``; ``t.answer`` joins a Work (for waits)."""
    routes = []
    for name in BINDINGS:
        keys = ["k:{data.key}"]
        routes.append(
            {
                "slot": name,
                "handler": "match",
                "params": {"type": f"t.{name}", "keys": keys},
                "binding": name,
                "policy": "queue",
            }
        )
        if name != "archive":
            for suffix, policy in (("more", "inject"), ("stop", "interrupt")):
                routes.append(
                    {
                        "slot": f"{name}-{suffix}",
                        "handler": "match",
                        "params": {"type": f"t.{name}.{suffix}", "keys": keys},
                        "binding": name,
                        "policy": policy,
                        "fallback": "queue",
                        "start": False,
                    }
                )
    routes.append(
        {
            "slot": "answer",
            "handler": "match",
            "params": {"type": "t.answer", "keys": ["k:{data.key}"]},
            "binding": "waits",
            "policy": "queue",
            "start": False,
        }
    )
    return json.dumps({"version": 1, "scopes": [{"path": "t", "bindings": BINDINGS, "routes": routes}]})


def setup(clock) -> None:
    apply(clock, document())


def send(clock, binding: str, key: str, suffix: str = "", **data) -> int:
    """Accept and route one Event; returns its seq."""
    type_ = f"t.{binding}" + (f".{suffix}" if suffix else "")
    event = accept(clock, type_, {"key": key, **data}, scope="t")
    r = router(clock)
    for _ in range(20):
        if not r.route_pending():
            break
    return event.seq


def route_all(clock) -> None:
    r = router(clock)
    for _ in range(20):
        if not r.route_pending():
            break


def runner(clock, **options) -> WorkRunner:
    return WorkRunner(
        clock=clock, configurations=LiveConfigurations(), **{"slots": 4, "lease_seconds": 30, **options}
    )


def step_until(
    r: WorkRunner,
    done: Callable[[], bool],
    *,
    timeout: float = 20.0,
    between: Callable[[], None] | None = None,
) -> None:
    """Step the runner until ``done()`` holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "the runner did not get there in time"
        r.step()
        if between is not None:
            between()
        time.sleep(0.02)


def work_of(seq: int) -> Work:
    from routing.models import RouteRecord

    return Work.objects.get(pk=RouteRecord.objects.get(event_id=seq).work_id)


def status(work: Work) -> str:
    work.refresh_from_db()
    return work.status


def attempts(work: Work) -> list[Attempt]:
    return list(Attempt.objects.filter(work=work).order_by("number"))
