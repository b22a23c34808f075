"""Receivers in the OpenAPI document: ``POST /hooks/{name}``, where real senders deliver their
webhooks. No API token: each receiver checks its sender's signature (docs/receivers.md)."""

from __future__ import annotations

from typing import Any

from conduit_site.api.openapi.common import (
    WEBHOOK_PARAMETERS,
    json_content,
    parameter_ref,
    ref,
    response_ref,
    webhook_handshake_answer,
)

TAG: dict[str, str] = {
    "name": "hooks",
    "description": (
        "Webhooks of real senders (GitHub, Slack, Alertmanager, CloudEvents senders, any HMAC signer), "
        "each received by a receiver of the live configuration, which checks the sender's signature instead "
        "of an API token and maps the delivery to Events (docs/receivers.md)."
    ),
}
"""Every operation of ``PATHS`` has this tag."""

SCHEMAS: dict[str, Any] = {
    "HookEvent": {
        "type": "object",
        "description": "An Event a delivery was accepted as.",
        "required": ["seq", "id", "source", "type", "subject", "created"],
        "properties": {
            "seq": {
                "type": "integer",
                "description": "Its place in the acceptance order (GET /api/events/{seq}).",
            },
            "id": {"type": "string"},
            "source": {"type": "string"},
            "type": {"type": "string"},
            "subject": {"type": "string"},
            "created": {
                "type": "boolean",
                "description": "False: the duplicate of an Event accepted before.",
            },
        },
    },
    "HookAccepted": {
        "type": "object",
        "description": "The Events a delivery was accepted as, in order (one per alert of an Alertmanager group).",
        "required": ["receiver", "status", "events"],
        "properties": {
            "receiver": {"type": "string"},
            "status": {
                "type": "string",
                "enum": ["accepted", "duplicate"],
                "description": "duplicate: every Event was accepted before (a redelivery, a retry).",
            },
            "events": {"type": "array", "items": ref("HookEvent")},
        },
    },
    "HookReply": {
        "type": "object",
        "description": "What a handshake gets instead of Events: Slack's url_verification its `challenge`; "
        "GitHub's ping and Slack's app_rate_limited a `status` (ping, noted) and a `message`. Nothing is stored.",
        "properties": {
            "challenge": {"type": "string"},
            "status": {"type": "string"},
            "receiver": {"type": "string"},
            "message": {"type": "string"},
        },
    },
    "HookAnswer": {"oneOf": [ref("HookAccepted"), ref("HookReply")]},
}

RESPONSES: dict[str, Any] = {
    "HookRefused": {
        "description": "The sender could not prove who it is (error signature_missing, signature_invalid, or "
        "timestamp_stale for a Slack request signed more than 5 minutes away from now). Counted for the "
        "receiver; nothing is stored.",
        "headers": {
            "WWW-Authenticate": {
                "schema": {"type": "string"},
                "description": "For a receiver checking the Authorization header: Bearer or Basic.",
            }
        },
        "content": json_content(ref("Error")),
    },
}

NAME_PARAMETER = parameter_ref("receiver_name")

PATHS: dict[str, Any] = {
    "/hooks/{name}": {
        "post": {
            "operationId": "hook_receive",
            "summary": "Receive a sender's webhook",
            "description": "The body exactly as the sender sends it, with the sender's headers. The receiver "
            "checks the signature over the raw body before reading it: GitHub's X-Hub-Signature-256 (with "
            "X-GitHub-Event and X-GitHub-Delivery), Slack's X-Slack-Signature and X-Slack-Request-Timestamp, "
            "an Authorization header (Bearer or Basic) for Alertmanager and CloudEvents senders, or the HMAC "
            "header a generic-hmac receiver declares. The delivery is mapped to CloudEvents in the receiver's "
            "scope and accepted (accepted_by `receiver:<name>`); a redelivery is a duplicate.",
            "security": [],
            "parameters": [NAME_PARAMETER],
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {"schema": {}},
                    "application/cloudevents+json": {"schema": {"type": "object"}},
                    "application/x-www-form-urlencoded": {
                        "schema": {
                            "type": "object",
                            "properties": {
                                "payload": {"type": "string", "description": "GitHub's JSON payload."}
                            },
                        }
                    },
                },
            },
            "responses": {
                "201": {
                    "description": "Accepted: at least one new Event.",
                    "headers": {
                        "Location": {
                            "schema": {"type": "string"},
                            "description": "The Event, when there is one.",
                        }
                    },
                    "content": json_content(ref("HookAccepted")),
                },
                "200": {
                    "description": "A redelivery (every Event accepted before), or a handshake answered.",
                    "content": json_content(ref("HookAnswer")),
                },
                "400": response_ref("Invalid"),
                "401": response_ref("HookRefused"),
                "403": {
                    "description": "An Event of the delivery names its own targets, which a receiver's "
                    "sender may not (error forbidden, with `field` and `permission`): a Work (`work_id`, "
                    "`execution_id`) or correlation keys (`correlation`; its routes choose its keys). "
                    "Counted for the receiver; nothing is stored.",
                    "content": json_content(ref("Error")),
                },
                "404": response_ref("NotFound"),
                "405": response_ref("MethodNotAllowed"),
                "409": {
                    "description": "A delivery id accepted before with another body (conflicting_duplicate).",
                    "content": json_content(ref("Error")),
                },
                "413": response_ref("TooLarge"),
                "415": response_ref("UnsupportedMediaType"),
                "429": response_ref("TooManyRequests"),
                "503": {
                    "description": "The receiver's secret cannot be read by the server (secret_unavailable): "
                    "its environment variable is not set, or its file is missing. Nothing is stored.",
                    "content": json_content(ref("Error")),
                },
            },
        },
        "options": {
            "operationId": "hook_webhook_validation",
            "summary": "The CloudEvents webhook validation handshake of a cloudevents receiver",
            "description": "Abuse protection of the CloudEvents Webhook specification, for a receiver of kind "
            "`cloudevents`: a sender asks with `WebHook-Request-Origin` whether it may deliver; the answer "
            "allows its origin, at any rate. Nothing is read, counted or stored. Receivers of other kinds "
            "answer 405 (their senders shake hands by POST: GitHub's ping, Slack's challenge).",
            "security": [],
            "parameters": [NAME_PARAMETER, *WEBHOOK_PARAMETERS],
            "responses": {
                "200": webhook_handshake_answer("POST, OPTIONS"),
                "400": response_ref("Invalid"),
                "404": response_ref("NotFound"),
                "405": response_ref("MethodNotAllowed"),
            },
        },
    },
}
