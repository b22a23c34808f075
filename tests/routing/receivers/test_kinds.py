"""Each sender's signature computed as the sender documents it, and what its Events are about."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from routing.receivers import github, slack
from routing.receivers.verify import Delivery, Refused, check_hmac

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
