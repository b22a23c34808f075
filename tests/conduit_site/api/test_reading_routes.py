"""Reading routes (R29): ``GET /api/events/{seq}/route``, ``events get|chain|list`` and the
Event and Work pages, on Events the real router decided (R13, R16, R28)."""

from __future__ import annotations

import io
import json
import re

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from causal.limits import Causal
from causal.models import Event
from causal.services import Envelope
from conduit_site.api.openapi import openapi_schema
from routing.engine.logs import redacted
from routing.models import RouteRecord
from routing.records.filters import EventListFilter, EventListInvalid, glob_regex
from routing.records.selectors import event_chain_routes, event_route, events_route_page
from routing.serializers import event_json, route_json
from tests.routing import sample_handlers
from tests.routing.factories import UserFactory, api_token_with_secret
from tests.routing.routerkit import accept, apply, drain, router

pytestmark = pytest.mark.django_db

REFUSALS = [
    {"route": "pr", "reason": "type other.thing does not match github.pull_request.*"},
    {"route": "chat", "reason": "type other.thing does not match chat.message"},
    {"route": "ops", "reason": "type other.thing does not match ops.*"},
    {"route": "follow-up", "reason": "type other.thing does not match followup.*"},
    {"route": "noise", "reason": "type other.thing does not match noise.*"},
    {"route": "scripted", "reason": "type other.thing does not start with x"},
]


@pytest.fixture(autouse=True)
def handlers(test_handlers):
    """Every test here routes with the test handlers registered (tests/conftest.py)."""


def route_all(clock) -> None:
    r = router(clock)
    try:
        drain(r)
    finally:
        r.close()


def pr(clock, number=1, **fields):
    return accept(clock, "github.pull_request.opened", {"repo": "acme/api", "number": number}, **fields)


class History:
    """Events the real router decided: started, unmatched (with refusals), failed (given up
    at once), unrouted with a counted failure, unrouted waiting behind it, and a derived
    follow-up queued on the started Work."""

    def __init__(self, clock) -> None:
        apply(clock)
        self.started = pr(clock)
        self.unmatched = accept(clock, "other.thing", {})
        self.failed = accept(clock, "x.bad", {"behaviour": "invalid"})
        self.failing = accept(clock, "x.fail", {"behaviour": "fail"}, correlation=["k:1"])
        self.behind = accept(clock, "x.ok", {}, correlation=["k:1"])
        self.child = (
            Causal(clock)
            .derive(
                parent=self.started,
                envelope=Envelope(
                    id="child-1",
                    source="tests",
                    type="followup.comment",
                    scope="acme",
                    data={"repo": "acme/api", "number": 1},
                ),
            )
            .event
        )
        route_all(clock)
        for event in self.events:
            event.refresh_from_db()
        self.work_id = RouteRecord.objects.get(event=self.started).work_id

    @property
    def events(self) -> list[Event]:
        return [self.started, self.unmatched, self.failed, self.failing, self.behind, self.child]


@pytest.fixture
def history(clock) -> History:
    return History(clock)


@pytest.fixture
def auth():
    _, secret = api_token_with_secret(user__username="reader")
    return {"Authorization": f"Bearer {secret}"}


def get_route(client, auth, seq):
    response = client.get(f"/api/events/{seq}/route", headers=auth)
    assert response["Content-Type"] == "application/json"
    return response


def events_command(*args: str) -> str:
    out = io.StringIO()
    call_command("events", *args, stdout=out)
    return out.getvalue()


# --- the API ---------------------------------------------------------------------------------


def test_r29_api_route_of_a_started_event_is_its_route_record(client, auth, history, clock):
    response = get_route(client, auth, history.started.seq)
    assert response.status_code == 200
    assert response.json() == {
        "event": history.started.seq,
        "state": "routed",
        "work": history.work_id,
        "route": "pr",
        "binding": "triage",
        "generation": "1",
        "policy": "start",
        "reason": "type github.pull_request.opened matches github.pull_request.*",
        "disposition": "routed",
        "refusals": [],
        "error": "",
        "attempts": 0,
        "decided_at": "2026-01-05T12:00:00Z",
    }


def test_r28_r29_api_route_of_an_unmatched_event_lists_refusals_in_route_order(client, auth, history):
    body = get_route(client, auth, history.unmatched.seq).json()
    assert (body["state"], body["policy"], body["reason"], body["work"]) == (
        "routed",
        "unmatched",
        "no_match",
        None,
    )
    assert body["refusals"] == REFUSALS


def test_r16_r29_api_route_of_a_failed_event_has_its_error_and_attempts(client, auth, history):
    body = get_route(client, auth, history.failed.seq).json()
    assert body["state"] == "failed" and body["disposition"] == "failed"
    assert (body["policy"], body["reason"], body["route"]) == ("failed", "handler_invalid", "scripted")
    assert body["error"] == "route scripted: payload has no author"
    assert body["attempts"] == 1


def test_r13_r29_api_route_of_an_unrouted_event_has_reason_retry_and_failure(client, auth, history):
    body = get_route(client, auth, history.failing.seq).json()
    assert body == {
        "event": history.failing.seq,
        "state": "unrouted",
        "reason": "handler_failed (failure 1): route scripted: upstream is restarting",
        "waiting_on": None,
        "retry_at": "2026-01-05T12:00:02Z",
        "failure": {
            "code": "handler_failed",
            "route": "scripted",
            "error": "route scripted: upstream is restarting",
            "count": 1,
            "first_failed_at": "2026-01-05T12:00:00Z",
            "last_failed_at": "2026-01-05T12:00:00Z",
            "backoff_until": "2026-01-05T12:00:02Z",
            "generation": "1",
        },
    }


def test_r29_api_route_of_an_event_waiting_behind_another_names_it(client, auth, history):
    body = get_route(client, auth, history.behind.seq).json()
    assert body["state"] == "unrouted"
    assert body["waiting_on"] == history.failing.seq
    assert body["reason"] == f"waiting behind earlier input #{history.failing.seq}"
    assert body["failure"] is None


def test_r29_api_route_shapes_are_the_ones_the_openapi_schema_describes(client, auth, history):
    schemas = openapi_schema()["components"]["schemas"]
    path = openapi_schema()["paths"]["/api/events/{seq}/route"]["get"]
    assert path["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/EventRoute"
    }
    for event in history.events:
        body = get_route(client, auth, event.seq).json()
        schema = schemas["UnroutedRoute" if body["state"] == "unrouted" else "SettledRoute"]
        assert set(body) == set(schema["properties"]), event
        assert set(schema["required"]) <= set(body)
        for refusal in body.get("refusals", []):
            assert set(refusal) == set(schemas["Refusal"]["properties"])
        if body.get("failure"):
            assert set(body["failure"]) == set(schemas["RouteFailure"]["properties"])


def test_r29_api_route_of_an_unknown_event_is_a_json_404(client, auth):
    response = get_route(client, auth, 424242)
    assert response.status_code == 404
    assert response.json() == {"error": "not_found", "message": "no Event has seq 424242"}


def test_r29_api_route_needs_a_token(client, history):
    response = client.get(f"/api/events/{history.started.seq}/route")
    assert response.status_code == 401
    assert response.json()["error"] == "unauthorized"
    assert response["WWW-Authenticate"].startswith("Bearer")
    revoked, secret = api_token_with_secret(user=UserFactory(is_active=False))
    response = client.get(
        f"/api/events/{history.started.seq}/route", headers={"Authorization": f"Bearer {secret}"}
    )
    assert response.status_code == 401


def test_r29_api_route_allows_only_get(client, auth, history):
    response = client.post(f"/api/events/{history.started.seq}/route", headers=auth)
    assert response.status_code == 405
    assert response["Allow"] == "GET"


# --- route_json ------------------------------------------------------------------------------


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


# --- events get / chain ----------------------------------------------------------------------


def test_r29_events_get_prints_the_route_with_each_refusal(history):
    out = events_command("get", str(history.unmatched.seq))
    seq = history.unmatched.seq
    assert out.splitlines() == [
        f"#{seq} other.thing  tests/{history.unmatched.envelope_id}  scope acme  routed",
        "  route: unmatched (no_match), generation 1",
        *(f"  - {r['route']}: {r['reason']}" for r in REFUSALS),
        "  why: No route matched, so nothing took it: each route's refusal is listed.",
    ]


def test_r29_events_get_prints_route_binding_work_and_generation(history):
    out = events_command("get", str(history.started.seq))
    assert out.splitlines()[1] == (
        "  route: start (type github.pull_request.opened matches github.pull_request.*) "
        f"via pr/triage on Work {history.work_id}, generation 1"
    )


def test_r16_r29_events_get_prints_error_and_attempts_of_a_failed_route(history):
    lines = events_command("get", str(history.failed.seq)).splitlines()
    assert lines[0].endswith("  failed")
    # The routes that declined before the failing one are kept on the failed record
    # (R28) and printed with its route (R29).
    assert lines[1:] == [
        "  route: failed (handler_invalid) via scripted/-, generation 1",
        *(f"  - {r['route']}: {r['reason'].replace('other.thing', 'x.bad')}" for r in REFUSALS[:-1]),
        "  error: route scripted: payload has no author",
        "  attempts: 1",
        "  why: Routing it failed on route scripted (handler_invalid) once and was given up on: nothing took it "
        "(reroute it to try again).",
    ]


def test_r13_r29_events_get_prints_why_an_event_is_unrouted(history):
    lines = events_command("get", str(history.failing.seq)).splitlines()
    assert lines[1:] == [
        "  unrouted: handler_failed (failure 1): route scripted: upstream is restarting",
        "  failures: 1 (handler_failed on route scripted)",
        "  error: route scripted: upstream is restarting",
        "  next retry: 2026-01-05T12:00:02Z",
    ]
    lines = events_command("get", str(history.behind.seq)).splitlines()
    assert lines[1:] == [
        f"  unrouted: waiting behind earlier input #{history.failing.seq}",
        f"  waits behind #{history.failing.seq}",
    ]


def test_r29_events_get_json_is_the_event_and_the_api_route(client, auth, history):
    for event in history.events:
        data = json.loads(events_command("get", str(event.seq), "--json"))
        assert data == {**event_json(event), "route": get_route(client, auth, event.seq).json()}


def test_r29_events_get_unknown_seq_is_refused_naming_seq():
    with pytest.raises(CommandError, match="SEQ: no Event has seq 99999"):
        events_command("get", "99999")
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("events", "get", "99999", "--json", stdout=out)
    assert json.loads(out.getvalue()) == {"error": "not_found", "message": "SEQ: no Event has seq 99999"}
    with pytest.raises(CommandError, match="SEQ.*positive integer"):
        events_command("get", "0")


def test_r29_events_chain_prints_the_chain_from_its_root_with_routes_and_refusals(clock):
    apply(clock)
    root = pr(clock)
    causal = Causal(clock)
    child = causal.derive(
        parent=root,
        envelope=Envelope(
            id="c1",
            source="tests",
            type="followup.comment",
            scope="acme",
            data={"repo": "acme/api", "number": 1},
        ),
    ).event
    grandchild = causal.derive(
        parent=child, envelope=Envelope(id="g1", source="tests", type="other.thing", scope="acme", data={})
    ).event
    route_all(clock)
    work_id = RouteRecord.objects.get(event=root).work_id
    lines = events_command("chain", str(grandchild.seq)).splitlines()
    assert lines == [
        f"depth 0  #{root.seq} github.pull_request.opened  tests/{root.envelope_id}  scope acme  routed",
        "  route: start (type github.pull_request.opened matches github.pull_request.*) "
        f"via pr/triage on Work {work_id}, generation 1",
        f"depth 1  #{child.seq} followup.comment  tests/c1  scope acme  routed",
        f"  route: queue (type followup.comment matches followup.*) via follow-up/triage on Work {work_id}, "
        "generation 1",
        f"depth 2  #{grandchild.seq} other.thing  tests/g1  scope acme  routed",
        "  route: unmatched (no_match), generation 1",
        *(f"  - {r['route']}: {r['reason']}" for r in REFUSALS),
    ]
    data = json.loads(events_command("chain", str(grandchild.seq), "--json"))
    assert [item["conduit"]["seq"] for item in data["chain"]] == [root.seq, child.seq, grandchild.seq]
    assert [item["conduit"]["depth"] for item in data["chain"]] == [0, 1, 2]
    assert [item["route"]["policy"] for item in data["chain"]] == ["start", "queue", "unmatched"]
    assert data["chain"][2]["route"]["refusals"] == REFUSALS
    # A root's chain is itself.
    assert len(json.loads(events_command("chain", str(root.seq), "--json"))["chain"]) == 1


def test_r29_events_chain_unknown_seq_is_refused():
    with pytest.raises(CommandError, match="SEQ: no Event has seq 5555"):
        events_command("chain", "5555")


# --- events list -----------------------------------------------------------------------------


def listed(*args: str) -> list[int]:
    return [item["conduit"]["seq"] for item in json.loads(events_command("list", "--json", *args))["events"]]


def test_r29_events_list_newest_first_with_each_route(history):
    seqs = [e.seq for e in history.events]
    assert listed() == sorted(seqs, reverse=True)
    assert listed("--oldest") == sorted(seqs)
    out = events_command("list", "--oldest")
    blocks = re.findall(r"^#(\d+) ", out, re.M)
    assert [int(s) for s in blocks] == sorted(seqs)
    # Each Event's route is printed with it: the unmatched one's refusals follow its line.
    unmatched = out.index(f"#{history.unmatched.seq} other.thing")
    assert out.index("  - pr: type other.thing does not match", unmatched) < out.index(
        f"#{history.failed.seq} "
    )


def test_r29_events_list_filters_by_state_type_scope_and_work(history, clock):
    assert listed("--state", "unrouted") == [history.behind.seq, history.failing.seq]
    assert listed("--state", "failed") == [history.failed.seq]
    assert listed("--type", "x.*") == [history.behind.seq, history.failing.seq, history.failed.seq]
    assert listed("--type", "x.?a*") == [history.failing.seq, history.failed.seq]
    assert listed("--type", "other.thing") == [history.unmatched.seq]
    assert listed("--type", "*") == listed()
    assert listed("--type", "X.*") == []  # case-sensitive, as routes match types
    assert listed("--work", str(history.work_id)) == [history.child.seq, history.started.seq]
    web = pr(clock, number=2, scope="acme/web")
    assert listed("--scope", "acme/web") == [web.seq]
    assert listed("--scope", "acme/web", "--state", "routed") == []


def test_r29_events_list_type_glob_treats_other_characters_literally(clock):
    apply(clock)
    plain = accept(clock, "a.b-c", {})
    accept(clock, "aXb-c", {})
    accept(clock, "a.b-cd", {})
    assert listed("--type", "a.b-?") == [plain.seq]
    assert listed("--type", "a.b-c") == [plain.seq]
    assert glob_regex("a.b*") == r"(?s)\Aa\.b.*\Z"


def test_r29_events_list_since_and_until_bound_the_acceptance_time(clock):
    apply(clock)
    early = accept(clock, "other.thing", {})
    clock.advance(minutes=10)
    middle = accept(clock, "other.thing", {})
    clock.advance(minutes=10)
    late = accept(clock, "other.thing", {})
    assert listed("--since", "2026-01-05T12:10:00Z") == [late.seq, middle.seq]
    assert listed("--until", "2026-01-05T12:10:00+00:00") == [early.seq]
    # Without an offset a time is UTC.
    assert listed("--since", "2026-01-05T12:05", "--until", "2026-01-05T12:15") == [middle.seq]
    assert listed("--since", "2026-01-05T13:15:00+01:00") == [late.seq]


def test_r29_events_list_pages_by_keyset_in_both_orders(clock):
    apply(clock)
    seqs = [accept(clock, "other.thing", {}).seq for _ in range(7)]
    first = json.loads(events_command("list", "--json", "--limit", "3"))
    assert [i["conduit"]["seq"] for i in first["events"]] == seqs[::-1][:3]
    assert first["next_after"] == seqs[::-1][2]
    second = json.loads(events_command("list", "--json", "--limit", "3", "--after", str(first["next_after"])))
    assert [i["conduit"]["seq"] for i in second["events"]] == seqs[::-1][3:6]
    third = json.loads(events_command("list", "--json", "--limit", "3", "--after", str(second["next_after"])))
    assert [i["conduit"]["seq"] for i in third["events"]] == seqs[:1]
    assert third["next_after"] is None
    oldest = json.loads(events_command("list", "--json", "--oldest", "--limit", "4"))
    assert [i["conduit"]["seq"] for i in oldest["events"]] == seqs[:4]
    rest = listed("--oldest", "--limit", "4", "--after", str(oldest["next_after"]))
    assert rest == seqs[4:]
    out = events_command("list", "--limit", "3")
    assert out.splitlines()[-1] == f"More: add --after {seqs[-3]} for the next page."


def test_r29_events_list_says_when_nothing_matches(clock):
    apply(clock)
    assert events_command("list").strip() == "No Events match."
    assert json.loads(events_command("list", "--json")) == {"events": [], "next_after": None}


@pytest.mark.parametrize(
    "args,message",
    [
        (["--state", "lost"], "--state"),
        (["--limit", "0"], "--limit: expected 1 to 1000, got 0"),
        (["--limit", "1001"], "--limit: expected 1 to 1000, got 1001"),
        (["--work", "-3"], "--work"),
        (["--after", "x"], "--after"),
        (["--since", "last week"], "--since"),
        (
            ["--since", "2026-01-05T13:00Z", "--until", "2026-01-05T12:00Z"],
            "--until: must be later than since",
        ),
    ],
)
def test_r29_events_list_refuses_bad_filters_naming_the_option(args, message):
    with pytest.raises(CommandError) as info:
        events_command("list", *args)
    assert message in str(info.value)


def test_r29_events_list_bad_filter_with_json_prints_a_json_error():
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("events", "list", "--json", "--limit", "0", stdout=out)
    assert json.loads(out.getvalue()) == {
        "error": "invalid_filter",
        "message": "--limit: expected 1 to 1000, got 0",
    }


def test_r29_event_list_filter_validates_its_fields():
    from datetime import datetime

    with pytest.raises(EventListInvalid) as info:
        EventListFilter(since=datetime(2026, 1, 5))
    assert info.value.field == "since"
    with pytest.raises(EventListInvalid) as info:
        EventListFilter(state="nope")
    assert info.value.field == "state"
    with pytest.raises(EventListInvalid) as info:
        EventListFilter(work_id=0)
    assert info.value.field == "work_id"


def test_r29_every_events_subcommand_argument_has_help():
    from conduit_site.management.commands.events import Command

    parser = Command().create_parser("manage.py", "events")
    subparsers = next(a for a in parser._actions if a.dest == "subcommand")
    for name in ("get", "chain", "list"):
        sub = subparsers.choices[name]
        assert sub.description
        for action in sub._actions:
            assert action.help, f"events {name}: {action.dest} has no help"


# --- query counts ----------------------------------------------------------------------------


def make_history(clock, n: int) -> None:
    """``n`` each of routed, unmatched, failed and unrouted Events (real routing)."""
    for _ in range(n):
        pr(clock, number=accept.counter)
        accept(clock, "other.thing", {})
        accept(clock, "x.bad", {"behaviour": "invalid"})
        accept(clock, "x.fail", {"behaviour": "fail"})
    route_all(clock)


def count_queries(action) -> int:
    with CaptureQueriesContext(connection) as queries:
        action()
    return len(queries)


def test_r29_list_get_and_api_query_counts_do_not_grow_with_history(
    clock, client, auth, django_assert_max_num_queries, django_assert_num_queries
):
    apply(clock)
    make_history(clock, 1)

    def reads():
        last = Event.objects.order_by("-seq").values_list("seq", flat=True).first()
        return [
            lambda: events_route_page(EventListFilter(limit=200)),
            lambda: events_command("list", "--limit", "200"),
            lambda: events_command("list", "--json", "--limit", "200", "--type", "x.*", "--work", "1"),
            lambda: event_route(last),
            lambda: events_command("get", str(last)),
            lambda: get_route(client, auth, last),
        ]

    get_route(client, auth, 1)  # the token's first use records it (once a while, not per request)
    small = [count_queries(read) for read in reads()]
    make_history(clock, 20)
    # The page's seqs, its Events with their records, the failures (the seqs
    # first, so a filter's index never sorts whole rows).
    with django_assert_max_num_queries(3):
        page = events_route_page(EventListFilter(limit=200))
    assert len(page) == 84
    assert all(item.record is not None or item.failure is not None for item in page)
    with django_assert_num_queries(0):
        json.dumps([route_json(item.record) for item in page if item.record])
    large = [count_queries(read) for read in reads()]
    assert large == small
    assert max(small[:5]) <= 3  # the page's seqs, the Events with their records, the failures
    # Plus the token (joined with its user), its last-used update and the permission check (the
    # user's and its groups' permissions).
    assert small[5] <= 6


def test_r29_chain_query_count_does_not_grow_with_depth(clock, django_assert_max_num_queries):
    apply(clock)
    causal = Causal(clock)

    def chain_of(depth: int) -> Event:
        event = pr(clock, number=accept.counter)
        for _ in range(depth):
            event = causal.derive(
                parent=event,
                envelope=Envelope(
                    id=f"d{accept.counter}-{event.seq}", source="tests", type="other.thing", scope="acme"
                ),
            ).event
        return event

    shallow, deep = chain_of(1), chain_of(12)
    accept(clock, "x.fail", {"behaviour": "fail"})
    route_all(clock)
    with django_assert_max_num_queries(4):
        chain = event_chain_routes(deep.seq)
    assert [item.event.depth for item in chain] == list(range(13))
    assert [item.record.policy for item in chain] == ["start", *["unmatched"] * 12]
    counts = [
        count_queries(lambda e=e: events_command("chain", str(e.seq), "--json")) for e in (shallow, deep)
    ]
    assert counts[0] == counts[1] <= 4


# --- the console pages -----------------------------------------------------------------------


@pytest.fixture
def console(client):
    client.force_login(UserFactory(username="operator"))
    return client


def section(body: str, name: str) -> str:
    match = re.search(rf'<section id="{name}"[^>]*>(.*?)</section>', body, re.S)
    assert match, f"no section {name}"
    return match.group(1)


def test_r29_event_page_shows_the_route_with_refusals_work_and_generation(console, history):
    body = console.get(reverse("event-detail", args=[history.unmatched.seq])).content.decode()
    route = section(body, "event-route")
    assert "<strong>unmatched</strong>" in route and "no_match" in route
    positions = [route.index(f"<strong>{r['route']}</strong>: {r['reason']}") for r in REFUSALS]
    assert positions == sorted(positions)
    body = console.get(reverse("event-detail", args=[history.started.seq])).content.decode()
    route = section(body, "event-route")
    assert f'<a href="{reverse("work-detail", args=[history.work_id])}">Work {history.work_id}</a>' in route
    assert "<dt>route</dt><dd>acme:pr</dd>" in route
    assert "<dt>binding</dt><dd>triage</dd>" in route
    assert "<dt>generation</dt><dd>1</dd>" in route


def test_r16_r29_event_page_shows_the_error_and_attempts_of_a_failed_route(console, history):
    body = console.get(reverse("event-detail", args=[history.failed.seq])).content.decode()
    route = section(body, "event-route")
    assert "route scripted: payload has no author" in route
    assert "<dt>attempts</dt><dd>1</dd>" in route
    assert "handler_invalid" in route


def test_r13_r29_event_page_shows_why_an_event_is_unrouted(console, history):
    body = console.get(reverse("event-detail", args=[history.failing.seq])).content.decode()
    route = section(body, "event-route")
    assert "<dt>failures</dt><dd><strong>1</strong> (handler_failed on route scripted)" in route
    assert "route scripted: upstream is restarting" in route
    assert (
        '<dt>next retry</dt><dd><time datetime="2026-01-05T12:00:02Z">2026-01-05 12:00:02 UTC</time></dd>'
        in route
    )
    body = console.get(reverse("event-detail", args=[history.behind.seq])).content.decode()
    route = section(body, "event-route")
    link = reverse("event-detail", args=[history.failing.seq])
    assert f'<dt>waiting on</dt><dd><a href="{link}">#{history.failing.seq}</a>' in route
    assert f"<dt>next retry</dt><dd>when #{history.failing.seq} settles</dd>" in route
    assert "<dt>failures</dt><dd>none</dd>" in route


def test_r29_event_page_shows_the_causal_chain_with_each_policy(console, history):
    body = console.get(reverse("event-detail", args=[history.child.seq])).content.decode()
    chain = section(body, "event-chain")
    rows = re.findall(r'<tr id="chain-(\d+)"', chain)
    assert [int(s) for s in rows] == [history.started.seq, history.child.seq]
    assert "<strong>start</strong>" in chain and "<strong>queue</strong>" in chain
    assert f'href="{reverse("causal-root", args=[history.started.seq])}"' in chain
    assert f'href="{reverse("event-detail", args=[history.started.seq])}"' in chain
    # htmx asks for one partial: the route alone does not read the chain.
    partial = console.get(
        reverse("event-detail", args=[history.child.seq]),
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="event-chain",
    ).content.decode()
    assert partial.strip().startswith('<section id="event-chain">')


def test_r29_work_page_history_shows_refusals_errors_and_unrouted_failures(console, clock):
    apply(clock)
    started = pr(clock)
    route_all(clock)
    work_id = RouteRecord.objects.get(event=started).work_id
    # An Event naming the Work that no route selects is on the Work's history as unmatched,
    # with its refusals; a failing one holds the Work.
    addressed = accept(clock, "other.thing", {}, work_id=work_id)
    failing = accept(clock, "x.fail", {"behaviour": "fail"}, work_id=work_id)
    route_all(clock)
    body = console.get(reverse("work-detail", args=[work_id])).content.decode()
    history = section(body, "work-history")
    assert f'<tr id="history-{addressed.seq}">' in history
    assert "<strong>scripted</strong>: type other.thing does not start with x" in history
    unrouted = section(body, "work-unrouted")
    assert f'<tr id="unrouted-{failing.seq}">' in unrouted
    assert "1 failure (handler_failed)" in unrouted
    assert 'next retry <time datetime="2026-01-05T12:00:02Z">2026-01-05 12:00:02 UTC</time>' in unrouted


def test_r16_r29_work_page_history_shows_a_failed_route_error(console, clock):
    apply(clock)
    started = pr(clock)
    route_all(clock)
    work_id = RouteRecord.objects.get(event=started).work_id
    failed = accept(clock, "x.bad", {"behaviour": "invalid"}, work_id=work_id)
    route_all(clock)
    assert RouteRecord.objects.get(event=failed).work_id == work_id
    history = section(console.get(reverse("work-detail", args=[work_id])).content.decode(), "work-history")
    assert f'<tr id="history-{failed.seq}">' in history
    assert "error: route scripted: payload has no author" in history
    assert "(1 attempt)" in history


def test_r29_work_and_event_page_query_counts_do_not_grow(console, clock):
    apply(clock)
    started = pr(clock)
    route_all(clock)
    work_id = RouteRecord.objects.get(event=started).work_id

    def grow(n: int) -> None:
        """``n`` unmatched and ``n`` failed records on the Work, then two Events failing (for
        now) that hold it; the ones an earlier call left failing route first."""
        sample_handlers.BROKEN.clear()
        clock.advance(seconds=10)
        for _ in range(n):
            accept(clock, "other.thing", {}, work_id=work_id)
            accept(clock, "x.bad", {"behaviour": "invalid"}, work_id=work_id)
        for i in range(2):
            ident = f"broken-{n}-{i}"
            sample_handlers.BROKEN.add(ident)
            accept(clock, "x.ok", {}, work_id=work_id, id=ident)
        route_all(clock)

    def pages() -> list[int]:
        last = Event.objects.order_by("-seq").first()
        assert not last.is_settled
        counts = []
        for url in (reverse("work-detail", args=[work_id]), reverse("event-detail", args=[last.seq])):
            with CaptureQueriesContext(connection) as queries:
                assert console.get(url).status_code == 200
            counts.append(len(queries))
        return counts

    grow(2)
    small = pages()
    grow(30)
    assert pages() == small
    body = console.get(reverse("work-detail", args=[work_id])).content.decode()
    history = section(body, "work-history")
    assert len(re.findall(r'<tr id="history-', history)) == 50 and 'rel="next"' in history
    assert len(re.findall(r'<tr id="unrouted-', section(body, "work-unrouted"))) == 2


# --- payload values stay out of logs ---------------------------------------------------------

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


def test_redacted_keeps_field_names_and_words_only():
    assert redacted("key pr:{data.repo} needs data.repo, which is {'a': 1}, not a scalar") == (
        "key … needs data.repo, which is …, not a scalar"
    )
    assert redacted("data.tags[2] is missing, expected one of [a, b]") == (
        "data.tags[2] is missing, expected one of …"
    )
    assert redacted("route gate: KeyError: 'token-123'", names=["gate"]) == "route gate: …"
