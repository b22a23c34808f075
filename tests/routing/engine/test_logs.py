"""Route logs: the ``route.decided`` line carries the route's JSON values (R29) and field names,
never payload values."""

from __future__ import annotations

import json

import pytest

from routing.engine.logs import redacted
from routing.models import RouteRecord
from routing.serializers import route_json
from tests.routing.routedkit import REFUSALS, History, route_all
from tests.routing.routerkit import accept, apply

pytestmark = pytest.mark.django_db


@pytest.fixture
def handlers(test_handlers):
    """Every test here routes with the test handlers registered (tests/conftest.py)."""


@pytest.fixture
def history(clock) -> History:
    return History(clock)


@pytest.mark.usefixtures("handlers")
def test_r29_route_json_is_the_record_and_matches_the_route_decided_log_fields(history, caplog):
    record = RouteRecord.objects.get(event=history.unmatched)
    data = route_json(record)
    assert list(data) == [
        "event",
        "work",
        "route",
        "binding",
        "generation",
        "policy",
        "reason",
        "disposition",
        "refusals",
        "error",
        "attempts",
        "decided_at",
    ]
    assert data["refusals"] == REFUSALS
    json.dumps(data)  # JSON-ready as it is


@pytest.mark.usefixtures("handlers")
def test_r29_route_decided_log_carries_the_route_json_values(clock, caplog):
    apply(clock)
    event = accept(clock, "other.thing", {})
    with caplog.at_level("INFO", logger="conduit.routing"):
        route_all(clock)
    decided = [r for r in caplog.records if r.getMessage() == "route.decided"]
    assert len(decided) == 1
    log = decided[0]
    data = route_json(RouteRecord.objects.get(event=event))
    assert (log.event, log.work, log.route, log.binding, log.generation, log.policy, log.reason) == (
        data["event"],
        data["work"],
        data["route"],
        data["binding"],
        data["generation"],
        data["policy"],
        data["reason"],
    )
    # Reasons and errors are redacted in the log: field names, never values.
    assert getattr(log, "route.refusals") == [
        {"route": r["route"], "reason": redacted(r["reason"], names=[r["route"]])} for r in data["refusals"]
    ]
    assert (getattr(log, "route.error"), getattr(log, "route.attempts")) == (data["error"], data["attempts"])


GATED = """
version: 1
scopes:
  - path: acme
    routes:
      - slot: gate
        handler: match
        params: {type: "x.*", where: [{field: data.action, equals: opened}]}
        policy: drop
      - slot: numbers
        handler: match
        params: {type: "x.*", where: [{field: data.n, equals: 7}]}
        policy: drop
      - slot: other
        handler: match
        params: {type: "y.*"}
        policy: drop
"""


@pytest.mark.usefixtures("handlers")
def test_route_decided_log_lines_carry_field_names_never_payload_values(clock, caplog):
    apply(clock, GATED)
    event = accept(clock, "x.secret-type", {"action": "s3cr3t-Value, it's mine", "n": 424242})
    with caplog.at_level("INFO", logger="conduit.routing"):
        route_all(clock)
    log = next(r for r in caplog.records if r.getMessage() == "route.decided")
    line = caplog.text
    for value in ("s3cr3t", "it's mine", "424242", "secret-type"):
        assert value not in line, value
    assert getattr(log, "route.refusals") == [
        {"route": "gate", "reason": "data.action is …, not …"},
        {"route": "numbers", "reason": "data.n is …, not …"},
        {"route": "other", "reason": "type … does not match …"},
    ]
    # The stored record keeps the whole reasons for operators.
    refusals = RouteRecord.objects.get(event=event).refusals
    assert refusals[0] == {
        "route": "gate",
        "reason": "data.action is 's3cr3t-Value, it's mine', not 'opened'",
    }
    assert "424242" in refusals[1]["reason"]


@pytest.mark.usefixtures("handlers")
def test_redacted_keeps_field_names_and_words_only():
    assert redacted("key pr:{data.repo} needs data.repo, which is {'a': 1}, not a scalar") == (
        "key … needs data.repo, which is …, not a scalar"
    )
    assert redacted("data.tags[2] is missing, expected one of [a, b]") == (
        "data.tags[2] is missing, expected one of …"
    )
    assert redacted("route gate: KeyError: 'token-123'", names=["gate"]) == "route gate: …"


@pytest.mark.usefixtures("handlers")
def test_route_decided_lines_carry_the_trace_of_an_event_that_has_one(clock, caplog):
    apply(clock)
    traced = accept(
        clock, "other.thing", {}, traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    )
    plain = accept(clock, "other.thing", {})
    with caplog.at_level("INFO", logger="conduit.routing"):
        route_all(clock)
    decided = {r.event: r for r in caplog.records if r.getMessage() == "route.decided"}
    assert (decided[traced.seq].trace_id, decided[traced.seq].span_id) == (
        "0af7651916cd43dd8448eb211c80319c",
        "b7ad6b7169203331",
    )
    assert not hasattr(decided[plain.seq], "trace_id")
