"""``manage.py receivers list`` and ``manage.py receivers test NAME FILE``
(verify and map a saved delivery and trace its Events, accepting and counting nothing)."""

from __future__ import annotations

import io
import json
import time

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from causal.models import Event
from routing.models import ReceiverCount
from tests.causal.factories import EventFactory
from tests.routing.factories import ReceiverCountFactory, apply_config
from tests.routing.receivers.senders import (
    GITHUB_SECRET,
    body_of,
    github_headers,
    github_pull_request,
    slack_headers,
    slack_message,
)

pytestmark = pytest.mark.django_db

DOCUMENT = """\
version: 1
scopes:
  - path: acme
    bindings:
      inbox: {}
    routes:
      - slot: prs
        handler: match
        params: {type: "github.pull_request.*", keys: ["pr:{data.repository.full_name}#{data.number}"]}
        binding: inbox
receivers:
  github: {kind: github, scope: acme, secret: {env: TEST_CMD_GITHUB}}
  slack: {kind: slack, scope: acme, secret: {env: TEST_CMD_SLACK}}
"""


@pytest.fixture
def receivers(monkeypatch):
    monkeypatch.setenv("TEST_CMD_GITHUB", GITHUB_SECRET)
    monkeypatch.delenv("TEST_CMD_SLACK", raising=False)
    return apply_config(DOCUMENT)


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("receivers", *args, stdout=out)
    return out.getvalue()


def saved(tmp_path, body: bytes, headers: dict[str, str]) -> tuple[str, str]:
    """A delivery saved as a body file and a headers file (``Name: value`` lines)."""
    body_file, headers_file = tmp_path / "delivery.json", tmp_path / "delivery.headers"
    body_file.write_bytes(body)
    headers_file.write_text("".join(f"{name}: {value}\n" for name, value in headers.items()))
    return str(body_file), str(headers_file)


def test_receivers_list_shows_url_secret_reference_last_delivery_and_refusals(receivers):
    event = EventFactory(accepted_by="receiver:github", type="github.pull_request.opened")
    ReceiverCountFactory(receiver="github", outcome="signature_invalid", count=2)

    text = run("list", "--base-url", "https://conduit.example.com/")

    assert text.startswith("generation 1: 2 receivers\n")
    github = text[text.index("github\n") :]
    assert "  url https://conduit.example.com/hooks/github\n" in github
    assert "  secret env TEST_CMD_GITHUB\n" in github
    assert f"(Event #{event.seq} github.pull_request.opened)" in github
    assert "signature failures 2, other refusals 0; last signature_invalid" in github
    assert "secret env TEST_CMD_SLACK (here: the environment variable TEST_CMD_SLACK is not set)" in text
    assert GITHUB_SECRET not in text


def test_receivers_list_json_names_each_receiver_with_its_kind_url_and_secret(receivers):
    listed = json.loads(run("list", "--json"))

    assert listed["generation"] == 1
    assert [(r["name"], r["kind"], r["url"], r["secret"]) for r in listed["receivers"]] == [
        ("github", "github", "/hooks/github", {"env": "TEST_CMD_GITHUB"}),
        ("slack", "slack", "/hooks/slack", {"env": "TEST_CMD_SLACK"}),
    ]


def test_receivers_test_verifies_maps_and_traces_a_saved_github_delivery_accepting_nothing(
    receivers, tmp_path
):
    body = body_of(github_pull_request("opened", 42))
    headers = github_headers(body)
    body_file, headers_file = saved(tmp_path, body, headers)

    text = run("test", "github", body_file, "--headers", headers_file)

    assert "signature: verified" in text
    assert '"type": "github.pull_request.opened"' in text and '"subject": "pull/42"' in text
    assert "effect: start (new Work) via prs/inbox" in text
    assert "keys: pr:acme/web#42" in text
    assert Event.objects.count() == 0 and ReceiverCount.objects.count() == 0


def test_receivers_test_takes_headers_on_the_command_line_and_prints_json(receivers, tmp_path):
    body = body_of(github_pull_request("closed", 7))
    headers = github_headers(body)
    body_file, _ = saved(tmp_path, body, {})
    flags = [f"--header={name}:{value}" for name, value in headers.items()]

    result = json.loads(run("test", "github", body_file, *flags, "--json", "--no-trace"))

    assert result["verified"] is True
    assert [(e["type"], e["subject"], e["scope"]) for e in result["events"]] == [
        ("github.pull_request.closed", "pull/7", "acme")
    ]


def test_receivers_test_refuses_a_wrong_signature(receivers, tmp_path):
    body = body_of(github_pull_request())
    body_file, headers_file = saved(tmp_path, body, github_headers(body, secret="other"))

    with pytest.raises(
        CommandError, match=r"refused \(signature_invalid\): the X-Hub-Signature-256 signature"
    ):
        run("test", "github", body_file, "--headers", headers_file)
    assert ReceiverCount.objects.count() == 0


def test_receivers_test_without_the_secret_says_so_and_maps_with_no_verify(receivers, tmp_path):
    body = body_of(slack_message())
    body_file, headers_file = saved(tmp_path, body, slack_headers(body, timestamp=1767615300, secret="x"))

    with pytest.raises(
        CommandError, match=r"TEST_CMD_SLACK is not set \(--no-verify maps it without the secret\)"
    ):
        run("test", "slack", body_file, "--headers", headers_file)
    text = run("test", "slack", body_file, "--headers", headers_file, "--no-verify")

    assert "signature: not checked (--no-verify)" in text
    assert '"type": "slack.message"' in text
    assert "effect: unmatched" in text


def test_receivers_test_of_an_old_slack_delivery_notes_its_age(receivers, tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_CMD_SLACK", "slack-secret")
    body = body_of(slack_message())
    signed_at = int(time.time()) - 3 * 3600
    body_file, headers_file = saved(
        tmp_path, body, slack_headers(body, timestamp=signed_at, secret="slack-secret")
    )

    text = run("test", "slack", body_file, "--headers", headers_file, "--no-trace")

    assert "signature: verified" in text
    assert "note: the request was signed 3 h ago, outside Slack's 5-minute replay window" in text


def test_receivers_test_of_a_slack_challenge_says_what_would_be_answered(receivers, tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_CMD_SLACK", "slack-secret")
    body = body_of({"type": "url_verification", "challenge": "c-123"})
    body_file, headers_file = saved(
        tmp_path, body, slack_headers(body, timestamp=int(time.time()), secret="slack-secret")
    )

    text = run("test", "slack", body_file, "--headers", headers_file)

    assert 'handshake: answered {"challenge": "c-123"}; nothing would be accepted' in text


def test_receivers_test_of_an_unknown_receiver_or_generation_fails(receivers, tmp_path):
    body_file, _ = saved(tmp_path, b"{}", {})
    with pytest.raises(CommandError, match="no receiver named 'gitlab' in generation 1"):
        run("test", "gitlab", body_file)
    with pytest.raises(CommandError, match="there is no applied generation 9"):
        run("test", "github", body_file, "--generation", "9")
    with pytest.raises(CommandError, match="expected a header as NAME:VALUE"):
        run("test", "github", body_file, "--header", "no colon")
