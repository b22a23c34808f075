"""Trace says what flow control would do with the attempt of the Work an Event goes to, by the
claim's own rules (worklife.flow), and the configuration refuses a bad flow knob with its place."""

from __future__ import annotations

import json

import pytest

from routing.config.problems import ConfigInvalid
from routing.config.services import config_apply, config_candidate
from routing.setup.impact import impact_preview
from routing.setup.trace import trace
from tests.worklife.enginekit import runner, step_until
from tests.worklife.flowkit import FLOW_BINDINGS, flow_document, flow_send, flow_setup, live_work

pytestmark = pytest.mark.django_db(transaction=True)


def _payload(binding: str, key: str, **data) -> dict:
    return {
        "specversion": "1.0",
        "id": f"trace-{binding}-{key}",
        "source": "tests",
        "type": f"f.{binding}",
        "scope": "f",
        "data": {"key": key, **data},
    }


def test_trace_says_a_debounced_binding_would_hold_the_attempt_until_its_input_is_quiet(clock):
    flow_setup(clock)
    result = trace(payload=_payload("debounced", "d"), clock=clock)
    assert result.effect == "start"
    assert result.flow.startswith(
        "flow control (debounce 10 s, at most 60 s) would hold its attempt: debounced until"
    )
    assert result.flow in result.notes and result.as_dict()["flow"] == result.flow


def test_trace_says_a_binding_at_its_concurrency_limit_would_hold_the_attempt_and_when_it_would_not(clock):
    flow_setup(clock)
    loop = runner(clock, slots=4)
    try:
        assert trace(payload=_payload("capped", "x"), clock=clock).flow == (
            "flow control (concurrency 2): its attempt may start now"
        )
        flow_send(clock, "capped", "a")
        flow_send(clock, "capped", "b")
        step_until(loop, lambda: len(live_work("capped")) == 2)
        assert trace(payload=_payload("capped", "x"), clock=clock).flow == (
            "flow control (concurrency 2) would hold its attempt: held: binding `capped` is at its "
            "concurrency limit 2"
        )
    finally:
        loop.shutdown(grace=0)


def test_trace_of_a_binding_without_flow_control_says_nothing_of_it(clock):
    flow_setup(clock)
    assert trace(payload=_payload("plain", "p"), clock=clock).flow == ""


def test_a_configuration_with_a_bad_flow_knob_is_refused_naming_its_place(clock):
    bad = {**FLOW_BINDINGS, "capped": {**FLOW_BINDINGS["capped"], "concurrency": {"limit": "three"}}}
    with pytest.raises(ConfigInvalid) as refused:
        config_apply(document=flow_document(bad), clock=clock)
    assert [p.place for p in refused.value.problems] == ["scopes[0].bindings.capped.concurrency.limit"]
    assert json.loads(flow_document())["scopes"][0]["bindings"]["capped"]["concurrency"] == {"limit": 2}


def test_the_impact_preview_groups_the_events_whose_work_a_candidate_would_debounce(clock):
    flow_setup(clock)
    flow_send(clock, "plain", "p1")
    flow_send(clock, "plain", "p2")
    debounced = {**FLOW_BINDINGS, "plain": {**FLOW_BINDINGS["plain"], "debounce": {"quiet": "30s"}}}
    report = impact_preview(
        candidate=config_candidate(document=flow_document(debounced), clock=clock), clock=clock
    )
    changes = dict(report.groups)["flow control: starts → debounce"]
    assert len(changes) == 2
    assert changes[0].live.result.flow == ""
    assert changes[0].candidate.result.flow.startswith("flow control (debounce 30 s) would hold its attempt")
