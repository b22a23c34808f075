"""Trace: a dry run of routing for a hypothetical Event (R37–R45)."""

from __future__ import annotations

import os
import re
from datetime import timedelta

import pytest
from django.apps import apps
from django.test import override_settings
from hypothesis import HealthCheck, Phase, event, given, reject
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from hypothesis.extra.django import TestCase as HypothesisTestCase

from causal.models import Event, RouteState
from routing.acceptance.envelopes import EnvelopeInvalid
from routing.acceptance.services import event_accept
from routing.config.problems import ConfigInvalid
from routing.config.services import config_apply, config_candidate
from routing.engine.options import RouterOptions
from routing.engine.router import build_router
from routing.models import RouteRecord
from routing.setup.trace import TraceRefused, samples, trace, trace_candidate
from tests.conftest import FakeClock
from tests.routing import sample_handlers
from tests.routing.routerkit import DOCUMENT, HANDLERS, accept, apply, pr, router
from tests.worklife.attemptkit import attempt_start, work_complete
from worklife.errors import WorkError
from worklife.lifecycle import work_cancel_in_tx
from worklife.models import Attempt, Wait, Work
from worklife.waits import attempt_wait

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def handlers(test_handlers):
    """Every test here routes with the test handlers registered (tests/conftest.py)."""


@pytest.fixture
def live(clock):
    return apply(clock)


def row_counts():
    return {
        m._meta.label: m.objects.count()
        for m in apps.get_models()
        if m._meta.app_label in ("causal", "worklife", "routing")
    }


def test_r37_a_trace_writes_nothing(clock, live):
    before = row_counts()
    result = trace(payload=pr(), clock=clock)
    assert result.effect == "start" and result.route == "pr"
    assert row_counts() == before


def test_r37_trace_candidate_reads_candidate(clock, live):
    candidate = config_candidate(document=DOCUMENT.replace('type: "noise.*"', 'type: "quiet.*"'), clock=clock)
    result = trace_candidate(
        candidate=candidate, payload={"source": "s", "type": "quiet.tick", "scope": "acme"}, clock=clock
    )
    assert (result.generation, result.effect, result.route) == ("candidate", "drop", "noise")
    live_result = trace(payload={"source": "s", "type": "quiet.tick", "scope": "acme"}, clock=clock)
    assert (live_result.generation, live_result.effect) == (str(live.number), "unmatched")


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"source": "s", "type": "core.manual.skip_event", "scope": "acme"}, "type"),
        ({"source": "core.manual", "type": "x", "scope": "acme"}, "source"),
        ({"source": "s", "type": "x", "scope": "nowhere"}, "scope"),
        ({"source": "s", "type": "x", "scope": "acme", "time": "yesterday"}, "time"),
        ({"type": "x", "scope": "acme"}, "source"),
    ],
)
def test_r38_a_trace_refuses_an_event_acceptance_would_refuse(clock, live, payload, field):
    with pytest.raises(TraceRefused) as refused:
        trace(payload=payload, clock=clock)
    assert refused.value.field == field


def test_r39_trace_agrees_with_routing(clock, live):
    """The same code path: for each Event, what trace says is what routing then records."""
    r = router(clock)
    offered = [
        pr(1),
        pr(1, "edited"),
        {"source": "chat", "type": "chat.message", "scope": "acme", "data": {"thread": "t"}},
        {"source": "s", "type": "noise.ping", "scope": "acme"},
        {"source": "s", "type": "other.thing", "scope": "acme"},
        {"source": "s", "type": "followup.x", "scope": "acme", "data": {"repo": "acme/api", "number": 1}},
        {"source": "s", "type": "followup.x", "scope": "acme", "data": {"repo": "acme/api", "number": 9}},
        pr(2, scope="acme/web"),
    ]
    for i, payload in enumerate(offered):
        predicted = trace(payload={**payload, "id": f"t{i}"}, clock=clock)
        event = accept(
            clock, payload["type"], payload.get("data"), source=payload["source"], scope=payload["scope"]
        )
        r.route(event.seq)
        record = RouteRecord.objects.get(event=event)
        assert (predicted.effect, predicted.route, predicted.binding, list(predicted.refusals)) == (
            record.policy,
            record.route,
            record.binding,
            record.refusals,
        ), payload["type"]
        if predicted.work_id is not None:
            assert predicted.work_id == record.work_id


def test_r40_each_route_gets_a_verdict_with_its_reason(clock, live):
    result = trace(
        payload={"source": "s", "type": "chat.message", "scope": "acme", "data": {"thread": "a"}}, clock=clock
    )
    verdicts = [(v.route, v.scope, v.verdict) for v in result.verdicts]
    assert verdicts == [
        ("pr", "acme", "skip"),
        ("chat", "acme", "match"),
        ("ops", "acme", "not_reached"),
        ("follow-up", "acme", "not_reached"),
        ("noise", "acme", "not_reached"),
        ("scripted", "acme", "not_reached"),
    ]
    assert "does not match" in result.verdicts[0].reason
    assert result.verdicts[1].reason == "type chat.message matches chat.message"
    assert [v.reason for v in result.verdicts[2:]] == ["", "", "", ""], "routes not reached say nothing"


def test_r37_trace_filter_limits_the_routes_evaluated(clock, live):
    """A filter names routes by slot: only those are asked, in route order, by the code that
    routes; the others get no verdict and their handlers are not called."""
    from tests.routing import sample_handlers

    chat = {"source": "s", "type": "chat.message", "scope": "acme", "data": {"thread": "a"}}
    calls = len(sample_handlers.CALLS)
    limited = trace(payload={**chat, "id": "f1"}, clock=clock, filter=["scripted", "chat"])
    assert [(v.route, v.verdict) for v in limited.verdicts] == [
        ("chat", "match"),
        ("scripted", "not_reached"),
    ]
    assert (limited.effect, limited.route, limited.filter) == ("start", "chat", ("chat", "scripted"))
    assert limited.as_dict()["filter"] == ["chat", "scripted"]
    assert len(sample_handlers.CALLS) == calls  # not reached after the match: never asked

    without_match = trace(payload={**chat, "id": "f2"}, clock=clock, filter=["pr", "scripted"])
    assert [(v.route, v.verdict) for v in without_match.verdicts] == [("pr", "skip"), ("scripted", "skip")]
    assert without_match.effect == "unmatched" and sample_handlers.CALLS[-1] == "f2"

    everything = trace(payload=chat, clock=clock)
    assert everything.filter is None and len(everything.verdicts) == 6
    assert trace(payload=chat, clock=clock, filter=[v.route for v in everything.verdicts]).verdicts == (
        everything.verdicts
    )


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (
            ["chat", "nope"],
            "unknown route 'nope' in scope acme; its routes are: pr, chat, ops, follow-up, noise, scripted",
        ),
        (["x", "y"], "unknown routes 'x', 'y' in scope acme"),
        ([], "filter names no route"),
        ("chat", "filter must be a list of route names"),
        ({"chat": 1}, "filter must be a list of route names"),
        ([1], "filter must be a list of route names"),
    ],
)
def test_r37_trace_filter_refuses_unknown_routes_naming_the_known_ones(clock, live, names, message):
    with pytest.raises(TraceRefused) as refused:
        trace(payload=pr(), clock=clock, filter=names)
    assert refused.value.field == "filter" and message in refused.value.message


def test_r43_terminal_work_bypasses_every_route(clock, live):
    first = accept(clock, "github.pull_request.opened", {"repo": "acme/api", "number": 1})
    router(clock).route(first.seq)
    asked = trace(payload=pr(1, "edited"), clock=clock)
    Work.objects.filter(pk=RouteRecord.objects.get(event=first).work_id).update(status="completed")
    result = trace(payload=pr(1, "edited"), clock=clock)
    assert result.effect == "drop" and result.reason == "terminal"
    # Every route of the scope, in order, each named with its scope, none consulted, saying why.
    assert len(asked.verdicts) > 1
    work_id = RouteRecord.objects.get(event=first).work_id
    assert [(v.route, v.scope, v.verdict, v.reason) for v in result.verdicts] == [
        (v.route, v.scope, "bypassed", f"not asked: Work {work_id} is completed") for v in asked.verdicts
    ]


def _waiting(clock, match, timeout_at=None):
    first = accept(clock, "github.pull_request.opened", {"repo": "acme/api", "number": 1})
    router(clock).route(first.seq)
    work_id = RouteRecord.objects.get(event=first).work_id
    attempt = attempt_start(
        work_id=work_id,
        binding="triage",
        executor="python",
        generation=1,
        capabilities=["inject"],
        clock=clock,
    )
    attempt_wait(
        attempt_id=attempt.pk, lease_epoch=1, match=match, clock=clock, name="review", timeout_at=timeout_at
    )
    return work_id


def test_r41_the_event_that_wins_the_wait_bypasses_routes_and_wakes(clock, live):
    work_id = _waiting(clock, {"type": "github.pull_request.review*"})
    result = trace(payload=pr(1, "review_submitted"), clock=clock)
    assert (result.effect, result.work_id) == ("wake", work_id)
    assert {(v.verdict, v.reason) for v in result.verdicts} == {
        ("bypassed", "not asked: the Event wins wait review")
    }
    event = accept(clock, "github.pull_request.review_submitted", {"repo": "acme/api", "number": 1})
    router(clock).route(event.seq)
    assert RouteRecord.objects.get(event=event).policy == "wake"
    assert Work.objects.get(pk=work_id).status == "running"


def test_r41_a_route_that_passes_input_to_a_waiting_work_keeps_it_as_context(clock, live):
    _waiting(clock, {"type": "github.pull_request.review*"})
    result = trace(payload=pr(1, "edited"), clock=clock)
    assert (result.effect, result.reason) == ("queue", "context")
    assert any("context" in note for note in result.notes)


def test_r41_nothing_matching_a_waiting_work_is_unmatched(clock, live):
    _waiting(clock, {"type": "github.pull_request.review*"})
    result = trace(payload={"source": "s", "type": "other.thing", "scope": "acme"}, clock=clock)
    assert result.effect == "unmatched"


def test_r41_a_due_timeout_wins_first_and_is_reported(clock, live):
    work_id = _waiting(
        clock, {"type": "github.pull_request.review*"}, timeout_at=clock() + timedelta(minutes=1)
    )
    clock.advance(120)
    result = trace(payload=pr(1, "review_submitted"), clock=clock)
    assert result.effect == "queue" and result.work_id == work_id
    assert any("timeout" in note for note in result.notes)


def test_r41_an_earlier_accepted_event_that_wins_the_wait_first_is_reported(clock, live):
    """The route loop stopped, an accepted Event that wins the wait is unrouted: a trace of a
    later Event for the same Work says that Event wins the wait first, and the later Event
    routes to the running Work as usual."""
    work_id = _waiting(clock, {"type": "github.pull_request.review*"})
    winner = accept(clock, "github.pull_request.review_submitted", {"repo": "acme/api", "number": 1})
    result = trace(payload=pr(1, "edited"), clock=clock)
    # The running attempt takes it as its route says (inject), no longer as context.
    assert (result.effect, result.work_id) == ("inject", work_id)
    assert f"earlier Event #{winner.seq} wins Work {work_id}'s wait review first" in " ".join(result.notes)
    # Nothing wins first: no such note.
    alone = trace(payload=pr(2, "edited"), clock=clock)
    assert not any("wins" in note or "held" in note for note in alone.notes)


def test_r42_an_earlier_accepted_event_that_wins_the_wait_through_a_subscription_is_reported(clock, live):
    """As for the wait's own match: an unrouted Event that wakes the Work through a dependency
    subscription wins first, and a trace of later input for the Work says so."""
    from tests.worklife.factories import DependencySubscriptionFactory

    work_id = _waiting(clock, {"type": "github.pull_request.review*"})
    wait = Wait.objects.get(work_id=work_id, state="active")
    DependencySubscriptionFactory(wait=wait, work_id=work_id, scope="acme/web", match={"type": "chat.*"})
    winner = accept(clock, "chat.message", {"thread": "w"}, source="chat", scope="acme/web")
    result = trace(payload=pr(1, "edited"), clock=clock)
    assert f"earlier Event #{winner.seq} wins Work {work_id}'s wait review first" in " ".join(result.notes)


def test_r44_policy_with_fallbacks_for_existing_work(clock, live):
    first = accept(clock, "github.pull_request.opened", {"repo": "acme/api", "number": 1})
    router(clock).route(first.seq)
    work_id = RouteRecord.objects.get(event=first).work_id
    attempt_start(
        work_id=work_id, binding="plain", executor="command", generation=1, capabilities=[], clock=clock
    )
    result = trace(payload=pr(1, "edited"), clock=clock)
    assert result.effect == "queue" and result.reason.startswith("fallback queue")


def test_r30_a_trace_says_the_operator_addressed_the_work(clock, live):
    first = accept(clock, "github.pull_request.opened", {"repo": "acme/api", "number": 1})
    router(clock).route(first.seq)
    work_id = RouteRecord.objects.get(event=first).work_id
    payload = {"source": "core.manual", "type": "operator.note", "scope": "acme", "work_id": work_id}
    with pytest.raises(TraceRefused):  # external callers cannot send core.manual Events
        trace(payload=payload, clock=clock)
    result = trace(payload=payload, clock=clock, operator=True)
    assert (result.effect, result.reason, result.binding, result.work_id) == (
        "queue",
        "addressed",
        "triage",
        work_id,
    )
    assert any("addressed" in note for note in result.notes)


def test_r45_samples_come_in_route_order_with_the_router_clock(clock, live):
    found = samples(scope="acme", clock=clock)
    routes = [route for route, _ in found]
    assert routes == sorted(routes, key=["pr", "chat", "ops", "follow-up", "noise", "scripted"].index)
    assert found, "the match handler offers samples"
    for route, sample in found:
        result = trace(payload={"source": "sample", **sample.event, "scope": "acme"}, clock=clock)
        assert result.route == route, (route, sample)


# --- the surfaces: API, CLI, console (D5) ------------------------------------------------------------


def test_r37_trace_api(clock, live, client):
    from tests.routing.factories import api_token_with_secret

    _, secret = api_token_with_secret()
    auth = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
    ok = client.post("/api/trace", {"event": pr()}, content_type="application/json", **auth)
    assert (
        ok.status_code == 200
        and ok.json()["effect"] == "start"
        and ok.json()["verdicts"][0]["verdict"] == "match"
    )
    refused = client.post(
        "/api/trace", {"event": {**pr(), "scope": "nowhere"}}, content_type="application/json", **auth
    )
    assert refused.status_code == 400 and refused.json()["field"] == "scope"
    missing = client.post(
        "/api/trace", {"event": pr(), "generation": "candidate:999"}, content_type="application/json", **auth
    )
    assert missing.status_code == 404
    assert client.post("/api/trace", {"event": pr()}, content_type="application/json").status_code == 401


def test_r37_trace_command(clock, live, tmp_path):
    import json

    from django.core.management import call_command
    from django.core.management.base import CommandError

    path = tmp_path / "event.json"
    path.write_text(json.dumps(pr()))
    from io import StringIO

    out = StringIO()
    call_command("trace", str(path), stdout=out)
    text = out.getvalue()
    assert "effect: start (new Work) via pr/triage" in text and "match        pr [acme]" in text
    out = StringIO()
    call_command("trace", str(path), "--json", stdout=out)
    assert json.loads(out.getvalue())["effect"] == "start"
    out = StringIO()
    call_command("trace", "--samples", "acme", stdout=out)
    # Each sample under its route's name, once: "pr", not "pr: pr".
    assert out.getvalue().splitlines()[0] == "pr"
    assert not re.search(r"^(\S+): \1$", out.getvalue(), re.MULTILINE)
    path.write_text(json.dumps({**pr(), "type": "core.x"}))
    with pytest.raises(CommandError, match="refused: type"):
        call_command("trace", str(path))


def test_r37_trace_filter_limits_the_routes_evaluated_through_the_api(clock, live, client):
    from conduit_site.api.openapi import openapi_schema
    from tests.routing.factories import api_token_with_secret

    _, secret = api_token_with_secret()
    auth = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
    chat = {"source": "s", "type": "chat.message", "scope": "acme", "data": {"thread": "a"}}
    ok = client.post(
        "/api/trace", {"event": chat, "filter": ["noise", "pr"]}, content_type="application/json", **auth
    )
    assert ok.status_code == 200
    assert [(v["route"], v["verdict"]) for v in ok.json()["verdicts"]] == [("pr", "skip"), ("noise", "skip")]
    assert (ok.json()["effect"], ok.json()["filter"]) == ("unmatched", ["pr", "noise"])
    assert (
        client.post("/api/trace", {"event": chat}, content_type="application/json", **auth).json()["filter"]
        is None
    )
    unknown = client.post(
        "/api/trace", {"event": chat, "filter": ["chats"]}, content_type="application/json", **auth
    )
    assert unknown.status_code == 400
    assert (unknown.json()["error"], unknown.json()["field"]) == ("invalid_trace", "filter")
    assert "'chats'" in unknown.json()["message"] and "pr, chat, ops" in unknown.json()["message"]
    documented = openapi_schema(server_url="http://testserver/")["paths"]["/api/trace"]["post"]
    body = documented["requestBody"]["content"]["application/json"]["schema"]["properties"]
    assert body["filter"]["items"] == {"type": "string"}


def test_r37_trace_filter_limits_the_routes_evaluated_by_the_command(clock, live, tmp_path):
    import json
    from io import StringIO

    from django.core.management import call_command
    from django.core.management.base import CommandError

    path = tmp_path / "event.json"
    path.write_text(
        json.dumps({"source": "s", "type": "chat.message", "scope": "acme", "data": {"thread": "a"}})
    )
    out = StringIO()
    call_command("trace", str(path), "--filter", "scripted,chat", stdout=out)
    text = out.getvalue()
    assert "routes (filtered): chat, scripted" in text and "match        chat [acme]" in text
    assert "pr [acme]" not in text
    out = StringIO()
    call_command("trace", str(path), "--filter", "pr", "--filter", "noise", "--json", stdout=out)
    assert [v["route"] for v in json.loads(out.getvalue())["verdicts"]] == ["pr", "noise"]
    with pytest.raises(
        CommandError, match="refused: filter: unknown route 'chatt' in scope acme; its routes are: pr, chat"
    ):
        call_command("trace", str(path), "--filter", "chatt")
    with pytest.raises(CommandError, match="filter names no route"):
        call_command("trace", str(path), "--filter", "")


def test_d5_trace_form_against_a_candidate(clock, live, client):
    import json

    from tests.routing.factories import UserFactory

    candidate = config_candidate(document=DOCUMENT.replace('type: "noise.*"', 'type: "quiet.*"'), clock=clock)
    assert client.get("/trace/").status_code == 302  # sign in first
    client.force_login(UserFactory())
    page = client.get("/trace/?scope=acme&sample=0")
    assert (
        page.status_code == 200
        and f"candidate:{candidate.pk}" in page.text
        and "github.pull_request" in page.text
    )
    event = json.dumps({"source": "s", "type": "quiet.tick", "scope": "acme"})
    result = client.post(
        "/trace/",
        {"event": event, "generation": f"candidate:{candidate.pk}"},
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="trace-result",
    )
    assert result.status_code == 200
    assert result.text.lstrip().startswith('<section id="trace-result"')
    assert "badge-drop" in result.text and "noise" in result.text
    bad = client.post("/trace/", {"event": "{nope", "generation": ""})
    assert bad.status_code == 400 and "invalid JSON" in bad.text


def test_r42_an_event_matching_a_dependency_subscription_also_wakes_the_waiting_work(clock, live):
    from tests.worklife.factories import DependencySubscriptionFactory
    from worklife.models import DependencySubscription, Wait

    waiting_id = _waiting(clock, {"type": "github.pull_request.review*"})
    wait = Wait.objects.get(work_id=waiting_id, state="active")
    subscription = DependencySubscriptionFactory(
        wait=wait, work_id=waiting_id, scope="acme/web", match={"type": "chat.*"}
    )
    payload = {"source": "chat", "type": "chat.message", "scope": "acme/web", "data": {"thread": "dep"}}
    result = trace(payload=payload, clock=clock)
    assert result.effect == "start" and result.route == "chat"  # the handlers' own verdicts stand
    assert any(f"also wakes Work {waiting_id}'s wait review in scope acme" in note for note in result.notes)
    # An Event of another scope does not wake it.
    other = trace(payload={**payload, "scope": "acme"}, clock=clock)
    assert other.effect == "start" and not any("also wakes" in note for note in other.notes)
    # Routing does what the trace said.
    event = accept(clock, "chat.message", {"thread": "dep"}, source="chat", scope="acme/web")
    router(clock).route(event.seq)
    assert RouteRecord.objects.get(event=event).policy == "start"
    wait.refresh_from_db()
    assert (wait.state, wait.woken_by_id) == ("woken", event.seq)
    assert Work.objects.get(pk=waiting_id).status == "running"
    assert not DependencySubscription.objects.get(pk=subscription.pk).active


def test_r41_a_won_wait_derives_the_core_wait_woken_bridge_from_the_winner(clock, live):
    from causal.models import Event

    work_id = _waiting(clock, {"type": "github.pull_request.review*"})
    winner = accept(clock, "github.pull_request.review_submitted", {"repo": "acme/api", "number": 1})
    router(clock).route(winner.seq)
    bridge = Event.objects.get(type="core.wait.woken")
    assert (bridge.parent_id, bridge.work_id, bridge.depth, bridge.source) == (
        winner.seq,
        work_id,
        1,
        "core.routing",
    )


def test_r41_a_wake_the_causal_limits_refuse_holds_the_work_and_keeps_the_event_as_context(
    clock, live, settings
):
    from causal.models import CausalDiagnostic, Event
    from worklife.models import Wait

    work_id = _waiting(clock, {"type": "github.pull_request.review*"})
    settings.CONDUIT_CAUSAL_MAX_DEPTH = 0  # no derived Event at all: the bridge is refused
    winner = accept(clock, "github.pull_request.review_submitted", {"repo": "acme/api", "number": 1})
    router(clock).route(winner.seq)
    record = RouteRecord.objects.get(event=winner)
    assert (record.policy, record.reason, record.work_id) == ("queue", "context", work_id)
    wait = Wait.objects.get(work_id=work_id, state="active")
    assert "depth" in wait.blocked_reason
    assert Work.objects.get(pk=work_id).status == "waiting"
    assert not Event.objects.filter(type="core.wait.woken").exists()
    assert CausalDiagnostic.objects.filter(kind="depth_exceeded").exists()
    # A trace now says the same: the wait is blocked, the Work held, the Event kept as context.
    result = trace(payload=pr(1, "review_submitted"), clock=clock)
    assert (result.effect, result.reason) == ("queue", "context")
    assert any("blocked by the causal limits" in note for note in result.notes)


def _deep_event_text(levels: int) -> str:
    """A trace Event as JSON text nesting ``levels`` arrays and objects (the Event is one)."""
    import json

    text = json.dumps({"source": "s", "type": "noise.tick", "scope": "acme", "data": "@"})
    return text.replace('"@"', '{"a":' * (levels - 1) + "1" + "}" * (levels - 1))


@pytest.mark.parametrize("levels", [65, 5_000, 10_000])
def test_the_trace_form_refuses_deep_json_with_400_not_500(clock, live, client, levels):
    from tests.routing.factories import UserFactory

    client.force_login(UserFactory())
    response = client.post("/trace/", {"event": _deep_event_text(levels), "generation": ""})
    assert response.status_code == 400
    assert "more than 64 levels deep" in response.text


def test_the_trace_command_refuses_deep_json(clock, live, tmp_path):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    path = tmp_path / "event.json"
    path.write_text(_deep_event_text(10_000))
    with pytest.raises(CommandError, match="more than 64 levels deep"):
        call_command("trace", str(path))


def test_trace_refuses_a_decoded_event_deeper_than_the_limit(clock, live):
    data: dict = {}
    for _ in range(70):
        data = {"a": data}
    with pytest.raises(TraceRefused) as info:
        trace(payload={"source": "s", "type": "noise.tick", "scope": "acme", "data": data}, clock=clock)
    assert info.value.field == "data" and "64 levels" in info.value.message


# Trace equals routing, as a property (R37–R45, R39).
#
# Hypothesis generates a configuration (a root scope and perhaps a child that overrides its
# routes, with policies, fallbacks, starts and handlers that match, skip, fail, refuse, hang or
# panic), then a stream of Events and lifecycle steps (waits, runs, cancels, completions, the
# clock moving on). Before each Event is accepted and routed, its trace is taken; after routing,
# the trace's state, effect, route, binding, Work and reason equal what routing recorded.
# At least 300 examples per CI run; CONDUIT_DIFFERENTIAL_EXAMPLES raises it locally.
EXAMPLES = int(os.environ.get("CONDUIT_DIFFERENTIAL_EXAMPLES", "300"))
# Shrinking a failure re-runs routing many times: CONDUIT_DIFFERENTIAL_SHRINK=0 skips it.
PHASES = [p for p in Phase if p != Phase.shrink or os.environ.get("CONDUIT_DIFFERENTIAL_SHRINK", "1") == "1"]
# Long enough that no ordinary handler call misses it on a loaded machine; a hang always does.
OPTIONS = RouterOptions(
    route_timeout=0.25,
    max_route_failures=2,
    route_failure_window=timedelta(seconds=30),
    workers=2,
    max_abandoned=64,
)

BINDINGS = """
    bindings:
      inbox: {}
      triage:
        executor: python
        settings: {target: "tests.routing.sample_handlers:noop"}
        controls: [inject, interrupt]
      plain:
        executor: command
        settings: {argv: ["true"]}
"""

route_st = st.fixed_dictionaries(
    {
        "handler": st.sampled_from(["match", "match", "scripted"]),
        "type": st.sampled_from(["a.*", "b.*", "*"]),
        "keyed": st.sampled_from([True, True, True, False]),
        "binding": st.sampled_from(["inbox", "triage", "plain"]),
        "policy": st.sampled_from(["queue", "inject", "interrupt", "drop"]),
        "fallback": st.sampled_from(["", "queue", "drop"]),
        "start": st.sampled_from([True, True, True, False]),
    }
)

event_st = st.fixed_dictionaries(
    {
        "scope": st.sampled_from(["acme", "acme", "acme/web"]),
        "type": st.sampled_from(["a.x", "a.x", "b.y", "c.z"]),
        "k": st.integers(0, 1),
        "explicit": st.sampled_from([False, False, True]),
        # A hang costs a deadline each time it is asked: rarer than the rest.
        "behaviour": st.sampled_from([""] * 8 + ["skip"] * 2 + ["fail"] * 2 + ["invalid", "panic", "hang"]),
        "repeat": st.sampled_from([False] * 14 + [True]),
        "to_newest_work": st.sampled_from([False, False, True]),  # names it by work_id
    }
)

# Each step: an Event, then perhaps a lifecycle step on one of the newest Works, or the clock
# moving on (so backoffs end and wait timeouts come due).
step_st = st.tuples(
    event_st,
    st.one_of(
        st.none(),
        st.none(),
        st.tuples(
            st.sampled_from(["wait", "wait", "wait-timeout", "run", "cancel", "complete"]),
            st.sampled_from([0, 0, 0, 1]),  # the newest Work, mostly
            st.sampled_from(["a.*", "b.*", "*"]),
        ),
        st.tuples(st.just("advance"), st.sampled_from([1, 5, 40, 400])),
    ),
)

case_st = st.fixed_dictionaries(
    {
        "routes": st.lists(route_st, min_size=1, max_size=4),
        "overrides": st.lists(st.tuples(st.integers(0, 3), route_st), max_size=2),
        "redefine_triage": st.booleans(),
        "steps": st.lists(step_st, min_size=1, max_size=10),
        # The causal limits the wake bridges meet: none derivable, one a minute, plenty.
        "limits": st.sampled_from([(0, 100), (0, 100), (8, 1), (8, 100)]),
    }
)


def _route_yaml(slot: str, route: dict, *, controls: bool) -> str:
    """One route; ``controls``: its binding ``triage`` claims inject and interrupt here (a
    control policy on any other binding gets a fallback, or the document is invalid)."""
    fallback = route["fallback"]
    if route["policy"] in ("inject", "interrupt") and not fallback:
        if route["binding"] != "triage" or not controls:
            fallback = "queue"
    if route["handler"] == "match":
        keys = ', keys: ["k:{data.k}"]' if route["keyed"] else ""
        params = f'{{type: "{route["type"]}"{keys}}}'
    else:
        params = '{prefix: "a"}' if route["type"] == "a.*" else "{}"
    lines = [
        f"      - slot: {slot}",
        f"        handler: {route['handler']}",
        f"        params: {params}",
        f"        binding: {route['binding']}",
        f"        policy: {route['policy']}",
        f"        start: {'true' if route['start'] else 'false'}",
    ]
    if fallback:
        lines.append(f"        fallback: {fallback}")
    return "\n".join(lines)


def document(case: dict) -> str:
    controls = not case["redefine_triage"]  # routes of acme are inherited by acme/web
    routes = "\n".join(_route_yaml(f"r{i}", r, controls=controls) for i, r in enumerate(case["routes"]))
    text = f"version: 1\nscopes:\n  - path: acme\n{BINDINGS}    routes:\n{routes}\n"
    overrides = sorted({i % len(case["routes"]): r for i, r in case["overrides"]}.items())
    if overrides or case["redefine_triage"]:
        text += "  - path: acme/web\n"
        if case["redefine_triage"]:
            text += '    bindings:\n      triage: {executor: command, settings: {argv: ["./bin/triage"]}}\n'
        if overrides:
            text += (
                "    routes:\n"
                + "\n".join(_route_yaml(f"r{i}", r, controls=controls) for i, r in overrides)
                + "\n"
            )
    return text


def payload_for(n: int, spec: dict) -> dict:
    key = f"k:{spec['k']}"
    payload = {
        "specversion": "1.0",
        "id": f"e{n}",
        "source": "prop",
        "type": spec["type"],
        "scope": spec["scope"],
        "data": {"k": spec["k"], "keys": [key], "behaviour": spec["behaviour"]},
    }
    if spec["explicit"]:
        payload["correlation"] = [key]
    if spec["to_newest_work"]:
        newest = Work.objects.order_by("-pk").values_list("pk", flat=True).first()
        if newest is not None:
            payload["work_id"] = newest
    return payload


@override_settings(CONDUIT_ROUTE_HANDLERS=dict(HANDLERS))
class TraceEqualsRouting(HypothesisTestCase):
    @hsettings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        phases=PHASES,
    )
    @given(case=case_st)
    def test_r39_the_trace_taken_before_routing_equals_the_record(self, case):
        clock = FakeClock()
        try:
            config_apply(document=document(case), clock=clock)
        except ConfigInvalid:
            reject()
        depth, rate = case["limits"]
        with override_settings(CONDUIT_CAUSAL_MAX_DEPTH=depth, CONDUIT_CAUSAL_RATE_PER_MINUTE=rate):
            sample_handlers.RELEASE.clear()
            router = build_router(clock=clock, options=OPTIONS)
            try:
                self._run(case["steps"], router, clock)
            finally:
                sample_handlers.RELEASE.set()  # abandoned hanging calls return
                router.close()

    def _run(self, steps, router, clock) -> None:
        last_payload = None
        for n, (spec, then) in enumerate(steps):
            payload = last_payload if spec["repeat"] and last_payload else payload_for(n, spec)
            last_payload = payload
            self._event(payload, router, clock)
            if then is None:
                continue
            if then[0] == "advance":
                clock.advance(then[1])
            else:
                self._lifecycle(*then, clock)

    def _event(self, payload, router, clock) -> None:
        self._drain(router)
        try:
            predicted = trace(payload=payload, clock=clock, options=OPTIONS)
        except TraceRefused as refused:
            # A trace refuses what acceptance refuses (R38), for the same field.
            with self.assertRaises(EnvelopeInvalid) as refusal:
                event_accept(payload=payload, clock=clock, may_address_work=True)
            assert refusal.exception.field == refused.field
            return
        works_before = set(Work.objects.values_list("pk", flat=True))
        events_before = Event.objects.count()
        # A sender that may name Work (work_id, execution_id: the send permission).
        accepted = event_accept(payload=payload, clock=clock, may_address_work=True)
        if not accepted.created:
            assert (predicted.state, predicted.event) == ("duplicate", accepted.event.seq), predicted
            assert Event.objects.count() == events_before
            event("trace: duplicate")
            return
        assert predicted.state != "duplicate", predicted
        event(
            f"trace: {predicted.state} {predicted.effect}"
        )  # the spread shown by --hypothesis-show-statistics
        row = accepted.event
        router.route(row.seq)
        sample_handlers.RELEASE.set()
        sample_handlers.RELEASE.clear()
        row.refresh_from_db()
        context = (payload, predicted, row.unrouted_reason)
        assert predicted.state == row.route_state, context
        if row.route_state == RouteState.UNROUTED:
            assert predicted.waiting_on == row.waiting_on_id, context
            assert predicted.retry_at == row.retry_at, context
            assert predicted.unrouted_reason == row.unrouted_reason, context
            assert not RouteRecord.objects.filter(event=row).exists()
            return
        record = RouteRecord.objects.get(event=row)
        assert (predicted.effect, predicted.route, predicted.binding, predicted.reason) == (
            record.policy,
            record.route,
            record.binding,
            record.reason,
        ), context
        assert list(predicted.refusals) == record.refusals, context
        if predicted.effect == "start":
            assert record.work_id not in works_before, context
        else:
            assert predicted.work_id == record.work_id, context

    def _drain(self, router) -> None:
        for _ in range(20):
            if not router.route_pending():
                break
        sample_handlers.RELEASE.set()
        sample_handlers.RELEASE.clear()

    def _lifecycle(self, kind: str, index: int, match: str, clock) -> None:
        works = list(Work.objects.order_by("-pk").values_list("pk", "status", "binding"))
        if not works:
            return
        work_id, status, binding = works[index % len(works)]
        live = Attempt.objects.filter(work_id=work_id, state__in=["running", "waiting"]).first()
        try:
            if kind == "cancel":
                work_cancel_in_tx(work_id=work_id, clock=clock)
            elif kind == "complete":
                if live is not None:
                    work_complete(attempt_id=live.pk, lease_epoch=live.lease_epoch, clock=clock)
            else:
                if live is None and status == "ready":
                    live = attempt_start(
                        work_id=work_id,
                        binding=binding or "inbox",
                        executor="python",
                        generation=1,
                        capabilities=["inject"],
                        clock=clock,
                    )
                if kind in ("wait", "wait-timeout") and live is not None and live.state == "running":
                    timeout = clock() + timedelta(seconds=10) if kind == "wait-timeout" else None
                    attempt_wait(
                        attempt_id=live.pk,
                        lease_epoch=live.lease_epoch,
                        match={"type": match},
                        clock=clock,
                        name="w",
                        timeout_at=timeout,
                    )
        except WorkError as refused:
            event(f"lifecycle: {kind} refused ({type(refused).__name__})")  # changes nothing
            return
        event(f"lifecycle: {kind} on {status} Work")
