"""``manage.py config validate|apply|candidate|show`` (R3)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from routing.management.commands.config import Command
from routing.models import Generation, GenerationKind
from tests.routing.factories import DEFAULT_TEST_CONFIG

ROOT = Path(__file__).resolve().parents[4]
DEMO = ROOT / "demo" / "conduit.yaml"

pytestmark = pytest.mark.django_db


def run(*args: str, stdin: str | None = None) -> str:
    out = io.StringIO()
    extra = {"stdin": io.StringIO(stdin)} if stdin is not None else {}
    call_command("config", *args, stdout=out, **extra)
    return out.getvalue()


@pytest.fixture
def bad_file(tmp_path: Path) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text(DEFAULT_TEST_CONFIG.replace("binding: inbox", "binding: inbx"), encoding="utf-8")
    return path


def test_validate_reports_what_the_document_declares():
    assert run("validate", str(DEMO)) == f"{DEMO}: valid: 3 scopes, 6 bindings, 11 routes, 3 receivers\n"
    assert Generation.objects.count() == 0


def test_validate_reports_problems_with_file_and_line(bad_file):
    with pytest.raises(CommandError) as caught:
        run("validate", str(bad_file))
    message = str(caught.value)
    assert message.startswith(f"{bad_file} is not valid (1 problem); nothing was stored")
    assert f"{bad_file}:34: scopes[0].routes[3].binding: unknown binding 'inbx'" in message
    assert Generation.objects.count() == 0


def test_apply_prints_the_new_generation_number():
    assert run("apply", str(DEMO)) == "1\n"
    assert run("apply", "--by", "alice", str(DEMO)) == "2\n"
    generation = Generation.objects.get(number=2)
    assert generation.created_by == "alice"
    assert generation.document == DEMO.read_text(encoding="utf-8")


def test_apply_refused_stores_nothing(bad_file):
    with pytest.raises(CommandError, match="unknown binding 'inbx'"):
        run("apply", str(bad_file))
    assert Generation.objects.count() == 0


def test_candidate_prints_the_candidate_id_and_applies_nothing():
    output = run("candidate", str(DEMO))
    candidate = Generation.objects.get()
    assert output == f"{candidate.pk}\n"
    assert candidate.kind == GenerationKind.CANDIDATE


def test_file_dash_reads_stdin():
    assert run("apply", "-", stdin=DEFAULT_TEST_CONFIG) == "1\n"
    with pytest.raises(CommandError, match=r"<stdin>:2: scopes: expected a list of scopes"):
        run("validate", "-", stdin="version: 1\nscopes: 3\n")


def test_unreadable_file_is_a_clear_error(tmp_path):
    with pytest.raises(CommandError, match="cannot read .*missing.yaml: No such file or directory"):
        run("validate", str(tmp_path / "missing.yaml"))
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(CommandError, match="not UTF-8 text"):
        run("validate", str(binary))


def test_r3_show_effective_resolves_root_to_leaf():
    run("apply", str(DEMO))
    output = run("show", "acme/web", "--effective")
    lines = output.splitlines()
    assert lines[0] == "scope acme/web (generation 1, effective)"
    assert "  triage: executor command; controls -; capabilities - (here, redefines acme)" in lines
    assert "  archive: queue-only; controls -; capabilities - (inherited from acme)" in lines
    routes = [line for line in lines if line[:4].strip().rstrip(".").isdigit()]
    assert [line.split(":")[0].strip() for line in routes] == [
        "1. bot-noise",
        "2. pull-requests",
        "3. pr-comments",
        "4. chat",
        "5. audit",
        "6. deploys",
    ]
    assert "(here, overrides acme)" in routes[1]
    assert (
        "fallback queue (always here: triage cannot inject), starts no Work (inherited from acme)"
        in routes[2]
    )


def test_show_without_effective_lists_only_the_scope_declarations():
    run("apply", str(DEMO))
    output = run("show", "acme/web")
    assert "declared here" in output.splitlines()[0]
    assert "archive" not in output and "bot-noise" not in output
    assert "pull-requests" in output and "deploys" in output


def test_r3_show_json():
    run("apply", str(DEMO))
    data = json.loads(run("show", "acme/web", "--effective", "--json"))
    assert data["generation"] == "1" and data["effective"] is True and data["path"] == "acme/web"
    assert [r["slot"] for r in data["routes"]] == [
        "bot-noise",
        "pull-requests",
        "pr-comments",
        "chat",
        "audit",
        "deploys",
    ]
    assert data["routes"][1]["overrides"] == "acme"
    assert data["bindings"]["triage"] == {
        "scope": "acme/web",
        "redefines": "acme",
        "executor": "command",
        "settings": {"argv": ["python3", "-m", "demo.agents", "triage"]},
        "controls": [],
        "capabilities": [],
        "problem": "",
        "flow": [],
    }
    assert data["bindings"]["responder"]["capabilities"] == ["inject"]
    assert data["bindings"]["responder"]["flow"] == [
        "concurrency 1 per key {data.event.channel}",
        "throttle 30 per 60 s",
    ]


def test_show_a_chosen_generation_or_candidate():
    run("apply", str(DEMO))
    run("apply", "-", stdin=DEFAULT_TEST_CONFIG)
    candidate_id = run("candidate", "-", stdin=DEFAULT_TEST_CONFIG).strip()
    assert "bot-noise" in run("show", "acme", "--generation", "1")
    assert "bot-noise" not in run("show", "acme", "--generation", "2")
    data = json.loads(run("show", "acme", "--json", "--generation", f"candidate:{candidate_id}"))
    assert data["generation"] == "candidate"
    assert [r["slot"] for r in data["routes"]] == ["prs", "chat", "stop", "notes", "noise"]


def test_show_errors_are_clear():
    with pytest.raises(CommandError, match="no configuration has been applied yet; apply one with"):
        run("show", "acme")
    run("apply", str(DEMO))
    with pytest.raises(
        CommandError, match=r"scope 'acme/nope' is not in generation 1 \(scopes: acme, acme/ops, acme/web\)"
    ):
        run("show", "acme/nope")
    with pytest.raises(CommandError, match="there is no applied generation 7"):
        run("show", "acme", "--generation", "7")
    with pytest.raises(CommandError, match="'latest' is not a generation number or candidate:ID"):
        run("show", "acme", "--generation", "latest")


def test_every_action_and_argument_has_help():
    parser = Command().create_parser("manage.py", "config")
    assert Command.help
    subcommands = next(action for action in parser._actions if action.dest == "action")
    assert set(subcommands.choices) == {"validate", "apply", "candidate", "show", "diff", "preview"}
    assert all(choice.help for choice in subcommands._choices_actions)
    for name, subparser in subcommands.choices.items():
        for action in subparser._actions:
            assert action.help, f"config {name}: {action.dest} has no help"


def test_validate_through_manage_py_in_a_subprocess(bad_file):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ok = subprocess.run(
        [sys.executable, "manage.py", "config", "validate", "demo/conduit.yaml"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == "demo/conduit.yaml: valid: 3 scopes, 6 bindings, 11 routes, 3 receivers\n"
    bad = subprocess.run(
        [sys.executable, "manage.py", "config", "validate", str(bad_file)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 1
    assert "unknown binding 'inbx'" in bad.stderr and bad.stdout == ""


def test_a_lone_surrogate_is_refused_by_validate_and_apply_with_file_and_line(tmp_path: Path):
    path = tmp_path / "surrogate.yaml"
    written = 'type: "github.pull_request.*"'
    path.write_text(DEFAULT_TEST_CONFIG.replace(written, 'type: "\\ud800"', 1), encoding="utf-8")
    line = DEFAULT_TEST_CONFIG[: DEFAULT_TEST_CONFIG.index(written)].count("\n") + 1
    for action in ("validate", "apply"):
        with pytest.raises(CommandError) as caught:
            run(action, str(path))
        assert f"{path}:{line}: scopes[0].routes[0].params.type: invalid Unicode (a lone surrogate" in str(
            caught.value
        )
    assert Generation.objects.count() == 0
