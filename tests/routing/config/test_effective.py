"""The effective configuration: immutable once built (R1), and the demo's Events select the
routes the demo documents."""

from __future__ import annotations

import json

import pytest

from routing.config.effective import build_configuration
from routing.config.validate import parse_document
from routing.extension import EventSnapshot, freeze
from routing.handlers.match import Match
from tests.routing.config.configkit import BASE, DEMO

pytestmark = pytest.mark.django_db


def test_r1_mutating_the_source_after_parse_changes_nothing():
    parsed = parse_document(BASE)
    configuration = build_configuration(parsed.scopes)
    parsed.scopes[0].bindings[0].settings["target"] = "evil:thing"
    parsed.scopes[0].routes[0].params["type"] = "*"
    parsed.scopes[0].routes[0].params["keys"].append("extra")
    acme = configuration.scope("acme")
    assert acme.bindings["triage"].settings["target"] == "demo.agents:triage"
    assert acme.routes[0].params["type"] == "github.pull_request.*"
    assert acme.routes[0].params["keys"] == ("pr:{data.repository}#{data.number}",)


def test_r1_configuration_cannot_be_mutated():
    configuration = build_configuration(parse_document(BASE).scopes)
    acme = configuration.scope("acme")
    with pytest.raises(TypeError):
        acme.bindings["triage"].settings["target"] = "x"
    with pytest.raises(TypeError):
        acme.routes[0].params["type"] = "x"
    with pytest.raises(TypeError):
        configuration.scopes["other"] = acme
    with pytest.raises(AttributeError):
        acme.routes[0].policy = "drop"


DEMO_EVENTS = {
    "pr-opened.json": ("pull-requests", "acme/web", ("pr:acme/web#42",)),
    "pr-synchronize.json": ("pull-requests", "acme/web", ("pr:acme/web#42",)),
    "pr-comment.json": ("pr-comments", "acme", ("pr:acme/web#42",)),
    "issue-opened.json": (None, None, ()),
    "slack-message.json": ("chat", "acme", None),
    "slack-bot-message.json": ("bot-noise", "acme", ()),
    "ops-alert.json": ("alerts", "acme/ops", ("incident:payments",)),
    "ops-alert-resolved.json": ("resolved", "acme/ops", ("incident:payments",)),
    "ops-heartbeat.json": ("heartbeats", "acme/ops", ()),
}


@pytest.mark.parametrize(("name", "expected"), sorted(DEMO_EVENTS.items()))
def test_r6_demo_events_select_the_documented_route(name, expected):
    payload = json.loads((DEMO.parent / "events" / name).read_text(encoding="utf-8"))
    configuration = build_configuration(parse_document(DEMO.read_text(encoding="utf-8")).scopes)
    scope = configuration.scope(payload["scope"])
    event = EventSnapshot(
        seq=1,
        id=payload["id"],
        source=payload["source"],
        type=payload["type"],
        subject=payload.get("subject", ""),
        scope=payload["scope"],
        time=None,
        data=freeze(payload.get("data")),
        correlation=(),
        work_id=None,
        execution_id=None,
        causation_id=None,
        depth=0,
    )
    handler = Match()
    selected = None
    for route in scope.routes:  # the first match wins (R6)
        decision = handler.match(event, route.info())
        if decision.matched:
            selected = (route.slot, route.scope, decision.keys)
            break
    slot, declared_in, keys = expected
    if slot is None:
        assert selected is None
    else:
        assert selected is not None and selected[:2] == (slot, declared_in)
        assert keys is None or selected[2] == keys
