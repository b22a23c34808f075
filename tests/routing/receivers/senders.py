"""Deliveries as the real senders make them: payloads in their documented shapes and headers
signed with the real secret the way each sender signs (for tests of the receivers)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

GITHUB_SECRET = "It's a Secret to Everybody"  # GitHub's own documentation example
SLACK_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"  # the shape of a Slack signing secret
ALERTMANAGER_TOKEN = "am-bearer-0f3c9d2e7a1b"
CLOUDEVENTS_TOKEN = "ce-bearer-5e6f7a8b9c0d"
SHOP_SECRET = "shop-hmac-secret-1a2b3c"

ENV = {
    "TEST_HOOK_GITHUB": GITHUB_SECRET,
    "TEST_HOOK_SLACK": SLACK_SECRET,
    "TEST_HOOK_ALERTMANAGER": ALERTMANAGER_TOKEN,
    "TEST_HOOK_CLOUDEVENTS": CLOUDEVENTS_TOKEN,
    "TEST_HOOK_SHOP": SHOP_SECRET,
}

# One scope with a route per sender (each starts Work on a queue-only binding), and a receiver of
# each kind; {basic_file} is the path of the basic-auth receiver's secret file.
CONFIG = """
version: 1
scopes:
  - path: acme
    bindings:
      inbox: {{}}
    routes:
      - slot: prs
        handler: match
        params: {{type: "github.pull_request.*", keys: ["pr:{{data.repository.full_name}}#{{data.number}}"]}}
        binding: inbox
      - slot: comments
        handler: match
        params: {{type: "github.issue_comment.*", keys: ["pr:{{data.repository.full_name}}#{{data.issue.number}}"]}}
        binding: inbox
      - slot: chat
        handler: match
        params: {{type: "slack.message", keys: ["thread:{{subject}}"]}}
        binding: inbox
      - slot: alerts
        handler: match
        params: {{type: "alertmanager.alert.*", keys: ["alert:{{data.fingerprint}}"]}}
        binding: inbox
      - slot: cloudevents
        handler: match
        params: {{type: "com.example.*"}}
        binding: inbox
      - slot: shop
        handler: match
        params: {{type: "shop.*", keys: ["order:{{subject}}"]}}
        binding: inbox
  - path: acme/web
  - path: other
receivers:
  github: {{kind: github, scope: acme, secret: {{env: TEST_HOOK_GITHUB}}}}
  slack: {{kind: slack, scope: acme, secret: {{env: TEST_HOOK_SLACK}}}}
  alertmanager: {{kind: alertmanager, scope: acme, secret: {{env: TEST_HOOK_ALERTMANAGER}}}}
  alertmanager-basic:
    kind: alertmanager
    scope: acme
    secret: {{file: "{basic_file}"}}
    auth: basic
    username: alertmanager
  events: {{kind: cloudevents, scope: acme, secret: {{env: TEST_HOOK_CLOUDEVENTS}}}}
  shop:
    kind: generic-hmac
    scope: acme
    secret: {{env: TEST_HOOK_SHOP}}
    header: X-Shop-Hmac-Sha256
    encoding: base64
    id: "{{headers.x-shop-webhook-id}}"
    type: "shop.{{headers.x-shop-topic}}"
    subject: "{{data.id}}"
  unset: {{kind: github, scope: acme, secret: {{env: TEST_HOOK_NEVER_SET}}}}
"""
BASIC_PASSWORD = "am-basic-password-77"


def body_of(payload: Any) -> bytes:
    """A payload as a sender serialises it."""
    return json.dumps(payload, separators=(",", ":")).encode("utf-8")


# --- GitHub ------------------------------------------------------------------------------------

REPOSITORY = {
    "id": 582301447,
    "name": "web",
    "full_name": "acme/web",
    "private": True,
    "owner": {"login": "acme", "id": 9919, "type": "Organization", "html_url": "https://github.com/acme"},
    "html_url": "https://github.com/acme/web",
    "url": "https://api.github.com/repos/acme/web",
    "default_branch": "main",
}
SENDER = {"login": "dana", "id": 5821043, "type": "User", "html_url": "https://github.com/dana"}


def github_pull_request(action: str = "opened", number: int = 42, **extra: Any) -> dict[str, Any]:
    """A ``pull_request`` payload."""
    return {
        "action": action,
        "number": number,
        "pull_request": {
            "url": f"https://api.github.com/repos/acme/web/pulls/{number}",
            "html_url": f"https://github.com/acme/web/pull/{number}",
            "number": number,
            "state": "open",
            "title": "Retry webhook deliveries with backoff",
            "user": SENDER,
            "draft": False,
            "head": {"ref": "retry-backoff", "sha": "9c1e4b70d2a35f8e6b7c0d9a1e2f3b4c5d6e7f80"},
            "base": {"ref": "main", "sha": "1f4e9a0c2b7d8e3f5a6b9c0d1e2f3a4b5c6d7e8f"},
        },
        "repository": REPOSITORY,
        "sender": SENDER,
        **extra,
    }


def github_headers(
    body: bytes,
    *,
    event: str = "pull_request",
    delivery: str = "72d3162e-cc78-11e3-81ab-4c9367dc0958",
    secret: str | None = GITHUB_SECRET,
    content_type: str = "application/json",
) -> dict[str, str]:
    """The headers GitHub sends with ``body``, signed with ``secret`` (none: unsigned)."""
    headers = {
        "Content-Type": content_type,
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-GitHub-Hook-ID": "512730861",
        "User-Agent": "GitHub-Hookshot/4c4d7e1",
    }
    if secret is not None:
        digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        headers["X-Hub-Signature-256"] = f"sha256={digest}"
    return headers


# --- Slack -------------------------------------------------------------------------------------


def slack_message(
    event_id: str = "Ev08AB12CD34", *, text: str = "Is the deploy blocked?", **event: Any
) -> dict:
    """An ``event_callback`` holding a ``message`` event."""
    return {
        "token": "Jhj5dZrVaK7ZwHHjRyZWjbDl",
        "team_id": "T0ACME001",
        "api_app_id": "A0CONDUIT1",
        "event": {
            "type": "message",
            "channel": "C024BE91L",
            "user": "U061F7AUR",
            "text": text,
            "ts": "1767615300.000200",
            "event_ts": "1767615300.000200",
            "channel_type": "channel",
            **event,
        },
        "type": "event_callback",
        "event_id": event_id,
        "event_time": 1767615300,
        "authorizations": [{"team_id": "T0ACME001", "user_id": "U0CONDUIT1", "is_bot": True}],
    }


def slack_headers(body: bytes, *, timestamp: int, secret: str | None = SLACK_SECRET) -> dict[str, str]:
    """The headers Slack sends with ``body`` at ``timestamp``, signed with ``secret``."""
    headers = {
        "Content-Type": "application/json",
        "X-Slack-Request-Timestamp": str(timestamp),
        "User-Agent": "Slackbot 1.0 (+https://api.slack.com/robots)",
    }
    if secret is not None:
        base = b"v0:" + str(timestamp).encode() + b":" + body
        headers["X-Slack-Signature"] = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return headers


# --- Alertmanager ------------------------------------------------------------------------------


def alert(
    name: str, fingerprint: str, *, status: str = "firing", service: str = "payments", **extra: Any
) -> dict:
    """One alert of a webhook group."""
    return {
        "status": status,
        "labels": {"alertname": name, "service": service, "severity": "critical"},
        "annotations": {"summary": f"{name} on {service}"},
        "startsAt": "2026-01-05T12:20:00.123456789Z",
        "endsAt": "2026-01-05T12:31:00Z" if status == "resolved" else "0001-01-01T00:00:00Z",
        "generatorURL": "http://prometheus.acme.internal:9090/graph?g0.expr=up+%3D%3D+0",
        "fingerprint": fingerprint,
        **extra,
    }


def alert_group(*alerts: dict, status: str = "firing") -> dict[str, Any]:
    """An Alertmanager webhook payload (version 4) of ``alerts``."""
    return {
        "receiver": "conduit",
        "status": status,
        "alerts": list(alerts),
        "groupLabels": {"service": "payments"},
        "commonLabels": {"service": "payments"},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager.acme.internal:9093",
        "version": "4",
        "groupKey": '{}/{severity="critical"}:{service="payments"}',
        "truncatedAlerts": 0,
    }


def bearer(token: str) -> dict[str, str]:
    return {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}


def basic(user: str, password: str) -> dict[str, str]:
    credentials = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Content-Type": "application/json", "Authorization": f"Basic {credentials}"}


# --- a generic HMAC signer ---------------------------------------------------------------------


def shop_headers(
    body: bytes, *, topic: str = "orders/create", webhook_id: str = "b54557e4", secret: str = SHOP_SECRET
):
    digest = base64.b64encode(hmac.new(secret.encode(), body, hashlib.sha256).digest()).decode()
    return {
        "Content-Type": "application/json",
        "X-Shop-Hmac-Sha256": digest,
        "X-Shop-Topic": topic,
        "X-Shop-Webhook-Id": webhook_id,
    }
