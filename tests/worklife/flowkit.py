"""Helpers for flow control tests: a configuration whose bindings carry each knob, Events sent
to them through the real router, and what the attempts of a binding took."""

from __future__ import annotations

import json

from tests.routing.routerkit import accept, apply
from tests.worklife.enginekit import route_all
from worklife.models import Attempt, Work, WorkInput

HANG = {"executor": "python", "settings": {"target": "tests.worklife.targets:forever"}}
NOOP = {"executor": "python", "settings": {"target": "tests.worklife.targets:noop"}}

FLOW_BINDINGS = {
    "capped": {**HANG, "concurrency": {"limit": 2}},
    "per_channel": {**HANG, "concurrency": {"limit": 1, "key": "{data.channel}"}},
    "throttled": {**NOOP, "throttle": {"limit": 2, "period": "60s"}},
    "debounced": {**NOOP, "debounce": {"quiet": "10s", "max_wait": "60s"}},
    "batched": {**NOOP, "batch": {"size": 3, "wait": "30s"}},
    "urgent": {**NOOP, "priority": 10},
    "plain": dict(NOOP),
}


def flow_document(bindings: dict | None = None) -> str:
    """Scope ``f``: per binding B, Events of type ``f.B`` start or queue on Work keyed
    ``k:{data.key}``."""
    bindings = bindings or FLOW_BINDINGS
    routes = [
        {
            "slot": name,
            "handler": "match",
            "params": {"type": f"f.{name}", "keys": ["k:{data.key}"]},
            "binding": name,
            "policy": "queue",
        }
        for name in bindings
    ]
    return json.dumps({"version": 1, "scopes": [{"path": "f", "bindings": bindings, "routes": routes}]})


def flow_setup(clock, bindings: dict | None = None) -> None:
    apply(clock, flow_document(bindings))


def flow_send(clock, binding: str, key: str, **data) -> Work:
    """Accept and route one Event to ``binding`` on the Work of ``key``; returns that Work."""
    accept(clock, f"f.{binding}", {"key": key, **data}, scope="f")
    route_all(clock)
    return Work.objects.get(keys__key=f"k:{key}")


def live_work(binding: str) -> set[int]:
    """The Work of ``binding`` with a live attempt."""
    return set(
        Attempt.objects.filter(binding=binding, state__in=["running", "waiting"]).values_list(
            "work_id", flat=True
        )
    )


def inputs_taken(work: Work) -> list[list[int]]:
    """The seqs each attempt of ``work`` took, by attempt number."""
    out: dict[int, list[int]] = {}
    for number, seq in (
        WorkInput.objects.filter(work=work, attempt__isnull=False)
        .order_by("attempt__number", "seq")
        .values_list("attempt__number", "seq")
    ):
        out.setdefault(number, []).append(seq)
    return [out[n] for n in sorted(out)]


def most_at_once(intervals: list[tuple]) -> int:
    """The most intervals ``(start, end)`` open at one moment (an end at the same instant as a
    start closes first)."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    most = live = 0
    for _, step in edges:
        live += step
        most = max(most, live)
    return most


def most_started_in(starts: list, seconds: float) -> int:
    """The most starts within any window of ``seconds`` (a start exactly ``seconds`` after
    another is in the next window)."""
    ordered = sorted(starts)
    most = first = 0
    for last, moment in enumerate(ordered):
        while (moment - ordered[first]).total_seconds() >= seconds:
            first += 1
        most = max(most, last - first + 1)
    return most
