"""Reading routes from the command line (R29): ``events get|chain|list`` on Events the real router
decided (R13, R16, R28)."""

from __future__ import annotations

import io
import json
import re

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from causal.limits import Causal
from causal.models import Event
from causal.services import Envelope
from routing.models import RouteRecord
from routing.records.filters import EventListFilter, glob_regex
from routing.records.selectors import event_chain_routes, event_route, events_route_page
from routing.serializers import route_json
from tests.routing.factories import api_token_with_secret
from tests.routing.routedkit import REFUSALS, History, pr, route_all
from tests.routing.routerkit import accept, apply

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def handlers(test_handlers):
    """Every test here routes with the test handlers registered (tests/conftest.py)."""


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


def test_r29_every_events_subcommand_argument_has_help():
    from routing.management.commands.events import Command

    parser = Command().create_parser("manage.py", "events")
    subparsers = next(a for a in parser._actions if a.dest == "subcommand")
    for name in ("get", "chain", "list"):
        sub = subparsers.choices[name]
        assert sub.description
        for action in sub._actions:
            assert action.help, f"events {name}: {action.dest} has no help"


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
