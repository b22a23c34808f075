"""Helpers for schedule tests: a configuration with one schedule in scope ``s`` whose Events a
queue-only binding takes, firing from one or several route loops, and the Events fired."""

from __future__ import annotations

import json
from typing import Any

from causal.models import Event
from routing.config.selectors import live_generation, load_configuration
from routing.config.services import config_apply
from routing.schedules import Fired, schedule_source, schedules_fire


def schedule_document(**schedule: Any) -> str:
    """Scope ``s`` with the schedule ``tick`` (``type: s.tick`` unless given) and a route that
    queues its Events on the queue-only binding ``inbox``, keyed by the schedule."""
    declared = {"type": "s.tick", **schedule}
    route = {
        "slot": "ticks",
        "handler": "match",
        "params": {"type": "s.*", "keys": ["tick"]},
        "binding": "inbox",
        "policy": "queue",
    }
    scope = {"path": "s", "bindings": {"inbox": {}}, "routes": [route], "schedules": {"tick": declared}}
    return json.dumps({"version": 1, "scopes": [scope]})


def apply_schedule(clock, **schedule: Any) -> None:
    config_apply(document=schedule_document(**schedule), clock=clock)


def fire(clock, owner: str = "") -> list[Fired]:
    """One loop's firing pass on the live configuration at ``clock()``."""
    return schedules_fire(configuration=load_configuration(live_generation()), clock=clock, owner=owner)


def fired_events(scope: str = "s") -> list[Event]:
    return list(Event.objects.filter(source=schedule_source(scope)).order_by("time", "seq"))


def fired_ids(scope: str = "s") -> list[str]:
    return [event.envelope_id for event in fired_events(scope)]
