"""GitHub webhooks (``kind: github``).

GitHub signs each delivery with the webhook's secret: ``X-Hub-Signature-256: sha256=<hex>``,
the HMAC-SHA256 of the raw body. It names the event in ``X-GitHub-Event`` and the delivery in
``X-GitHub-Delivery`` (the same on a redelivery). The body is JSON, or with the content type
``application/x-www-form-urlencoded`` a form whose ``payload`` field holds the JSON (the
signature covers the form as sent).

The CloudEvent: ``id`` the delivery id; ``type`` ``github.<event>.<action>`` (``github.<event>``
for events without an action, such as ``push``); ``source`` the repository's ``html_url`` (else
the organization's, else the sender's); ``subject`` what the event is about (``pull/42``,
``issues/7``, ``refs/heads/main``…, see :func:`subject_of`); ``data`` the payload as sent. The
``ping`` GitHub sends when a webhook is created is answered and not stored.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from routing.config.receivers import DECLARED_KINDS, ReceiverSpec
from routing.receivers.mapping import Mapped, cloudevent, dig, invalid, json_object, templated, text_at
from routing.receivers.spec import Kind
from routing.receivers.verify import Delivery, check_hmac

SIGNATURE_HEADER = "X-Hub-Signature-256"
EVENT_HEADER = "X-GitHub-Event"
DELIVERY_HEADER = "X-GitHub-Delivery"
_EVENT_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_ACTION = re.compile(r"^[A-Za-z0-9_.-]+$")

# The subject of each event: a path below the repository, from the payload.
_NUMBERED = {
    "pull_request": ("pull", ("pull_request", "number")),
    "pull_request_review": ("pull", ("pull_request", "number")),
    "pull_request_review_comment": ("pull", ("pull_request", "number")),
    "pull_request_review_thread": ("pull", ("pull_request", "number")),
    "issues": ("issues", ("issue", "number")),
    "deployment": ("deployments", ("deployment", "id")),
    "deployment_status": ("deployments", ("deployment", "id")),
    "check_run": ("check-runs", ("check_run", "id")),
    "check_suite": ("check-suites", ("check_suite", "id")),
    "workflow_run": ("actions/runs", ("workflow_run", "id")),
    "workflow_job": ("actions/jobs", ("workflow_job", "id")),
    "release": ("releases", ("release", "tag_name")),
    "discussion": ("discussions", ("discussion", "number")),
    "discussion_comment": ("discussions", ("discussion", "number")),
    "milestone": ("milestones", ("milestone", "number")),
}


def verify(
    spec: ReceiverSpec, delivery: Delivery, secret: bytes, *, now: datetime, replay_window: bool = True
) -> tuple[str, ...]:
    """Check ``X-Hub-Signature-256`` over the raw body."""
    check_hmac(
        delivery,
        secret,
        header=SIGNATURE_HEADER,
        prefix="sha256=",
        how="set the webhook's Secret in GitHub to the receiver's secret",
    )
    return ()


def subject_of(event: str, payload: dict[str, Any]) -> str:
    """What a GitHub event is about, as a path below its repository: ``pull/42`` (pull
    requests, their reviews and comments, and comments on a pull request's conversation),
    ``issues/7``, ``refs/heads/main`` (``push``, ``create``, ``delete``), ``deployments/9``,
    ``releases/v1.2``, ``actions/runs/3``…; ``""`` for other events."""
    if event == "issue_comment":
        number = text_at(payload, "issue", "number")
        if not number:
            return ""
        return f"{'pull' if dig(payload, 'issue', 'pull_request') is not None else 'issues'}/{number}"
    if event in ("push", "create", "delete"):
        ref = text_at(payload, "ref")
        if event != "push" and ref and not ref.startswith("refs/"):
            kind = text_at(payload, "ref_type")
            ref = f"refs/{'tags' if kind == 'tag' else 'heads'}/{ref}"
        return ref
    if event in _NUMBERED:
        prefix, path = _NUMBERED[event]
        value = text_at(payload, *path)
        return f"{prefix}/{value}" if value else ""
    return ""


def source_of(payload: dict[str, Any]) -> str:
    """The URL of what sent the event: the repository, else the organization, else the sender."""
    for path in (("repository", "html_url"), ("organization", "html_url"), ("sender", "html_url")):
        url = text_at(payload, *path)
        if url:
            return url
    login = text_at(payload, "organization", "login")
    return f"https://github.com/{login}" if login else "https://github.com"


def map_delivery(spec: ReceiverSpec, delivery: Delivery) -> Mapped:
    """The delivery as one CloudEvent, or the answer to a ``ping``."""
    event = (delivery.header(EVENT_HEADER) or "").strip()
    if not event:
        raise invalid(f"the {EVENT_HEADER} header is missing", field=EVENT_HEADER)
    if not _EVENT_NAME.match(event):
        raise invalid(
            f"the {EVENT_HEADER} header {event[:64]!r} is not a GitHub event name", field=EVENT_HEADER
        )
    delivery_id = (delivery.header(DELIVERY_HEADER) or "").strip()
    if not delivery_id:
        raise invalid(f"the {DELIVERY_HEADER} header is missing", field=DELIVERY_HEADER)
    payload = json_object(delivery, sender="GitHub", form_field="payload")
    if event == "ping":
        return Mapped(
            reply={
                "status": "ping",
                "receiver": spec.name,
                "message": f"receiver {spec.name} verified the ping of hook {text_at(payload, 'hook_id') or '?'}",
            }
        )
    action = payload.get("action")
    event_type = (
        f"github.{event}.{action}" if isinstance(action, str) and _ACTION.match(action) else f"github.{event}"
    )
    mapped = cloudevent(
        id=delivery_id,
        source=source_of(payload),
        type=event_type,
        subject=subject_of(event, payload),
        scope=spec.scope,
        data=payload,
    )
    return Mapped(events=(templated(mapped, spec.settings, delivery=delivery, keys=KIND.templates),))


KIND = Kind(
    declared=DECLARED_KINDS["github"],
    summary="GitHub webhooks: X-Hub-Signature-256 (HMAC-SHA256 of the body); JSON or form-encoded",
    verify=verify,
    map=map_delivery,
)
