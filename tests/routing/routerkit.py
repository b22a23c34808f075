"""Helpers for router tests: a configuration, acceptance through the real service, routing."""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
from datetime import timedelta
from typing import Any

from django.db import transaction

from causal.clock import system_clock
from causal.models import Event
from routing.acceptance.services import event_accept
from routing.config.services import config_apply
from routing.engine.configurations import LiveConfigurations
from routing.engine.loop import RouteLoop
from routing.engine.options import RouterOptions
from routing.engine.router import Router, build_router
from tests.support import manage_command
from worklife.dispatch import dispatch_many_in_tx
from worklife.errors import WorkError

HANDLERS = {
    "match": "routing.handlers.Match",
    "scripted": "tests.routing.sample_handlers.Scripted",
    "mutating": "tests.routing.sample_handlers.Mutating",
}

DOCUMENT = """
version: 1
scopes:
  - path: acme
    bindings:
      triage:
        executor: python
        settings: {target: "tests.routing.sample_handlers:noop"}
        controls: [inject, interrupt]
      plain:
        executor: command
        settings: {argv: ["true"]}
      inbox: {}
    routes:
      - slot: pr
        handler: match
        params:
          type: "github.pull_request.*"
          keys: ["pr:{data.repo}#{data.number}"]
        binding: triage
        policy: inject
        fallback: queue
      - slot: chat
        handler: match
        params:
          type: "chat.message"
          keys: ["thread:{data.thread}"]
        binding: triage
        policy: interrupt
      - slot: ops
        handler: match
        params: {type: "ops.*", keys: ["ops:{data.service}"]}
        binding: plain
        policy: inject
        fallback: drop
      - slot: follow-up
        handler: match
        params: {type: "followup.*", keys: ["pr:{data.repo}#{data.number}"]}
        binding: triage
        policy: queue
        start: false
      - slot: noise
        handler: match
        params: {type: "noise.*"}
        policy: drop
      - slot: scripted
        handler: scripted
        params: {prefix: "x"}
        binding: inbox
        policy: queue
  - path: acme/web
    bindings:
      triage: {executor: command, settings: {argv: ["./bin/triage"]}}
    routes:
      - slot: chat
        handler: match
        params: {type: "chat.message", keys: ["thread:{data.thread}"]}
        binding: triage
        policy: queue
"""

SCRIPTED_ONLY = """
version: 1
scopes:
  - path: acme
    bindings:
      inbox: {}
    routes:
      - slot: scripted
        handler: scripted
        params: {}
        binding: inbox
        policy: queue
"""


def apply(clock, document: str = DOCUMENT):
    return config_apply(document=document, clock=clock)


def accept(
    clock, type: str, data: Any = None, *, id: str | None = None, source: str = "tests", **fields
) -> Event:
    """Accept an Event through the real acceptance service (trusted: tests may use core.*)."""
    accept.counter += 1
    payload = {
        "specversion": "1.0",
        "id": id or f"e{accept.counter}",
        "source": source,
        "type": type,
        "scope": fields.pop("scope", "acme"),
        "data": data if data is not None else {},
        **fields,
    }
    return event_accept(payload=payload, clock=clock, trusted=True).event


accept.counter = 0


def router(clock, **options) -> Router:
    return build_router(clock=clock, options=RouterOptions(**{"route_timeout": 2.0, **options}))


def drain(r: Router, rounds: int = 20) -> None:
    for _ in range(rounds):
        if not r.route_pending():
            return


def state(event: Event) -> str:
    event.refresh_from_db()
    return event.route_state


# Routes only the built-in handler knows, for child processes that run with default settings.
MATCH_ONLY = """
version: 1
scopes:
  - path: acme
    bindings:
      inbox: {}
    routes:
      - slot: conversations
        handler: match
        params:
          type: "c.*"
          keys: ["k:{data.k}"]
        binding: inbox
        policy: queue
      - slot: noise
        handler: match
        params: {type: "noise.*"}
        policy: drop
"""


def conversation_payloads(n: int, keys: int, *, seed: int = 1) -> list[dict]:
    """N Events over ``keys`` shared keys: most carry the key in data (decided by the route),
    some also explicitly, some are noise or unmatched."""
    import random

    rng = random.Random(seed)
    payloads = []
    for i in range(n):
        k = rng.randrange(keys)
        roll = rng.random()
        payload = {
            "specversion": "1.0",
            "id": f"c{i}",
            "source": "tests",
            "scope": "acme",
            "type": "c.msg",
            "data": {"k": k},
        }
        if roll < 0.2:
            payload["correlation"] = [f"k:{k}"]
        elif roll < 0.25:
            payload["type"] = "noise.tick"
        elif roll < 0.3:
            payload["type"] = "other.thing"
        payloads.append(payload)
    return payloads


def assert_routing_invariants() -> None:
    """I1–I3: one record per settled Event, one owner per key, each Work's input inserted in
    acceptance order."""
    from collections import defaultdict

    from django.db.models import Count

    from causal.models import Event, RouteState
    from routing.models import RouteRecord
    from worklife.models import CorrelationKey, WorkInput

    settled = Event.objects.exclude(route_state=RouteState.UNROUTED).count()
    assert RouteRecord.objects.count() == settled
    assert not RouteRecord.objects.values("event").annotate(n=Count("id")).filter(n__gt=1).exists()
    assert not CorrelationKey.objects.values("scope", "key").annotate(n=Count("id")).filter(n__gt=1).exists()
    assert not WorkInput.objects.values("event").annotate(n=Count("id")).filter(n__gt=1).exists()
    by_work: dict[int, list[int]] = defaultdict(list)
    for work_id, seq in WorkInput.objects.order_by("pk").values_list("work_id", "seq"):
        by_work[work_id].append(seq)
    for work_id, seqs in by_work.items():
        assert seqs == sorted(seqs), f"Work {work_id} took input out of acceptance order: {seqs}"
    # Every Event that became input is recorded on that Work.
    mismatched = WorkInput.objects.exclude(
        work_id__in=RouteRecord.objects.filter(event=models_outer_ref()).values("work_id")
    )
    assert not mismatched.exists()


def models_outer_ref():
    from django.db.models import OuterRef

    return OuterRef("event")


def drain_loop(clock=system_clock, **options) -> int:
    loop = RouteLoop(clock=clock, options=RouterOptions(route_timeout=5.0, **options))
    routed = 0
    try:
        while True:
            result = loop.step()
            routed += result.settled
            if result.empty:
                return routed
    finally:
        loop.close()


def attempt_dispatch(*, work_id, clock):
    """The Work's next attempt, started as the work loop starts it (routing's configuration)."""
    with transaction.atomic():
        result = dispatch_many_in_tx(
            work_ids=[work_id],
            configurations=LiveConfigurations(),
            clock=clock,
            lease_until=clock() + timedelta(seconds=30),
            lease_owner="test",
        )[work_id]
    if isinstance(result, WorkError):
        raise result
    return result.attempt


def cloud_event(**overrides):
    """A valid structured-mode CloudEvent for the scope ``acme``."""
    event = {
        "specversion": "1.0",
        "id": "evt-1",
        "source": "github/acme",
        "type": "github.pull_request.opened",
        "scope": "acme",
        "data": {"number": 7},
    }
    event.update(overrides)
    return {key: value for key, value in event.items() if value is not ...}


def pr(number=1, action="opened", **extra):
    return {
        "source": "github",
        "type": f"github.pull_request.{action}",
        "scope": "acme",
        "data": {"repo": "acme/api", "number": number},
        **extra,
    }


def run_route_loops(count: int, batch_size: int, env: dict[str, str]) -> None:
    """Run ``count`` ``route_loop --drain`` processes side by side until all have ended. Their
    output goes to files, not pipes: a loop blocked writing to a full pipe that nobody reads yet
    would hold its claims and stall the others."""
    with contextlib.ExitStack() as stack:
        procs = []
        for _ in range(count):
            out = stack.enter_context(tempfile.TemporaryFile("w+"))
            procs.append(
                (
                    subprocess.Popen(
                        manage_command("route_loop", "--drain", "--batch-size", str(batch_size)),
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        text=True,
                    ),
                    out,
                )
            )
        for proc, out in procs:
            proc.wait(timeout=900)
            out.seek(0)
            assert proc.returncode == 0, out.read()[-2000:]
