"""Receivers declared in the configuration document, validated with the rest of
it (each problem at its line, the secret never in the document nor in a message) and stored
with the generation; each sender's signature computed as the sender documents it."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from routing.config.problems import ConfigInvalid
from routing.config.validate import parse_document
from routing.models import Receiver
from routing.receivers import github, slack
from routing.receivers.verify import Delivery, Refused, check_hmac
from tests.routing.factories import apply_config

BASE = """\
version: 1
scopes:
  - path: acme
  - path: acme/web
receivers:
"""


def problems(receivers: str) -> list[tuple[int | None, str]]:
    with pytest.raises(ConfigInvalid) as raised:
        parse_document(BASE + receivers)
    return [(problem.line, str(problem)) for problem in raised.value.problems]


def test_receivers_are_parsed_with_their_kind_scope_secret_and_settings():
    parsed = parse_document(
        BASE
        + """\
  github: {kind: github, scope: acme/web, secret: {env: GITHUB_SECRET}, subject: "{data.repository.full_name}"}
  alerts:
    kind: alertmanager
    scope: acme
    secret: {file: /etc/conduit/alertmanager}
    auth: basic
    username: am
"""
    )
    by_name = {receiver.name: receiver for receiver in parsed.receivers}
    assert by_name["github"].kind == "github" and by_name["github"].scope == "acme/web"
    assert by_name["github"].secret.env == "GITHUB_SECRET"
    assert by_name["github"].settings == {"subject": "{data.repository.full_name}"}
    assert by_name["alerts"].secret.file == "/etc/conduit/alertmanager"
    assert by_name["alerts"].settings == {"auth": "basic", "username": "am"}
    assert by_name["alerts"].path == "/hooks/alerts" and by_name["alerts"].accepted_by == "receiver:alerts"


def test_a_secret_written_in_the_document_is_refused_and_never_repeated():
    found = problems("  github: {kind: github, scope: acme, secret: hunter2-very-secret}\n")

    assert found == [
        (
            6,
            "receivers.github.secret: expected a mapping, got a string: write where the secret is, never the "
            "secret: secret: {env: VARIABLE} or secret: {file: PATH}",
        )
    ]
    assert "hunter2" not in str(found)


def test_receiver_problems_are_named_with_their_line():
    found = problems(
        """\
  github:
    kind: github
    scope: acme/api
    secret: {env: GITHUB_SECRET}
  Slack Bot:
    kind: slack
    scope: acme
    secret: {env: X, file: y}
  alerts:
    kind: alertmanager
    scope: acme
    secret: {env: 1BAD}
    auth: digest
  shop:
    kind: generic-hmac
    scope: acme
    secret: {env: SHOP}
    algorithm: md5
    type: "shop.{payload.kind}"
    verify: false
  gitlab:
    kind: gitlab
    scope: acme
    secret: {env: X}
"""
    )
    assert found == [
        (8, "receivers.github.scope: unknown scope 'acme/api' (scopes here: acme, acme/web)"),
        (
            10,
            "receivers.Slack Bot: bad receiver name 'Slack Bot': lower-case letters, digits, '-' or '_', starting "
            "with a letter or digit, at most 64 characters (it is the URL's last segment, /hooks/<name>)",
        ),
        (
            13,
            "receivers.Slack Bot.secret: name exactly one of env or file: write where the secret is, never the "
            "secret: secret: {env: VARIABLE} or secret: {file: PATH}",
        ),
        (
            17,
            "receivers.alerts.secret.env: expected an environment variable's name (letters, digits and '_')",
        ),
        (18, "receivers.alerts.auth: unknown auth 'digest' (expected one of: bearer, basic)"),
        (23, "receivers.shop.algorithm: unknown algorithm 'md5' (expected one of: sha1, sha256, sha512)"),
        (
            24,
            "receivers.shop.type: bad template 'shop.{payload.kind}': field 'payload.kind' must be "
            "data.<key>[.<key>…] or headers.<name>",
        ),
        (
            25,
            "receivers.shop.verify: unknown key 'verify' for kind generic-hmac (expected one of: kind, scope, "
            "secret, id, source, type, subject, header, algorithm, encoding, prefix)",
        ),
        (
            27,
            "receivers.gitlab.kind: unknown kind 'gitlab' (expected one of: github, slack, alertmanager, "
            "cloudevents, generic-hmac)",
        ),
    ]


@pytest.mark.django_db
def test_receivers_are_stored_with_their_generation_and_candidates_too(clock):
    document = (
        BASE + "  github: {kind: github, scope: acme, secret: {env: GITHUB_SECRET}, type: 'gh.{data.x}'}\n"
    )

    applied = apply_config(document, clock)
    candidate = apply_config(document.replace("GITHUB_SECRET", "OTHER"), clock, candidate=True)

    stored = Receiver.objects.get(generation=applied)
    assert (stored.name, stored.kind, stored.scope, stored.secret, stored.settings) == (
        "github",
        "github",
        "acme",
        {"env": "GITHUB_SECRET"},
        {"type": "gh.{data.x}"},
    )
    assert Receiver.objects.get(generation=candidate).secret == {"env": "OTHER"}


# --- the senders' documented signatures --------------------------------------------------------


def test_github_signature_matches_githubs_documented_example():
    """GitHub's documentation: the secret "It's a Secret to Everybody" and the payload
    "Hello, World!" give this X-Hub-Signature-256."""
    expected = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    delivery = Delivery.of(b"Hello, World!", {"X-Hub-Signature-256": expected})

    check_hmac(delivery, b"It's a Secret to Everybody", header=github.SIGNATURE_HEADER, prefix="sha256=")
    with pytest.raises(Refused):
        check_hmac(delivery, b"It's a Secret to Everybody!", header=github.SIGNATURE_HEADER, prefix="sha256=")


def test_slack_signature_is_the_hmac_of_v0_timestamp_and_body():
    body = b'{"type":"event_callback"}'
    digest = hmac.new(b"signing-secret", b"v0:1531420618:" + body, hashlib.sha256).hexdigest()
    delivery = Delivery.of(
        body, {"X-Slack-Signature": f"v0={digest}", "X-Slack-Request-Timestamp": "1531420618"}
    )
    from datetime import UTC, datetime

    now = datetime.fromtimestamp(1531420618 + 299, UTC)
    assert slack.verify(None, delivery, b"signing-secret", now=now) == ()
    # A saved delivery tried again later: the signature is checked, its age is a note.
    later = datetime.fromtimestamp(1531420618 + 7200, UTC)
    (note,) = slack.verify(None, delivery, b"signing-secret", now=later, replay_window=False)
    assert "signed 2 h ago" in note


@pytest.mark.parametrize(
    ("event", "payload", "subject"),
    [
        ("pull_request", {"number": 42, "pull_request": {"number": 42}}, "pull/42"),
        ("pull_request_review", {"pull_request": {"number": 42}}, "pull/42"),
        ("issue_comment", {"issue": {"number": 42, "pull_request": {"url": "…"}}}, "pull/42"),
        ("issue_comment", {"issue": {"number": 7}}, "issues/7"),
        ("issues", {"issue": {"number": 7}}, "issues/7"),
        ("push", {"ref": "refs/heads/main"}, "refs/heads/main"),
        ("create", {"ref": "v1.2", "ref_type": "tag"}, "refs/tags/v1.2"),
        ("deployment_status", {"deployment": {"id": 9}}, "deployments/9"),
        ("release", {"release": {"tag_name": "v1.2"}}, "releases/v1.2"),
        ("workflow_run", {"workflow_run": {"id": 3}}, "actions/runs/3"),
        ("star", {"starred_at": "…"}, ""),
    ],
)
def test_github_subject_names_what_the_event_is_about(event, payload, subject):
    assert github.subject_of(event, payload) == subject


def test_github_source_is_the_repository_else_the_organization_else_the_sender():
    assert (
        github.source_of({"repository": {"html_url": "https://github.com/acme/web"}})
        == "https://github.com/acme/web"
    )
    assert github.source_of({"organization": {"login": "acme"}}) == "https://github.com/acme"
    assert github.source_of({"sender": {"html_url": "https://github.com/dana"}}) == "https://github.com/dana"
