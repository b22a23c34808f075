"""Receivers declared in the configuration document, validated with the rest of it (each problem
at its line, the secret never in the document nor in a message) and stored with the
generation."""

from __future__ import annotations

import pytest

from routing.config.problems import ConfigInvalid
from routing.config.receivers import SecretRef
from routing.config.validate import parse_document
from routing.models import Receiver
from routing.receivers.verify import secret_read, secret_status
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
    secret: {file: alertmanager}
    auth: basic
    username: am
"""
    )
    by_name = {receiver.name: receiver for receiver in parsed.receivers}
    assert by_name["github"].kind == "github" and by_name["github"].scope == "acme/web"
    assert by_name["github"].secret.env == "GITHUB_SECRET"
    assert by_name["github"].settings == {"subject": "{data.repository.full_name}"}
    assert by_name["alerts"].secret.file == "alertmanager"
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


def test_a_secret_file_outside_the_secrets_directory_is_refused_at_its_line_whether_or_not_it_exists(
    settings, tmp_path
):
    settings.CONDUIT_SECRETS_DIR = tmp_path / "secrets"
    (tmp_path / "secrets").mkdir()
    (tmp_path / "exists").write_text("x\n")
    found = problems(
        f"""\
  a: {{kind: github, scope: acme, secret: {{file: /etc/passwd}}}}
  b: {{kind: github, scope: acme, secret: {{file: /etc/no-such-file-here}}}}
  c: {{kind: github, scope: acme, secret: {{file: ../exists}}}}
  d: {{kind: github, scope: acme, secret: {{file: {tmp_path}/secrets/../exists}}}}
  e: {{kind: github, scope: acme, secret: {{file: .}}}}
"""
    )

    message = (
        f"a secret file must be in the secrets directory {tmp_path}/secrets (CONDUIT_SECRETS_DIR): write its "
        "name there, like github-secret"
    )
    assert found == [
        (line, f"receivers.{name}.secret.file: {message}") for line, name in enumerate("abcde", 6)
    ]


def test_a_secret_file_is_taken_from_the_secrets_directory_and_one_outside_it_is_never_opened(
    settings, tmp_path
):
    settings.CONDUIT_SECRETS_DIR = tmp_path
    (tmp_path / "github-secret").write_text("s3cret\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "other").write_text("other\n")

    assert secret_read(SecretRef(file="github-secret")) == b"s3cret"
    assert secret_read(SecretRef(file=f"{tmp_path}/sub/other")) == b"other"
    # Stored while the directory was another one: refused without reading it.
    assert secret_status(SecretRef(file="/etc/passwd")) == (
        "the file /etc/passwd is outside the secrets directory (CONDUIT_SECRETS_DIR)"
    )


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
