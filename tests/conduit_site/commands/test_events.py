"""``manage.py events accept``: Events from a file or standard input."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection

from causal.models import Event
from tests.routing.factories import UserFactory, apply_config, live_scopes


def cloud_event(**overrides):
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


def accept(*args, stdin: str | bytes | None = None):
    """Run ``events accept``; return (stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    options = {"stdout": out, "stderr": err}
    if stdin is not None:
        options["stdin"] = io.BytesIO(stdin.encode() if isinstance(stdin, str) else stdin)
    call_command("events", "accept", *args, **options)
    return out.getvalue(), err.getvalue()


def refused(*args, stdin, field_text):
    with pytest.raises(CommandError) as info:
        accept(*args, stdin=stdin)
    assert field_text in str(info.value), str(info.value)
    assert Event.objects.count() == 0
    return str(info.value)


@pytest.fixture
def acme():
    """The default test configuration (scopes acme and acme/web), applied through the service."""
    return apply_config()


# --- accepting -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_events_accept_a_file_prints_seq_created_source_id(acme, tmp_path):
    path = tmp_path / "event.json"
    path.write_text(json.dumps(cloud_event(), indent=2))
    out, _ = accept(str(path))
    event = Event.objects.get()
    assert out == f"{event.seq} created github/acme evt-1\n"
    assert event.accepted_by == "cli"


@pytest.mark.django_db
def test_events_accept_duplicate_says_duplicate(acme):
    first, _ = accept("-", stdin=json.dumps(cloud_event()))
    again, _ = accept("-", stdin=json.dumps(cloud_event(), indent=2))
    seq = Event.objects.get().seq
    assert first == f"{seq} created github/acme evt-1\n"
    assert again == f"{seq} duplicate github/acme evt-1\n"


@pytest.mark.django_db
def test_events_accept_refuses_the_same_id_with_another_body(acme):
    accept("-", stdin=json.dumps(cloud_event()))
    with pytest.raises(CommandError) as info:
        accept("-", stdin=json.dumps(cloud_event(data={"changed": 1})))
    message = str(info.value)
    assert "with another body" in message and message.count("sha256:") == 2
    assert Event.objects.get().data == {"number": 7}


@pytest.mark.django_db
def test_events_accept_json_lines_from_stdin_in_order(acme):
    lines = "\n".join(json.dumps(cloud_event(id=f"e{i}")) for i in range(3)) + "\n"
    out, _ = accept("-", stdin=lines)
    seqs = list(Event.objects.order_by("seq").values_list("seq", "envelope_id"))
    assert [(s, i) for s, i in seqs] == [(seqs[0][0] + n, f"e{n}") for n in range(3)]
    assert out.splitlines() == [f"{seq} created github/acme {eid}" for seq, eid in seqs]


@pytest.mark.django_db
def test_events_accept_json_array(acme):
    out, _ = accept("-", stdin=json.dumps([cloud_event(id="a"), cloud_event(id="b"), cloud_event(id="a")]))
    assert [line.split()[1:] for line in out.splitlines()] == [
        ["created", "github/acme", "a"],
        ["created", "github/acme", "b"],
        ["duplicate", "github/acme", "a"],
    ]
    assert Event.objects.count() == 2


@pytest.mark.django_db
def test_events_accept_as_user_records_accepted_by(acme):
    UserFactory(username="erin")
    accept("-", "--as", "erin", stdin=json.dumps(cloud_event()))
    assert Event.objects.get().accepted_by == "erin"


@pytest.mark.django_db
@pytest.mark.parametrize("user", [None, "inactive"])
def test_events_accept_as_unknown_or_inactive_user_is_refused(acme, user):
    if user:
        UserFactory(username=user, is_active=False)
    refused("-", "--as", user or "ghost", stdin=json.dumps(cloud_event()), field_text="--as")


@pytest.mark.django_db
def test_events_accept_json_output(acme):
    out, _ = accept("-", "--json", stdin=json.dumps(cloud_event(correlation=["k"])))
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
    "infra.layers",
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
    accept("-", stdin=json.dumps(cloud_event(id="startup-1")))
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
    out, _ = accept("-", "--as", "webhook", stdin=json.dumps(offered))
    assert out.count(" created ") == 3
    assert list(Event.objects.order_by("seq").values_list("work_id", "execution_id", "correlation")) == [
        (3, None, []),
        (None, 4, []),
        (None, None, ["k:1"]),
    ]
