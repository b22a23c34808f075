"""``manage.py events``: accepting Events from a file or standard input, and reading routes
(events get, chain and list, R29) on Events the real router decided (R13, R16, R28)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings
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
from tests.conduit_site.eventkit import events_command, get_route
from tests.routing.factories import UserFactory, live_scopes
from tests.routing.routedkit import REFUSALS, pr, route_all
from tests.routing.routerkit import accept, apply, cloud_event


def events_accept(*args, stdin: str | bytes | None = None):
    """Run ``events accept``; return (stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    options = {"stdout": out, "stderr": err}
    if stdin is not None:
        options["stdin"] = io.BytesIO(stdin.encode() if isinstance(stdin, str) else stdin)
    call_command("events", "accept", *args, **options)
    return out.getvalue(), err.getvalue()


def refused(*args, stdin, field_text):
    with pytest.raises(CommandError) as info:
        events_accept(*args, stdin=stdin)
    assert field_text in str(info.value), str(info.value)
    assert Event.objects.count() == 0
    return str(info.value)


# --- accepting -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_events_accept_a_file_prints_seq_created_source_id(acme, tmp_path):
    path = tmp_path / "event.json"
    path.write_text(json.dumps(cloud_event(), indent=2))
    out, _ = events_accept(str(path))
    event = Event.objects.get()
    assert out == f"{event.seq} created github/acme evt-1\n"
    assert event.accepted_by == "cli"


@pytest.mark.django_db
def test_events_accept_duplicate_says_duplicate(acme):
    first, _ = events_accept("-", stdin=json.dumps(cloud_event()))
    again, _ = events_accept("-", stdin=json.dumps(cloud_event(), indent=2))
    seq = Event.objects.get().seq
    assert first == f"{seq} created github/acme evt-1\n"
    assert again == f"{seq} duplicate github/acme evt-1\n"


@pytest.mark.django_db
def test_events_accept_refuses_the_same_id_with_another_body(acme):
    events_accept("-", stdin=json.dumps(cloud_event()))
    with pytest.raises(CommandError) as info:
        events_accept("-", stdin=json.dumps(cloud_event(data={"changed": 1})))
    message = str(info.value)
    assert "with another body" in message and message.count("sha256:") == 2
    assert Event.objects.get().data == {"number": 7}


@pytest.mark.django_db
def test_events_accept_json_lines_from_stdin_in_order(acme):
    lines = "\n".join(json.dumps(cloud_event(id=f"e{i}")) for i in range(3)) + "\n"
    out, _ = events_accept("-", stdin=lines)
    seqs = list(Event.objects.order_by("seq").values_list("seq", "envelope_id"))
    assert [(s, i) for s, i in seqs] == [(seqs[0][0] + n, f"e{n}") for n in range(3)]
    assert out.splitlines() == [f"{seq} created github/acme {eid}" for seq, eid in seqs]


@pytest.mark.django_db
def test_events_accept_json_array(acme):
    out, _ = events_accept(
        "-", stdin=json.dumps([cloud_event(id="a"), cloud_event(id="b"), cloud_event(id="a")])
    )
    assert [line.split()[1:] for line in out.splitlines()] == [
        ["created", "github/acme", "a"],
        ["created", "github/acme", "b"],
        ["duplicate", "github/acme", "a"],
    ]
    assert Event.objects.count() == 2


@pytest.mark.django_db
def test_events_accept_as_user_records_accepted_by(acme):
    UserFactory(username="erin")
    events_accept("-", "--as", "erin", stdin=json.dumps(cloud_event()))
    assert Event.objects.get().accepted_by == "erin"


@pytest.mark.django_db
@pytest.mark.parametrize("user", [None, "inactive"])
def test_events_accept_as_unknown_or_inactive_user_is_refused(acme, user):
    if user:
        UserFactory(username=user, is_active=False)
    refused("-", "--as", user or "ghost", stdin=json.dumps(cloud_event()), field_text="--as")


@pytest.mark.django_db
def test_events_accept_json_output(acme):
    out, _ = events_accept("-", "--json", stdin=json.dumps(cloud_event(correlation=["k"])))
    results = json.loads(out)["results"]
    assert len(results) == 1
    assert results[0]["created"] is True
    assert results[0]["conduit"]["seq"] == Event.objects.get().seq
    assert results[0]["conduit"]["correlation"] == ["k"]


# --- refusals --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_events_accept_invalid_json_is_refused(acme):
    refused("-", stdin='{"specversion": ', field_text="invalid JSON")


@pytest.mark.django_db
def test_events_accept_missing_field_is_refused_naming_it(acme):
    refused("-", stdin=json.dumps(cloud_event(type=...)), field_text="type: type is required")


@pytest.mark.django_db
def test_events_accept_mistyped_field_is_refused_naming_it(acme):
    refused("-", stdin=json.dumps(cloud_event(execution_id="x")), field_text="execution_id:")


@pytest.mark.django_db
def test_events_accept_unknown_scope_is_refused(acme):
    refused(
        "-", stdin=json.dumps(cloud_event(scope="elsewhere")), field_text="scope: unknown scope 'elsewhere'"
    )


@pytest.mark.django_db
def test_r51_events_accept_refuses_core_type(acme):
    refused("-", stdin=json.dumps(cloud_event(type="core.work.created")), field_text="type:")


@pytest.mark.django_db
def test_r51_events_accept_refuses_core_manual_source(acme):
    refused("-", stdin=json.dumps(cloud_event(source="core.manual")), field_text="source:")


@pytest.mark.django_db
def test_events_accept_event_over_the_limit_is_refused(acme, settings):
    settings.CONDUIT_MAX_EVENT_BYTES = 512
    refused("-", stdin=json.dumps(cloud_event(data="x" * 600)), field_text="CONDUIT_MAX_EVENT_BYTES")


@pytest.mark.django_db
def test_events_accept_batch_is_all_or_nothing_naming_each_line(acme):
    lines = [
        json.dumps(cloud_event(id="ok-1")),
        json.dumps(cloud_event(id="ok-2")),
        json.dumps(cloud_event(id="bad-time", time="tomorrow")),
        "",
        json.dumps(cloud_event(id="bad-type", type=7)),
    ]
    message = refused("-", stdin="\n".join(lines), field_text="line 3: time:")
    assert "line 5: type:" in message
    assert "nothing was accepted" in message


@pytest.mark.django_db
def test_events_accept_batch_with_an_unknown_scope_stores_nothing(acme):
    batch = [cloud_event(id="a"), cloud_event(id="b", scope="nowhere")]
    refused("-", stdin=json.dumps(batch), field_text="[1]: scope:")


@pytest.mark.django_db
def test_events_accept_json_error_names_the_field(acme):
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command(
            "events",
            "accept",
            "-",
            "--json",
            stdin=io.BytesIO(json.dumps(cloud_event(time="noon")).encode()),
            stdout=out,
        )
    error = json.loads(out.getvalue())
    assert (error["error"], error["field"]) == ("invalid_event", "time")
    assert Event.objects.count() == 0


@pytest.mark.django_db
def test_events_accept_missing_file_is_refused(acme, tmp_path):
    refused(str(tmp_path / "absent.json"), stdin=None, field_text="FILE: cannot read")


def test_events_help_lists_subcommands_and_every_argument_has_help():
    from conduit_site.management.commands.events import SUBCOMMANDS, Command

    parser = Command().create_parser("manage.py", "events")
    subparsers = next(a for a in parser._actions if a.dest == "subcommand")
    assert set(subparsers.choices) == set(SUBCOMMANDS)
    for name, subparser in subparsers.choices.items():
        for action in subparser._actions:
            assert action.help, f"events {name}: {action.dest} has no help"


# --- a real process --------------------------------------------------------------------------


def database_url() -> str:
    """The URL of the database this test run uses, for a child process."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    user = quote(db["USER"] or "")
    password = f":{quote(db['PASSWORD'])}" if db.get("PASSWORD") else ""
    return f"postgres://{user}{password}@{db['HOST'] or 'localhost'}:{db['PORT'] or 5432}/{db['NAME']}"


def run_manage(*args: str, stdin: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DATABASE_URL": database_url()}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        input=stdin.encode(),
        capture_output=True,
        cwd=Path(settings.BASE_DIR),
        env=env,
        timeout=120,
        check=False,
    )


@pytest.mark.django_db(transaction=True)
def test_events_accept_stdin_in_a_subprocess():
    live_scopes("acme")
    lines = json.dumps(cloud_event(id="p1")) + "\n" + json.dumps(cloud_event(id="p2")) + "\n"
    done = run_manage("events", "accept", "-", stdin=lines)
    assert done.returncode == 0, done.stderr.decode()
    events = list(Event.objects.order_by("seq"))
    assert [e.envelope_id for e in events] == ["p1", "p2"]
    assert done.stdout.decode().splitlines() == [
        f"{e.seq} created github/acme {e.envelope_id}" for e in events
    ]

    again = run_manage("events", "accept", "-", stdin=lines)
    assert again.returncode == 0, again.stderr.decode()
    assert [line.split()[1] for line in again.stdout.decode().splitlines()] == ["duplicate", "duplicate"]

    bad = run_manage("events", "accept", "-", stdin=json.dumps(cloud_event(id="p3", time="noon")))
    assert bad.returncode == 1
    assert "time:" in bad.stderr.decode()
    assert Event.objects.count() == 2


def nested_event_text(levels: int, **overrides) -> str:
    """A CloudEvent as JSON text nesting ``levels`` arrays and objects (the envelope is one)."""
    text = json.dumps(cloud_event(data="@", **overrides)).replace('"@"', "@")
    return text.replace("@", '{"a":' * (levels - 1) + "1" + "}" * (levels - 1))


@pytest.mark.django_db
@pytest.mark.parametrize("levels", [65, 10_000])
def test_events_accept_refuses_a_deeply_nested_event(acme, levels):
    refused("-", stdin=nested_event_text(levels), field_text="more than 64 levels deep")
    lines = json.dumps(cloud_event(id="ok")) + "\n" + nested_event_text(levels, id="deep") + "\n"
    refused("-", stdin=lines, field_text="64 levels")


@pytest.mark.django_db
def test_events_accept_refuses_an_object_with_a_duplicate_key(acme):
    text = json.dumps(cloud_event()).replace('"id": "evt-1"', '"id": "evt-1", "id": "evt-2"')
    refused("-", stdin=text, field_text="'id' twice")
    refused("-", stdin=json.dumps(cloud_event(id="ok")) + "\n" + text + "\n", field_text="'id' twice")


@pytest.mark.django_db
def test_events_accept_refuses_identities_the_system_writes(acme):
    refused(
        "-", stdin=json.dumps(cloud_event(id="reroute/evt-1")), field_text="id: ids starting with 'reroute/'"
    )
    refused(
        "-", stdin=json.dumps(cloud_event(source="conduit.work/9")), field_text="source: sources starting"
    )


# What ``events get`` must not import: the web server, the configuration parser and validator,
# the router's writes, the Work engine and the acceptance services. It reads one Event.
EVENTS_GET_LEAVES_OUT = (
    "daphne",
    "twisted",
    "autobahn",
    "yaml",
    "re2",
    "conduit_site.urls",
    "infra.wakeup",
    "causal.services",
    "causal.limits",
    "routing.config.validate",
    "routing.config.reader",
    "routing.config.effective",
    "routing.acceptance.envelopes",
    "routing.handlers.registry",
    "routing.acceptance.services",
    "routing.config.services",
    "worklife.executors",
    "worklife.attempts",
    "worklife.scheduling",
    "worklife.waits",
    "worklife.timers",
    "worklife.inputs",
)

# Runs the command as manage.py does, then reports every module the process holds (sys.modules
# sees what importlib.import_module loads too, which ``-X importtime`` does not) and how many
# objects app loading left frozen for the collector (conduit_site/apps.py).
EVENTS_GET_CHILD = """
import gc, json, sys
import django
django.setup()
frozen = gc.get_freeze_count()
from django.core.management import execute_from_command_line
execute_from_command_line(["manage.py", "events", "get", sys.argv[1]])
print(json.dumps({"modules": sorted(sys.modules), "frozen": frozen}), file=sys.stderr)
"""


@pytest.mark.django_db(transaction=True)
def test_events_get_imports_only_what_it_reads():
    """``events get`` imports what it needs when it needs it: after
    ``django.setup()`` it loads the reads of Events, routes and Work, not the web server, the
    YAML parser, the validator, the router's or the Work engine's writes; and app loading
    leaves its objects frozen, so no collection (the interpreter's at exit) walks them again."""
    live_scopes("acme")
    events_accept("-", stdin=json.dumps(cloud_event(id="startup-1")))
    seq = Event.objects.get().seq
    done = subprocess.run(
        [sys.executable, "-c", EVENTS_GET_CHILD, str(seq)],
        capture_output=True,
        text=True,
        cwd=Path(settings.BASE_DIR),
        env={**os.environ, "DATABASE_URL": database_url(), "DJANGO_SETTINGS_MODULE": "conduit_site.settings"},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"#{seq} "), done.stdout
    report = json.loads(done.stderr.strip().splitlines()[-1])
    modules = set(report["modules"])
    # The report is the command's: its module and the reads it made are there.
    assert {
        "conduit_site.management.commands.events",
        "routing.records.selectors",
        "causal.models",
    } <= modules
    loaded = sorted(
        name
        for name in modules
        if any(name == left or name.startswith(f"{left}.") for left in EVENTS_GET_LEAVES_OUT)
    )
    assert not loaded, loaded
    assert report["frozen"] > 0


@pytest.mark.django_db
def test_events_accept_may_name_a_work_or_choose_keys_as_trusted_host_access():
    """The CLI checks no permission: an Event naming its Work or choosing its correlation keys is
    accepted, whoever ``--as`` names (through the API either needs the send permission)."""
    live_scopes("acme")
    UserFactory(username="webhook")  # may accept only
    offered = [
        cloud_event(work_id=3),
        cloud_event(id="evt-2", execution_id=4),
        cloud_event(id="evt-3", correlation=["k:1"]),
    ]
    out, _ = events_accept("-", "--as", "webhook", stdin=json.dumps(offered))
    assert out.count(" created ") == 3
    assert list(Event.objects.order_by("seq").values_list("work_id", "execution_id", "correlation")) == [
        (3, None, []),
        (None, 4, []),
        (None, None, ["k:1"]),
    ]


# --- reading routes: events get, chain and list on Events the real router decided ------------


@pytest.mark.django_db
@pytest.mark.usefixtures("test_handlers")
def test_r29_events_get_prints_the_route_with_each_refusal(history):
    out = events_command("get", str(history.unmatched.seq))
    seq = history.unmatched.seq
    assert out.splitlines() == [
        f"#{seq} other.thing  tests/{history.unmatched.envelope_id}  scope acme  routed",
        "  route: unmatched (no_match), generation 1",
        *(f"  - {r['route']}: {r['reason']}" for r in REFUSALS),
        "  why: No route matched, so nothing took it: each route's refusal is listed.",
    ]


@pytest.mark.django_db
@pytest.mark.usefixtures("test_handlers")
def test_r29_events_get_prints_route_binding_work_and_generation(history):
    out = events_command("get", str(history.started.seq))
    assert out.splitlines()[1] == (
        "  route: start (type github.pull_request.opened matches github.pull_request.*) "
        f"via pr/triage on Work {history.work_id}, generation 1"
    )


@pytest.mark.django_db
@pytest.mark.usefixtures("test_handlers")
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


@pytest.mark.django_db
@pytest.mark.usefixtures("test_handlers")
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


@pytest.mark.django_db
@pytest.mark.usefixtures("test_handlers")
def test_r29_events_get_unknown_seq_is_refused_naming_seq():
    with pytest.raises(CommandError, match="SEQ: no Event has seq 99999"):
        events_command("get", "99999")
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("events", "get", "99999", "--json", stdout=out)
    assert json.loads(out.getvalue()) == {"error": "not_found", "message": "SEQ: no Event has seq 99999"}
    with pytest.raises(CommandError, match="SEQ.*positive integer"):
        events_command("get", "0")


@pytest.mark.django_db
@pytest.mark.usefixtures("test_handlers")
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


@pytest.mark.django_db
@pytest.mark.usefixtures("test_handlers")
def test_r29_events_chain_unknown_seq_is_refused():
    with pytest.raises(CommandError, match="SEQ: no Event has seq 5555"):
        events_command("chain", "5555")


def listed(*args: str) -> list[int]:
    return [item["conduit"]["seq"] for item in json.loads(events_command("list", "--json", *args))["events"]]


@pytest.mark.django_db
@pytest.mark.usefixtures("test_handlers")
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


@pytest.mark.django_db
@pytest.mark.usefixtures("test_handlers")
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


@pytest.mark.django_db
@pytest.mark.usefixtures("test_handlers")
def test_r29_events_list_type_glob_treats_other_characters_literally(clock):
    apply(clock)
    plain = accept(clock, "a.b-c", {})
    accept(clock, "aXb-c", {})
    accept(clock, "a.b-cd", {})
    assert listed("--type", "a.b-?") == [plain.seq]
    assert listed("--type", "a.b-c") == [plain.seq]
    assert glob_regex("a.b*") == r"(?s)\Aa\.b.*\Z"


@pytest.mark.django_db
@pytest.mark.usefixtures("test_handlers")
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


@pytest.mark.django_db
@pytest.mark.usefixtures("test_handlers")
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


@pytest.mark.django_db
@pytest.mark.usefixtures("test_handlers")
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
@pytest.mark.django_db
@pytest.mark.usefixtures("test_handlers")
def test_r29_events_list_refuses_bad_filters_naming_the_option(args, message):
    with pytest.raises(CommandError) as info:
        events_command("list", *args)
    assert message in str(info.value)


@pytest.mark.django_db
@pytest.mark.usefixtures("test_handlers")
def test_r29_events_list_bad_filter_with_json_prints_a_json_error():
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("events", "list", "--json", "--limit", "0", stdout=out)
    assert json.loads(out.getvalue()) == {
        "error": "invalid_filter",
        "message": "--limit: expected 1 to 1000, got 0",
    }


@pytest.mark.django_db
@pytest.mark.usefixtures("test_handlers")
def test_r29_every_events_subcommand_argument_has_help():
    from conduit_site.management.commands.events import Command

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


@pytest.mark.django_db
@pytest.mark.usefixtures("test_handlers")
def test_r29_list_get_and_api_query_counts_do_not_grow_with_history(
    clock, client, reader_auth, django_assert_max_num_queries, django_assert_num_queries
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
            lambda: get_route(client, reader_auth, last),
        ]

    get_route(client, reader_auth, 1)  # the token's first use records it (once a while, not per request)
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


@pytest.mark.django_db
@pytest.mark.usefixtures("test_handlers")
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
