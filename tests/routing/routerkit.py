"""Helpers for router tests: a configuration, acceptance through the real service, routing."""

from __future__ import annotations

from typing import Any

from causal.models import Event
from routing.router import Router, RouterOptions, build_router
from routing.services import config_apply, event_accept

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
