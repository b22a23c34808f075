"""Events in the OpenAPI document: accepting Events (one or a batch), reading one, and how it
was routed or why it is not yet."""

from __future__ import annotations

from typing import Any

from conduit_site.api.openapi.common import (
    ID,
    NULLABLE_TIMESTAMP,
    SEQ_PARAMETER,
    TIMESTAMP,
    json_content,
    ref,
    response_ref,
)

TAG: dict[str, str] = {
    "name": "events",
    "description": (
        "Accept Events, one or a batch (the durable commit is the acknowledgement), read one by its "
        "seq, and see how it was routed or why it is not yet."
    ),
}
"""Every operation of ``PATHS`` has this tag."""

SCHEMAS: dict[str, Any] = {
    "CloudEventInput": {
        "type": "object",
        "description": "A structured-mode CloudEvent 1.0 with the router's fields beside the attributes. "
        "Any other attribute is a CloudEvents extension attribute: its name is 1 to 20 lowercase "
        "letters a-z and digits 0-9, its value a string, an integer or a boolean; it is kept in "
        "`extensions`. A null optional attribute is an absent one. Types and sources `core` and "
        "`core.*` are reserved for core Events.",
        "required": ["specversion", "id", "source", "type", "scope"],
        "properties": {
            "specversion": {"type": "string", "const": "1.0"},
            "id": {"type": "string", "minLength": 1, "maxLength": 512, "description": "Unique per source."},
            "source": {"type": "string", "minLength": 1, "maxLength": 512},
            "type": {"type": "string", "minLength": 1, "maxLength": 255},
            "subject": {"type": "string", "maxLength": 512},
            "time": TIMESTAMP,
            "datacontenttype": {"type": "string", "default": "application/json", "maxLength": 255},
            "dataschema": {"type": "string", "description": "Kept in `extensions`."},
            "data": {"description": "Any JSON value (finite numbers, no NUL characters)."},
            "scope": {
                "type": "string",
                "maxLength": 255,
                "description": "A scope path of the live configuration generation.",
            },
            "correlation": {
                "type": "array",
                "maxItems": 64,
                "items": {"type": "string", "minLength": 1, "maxLength": 512},
                "description": "Correlation keys: the Event's explicit targets.",
            },
            "work_id": {**ID, "description": "An explicit target Work."},
            "execution_id": {**ID, "description": "An explicit target Execution."},
        },
        "additionalProperties": {"type": ["string", "integer", "boolean"]},
    },
    # POST /api/events takes this under each of its media types, and answers AcceptedEventOrBatch:
    # named once, so a generated client defines each type once.
    "CloudEventOrBatch": {
        "oneOf": [ref("CloudEventInput"), {"type": "array", "items": ref("CloudEventInput")}]
    },
    "Event": {
        "type": "object",
        "description": "An accepted Event.",
        "required": [
            "seq",
            "specversion",
            "id",
            "source",
            "type",
            "scope",
            "accepted_at",
            "route_state",
        ],
        "properties": {
            "seq": {"type": "integer", "description": "Place in the acceptance order."},
            "specversion": {"type": "string"},
            "id": {"type": "string"},
            "source": {"type": "string"},
            "type": {"type": "string"},
            "subject": {"type": "string"},
            "time": NULLABLE_TIMESTAMP,
            "datacontenttype": {"type": "string"},
            "data": {},
            "extensions": {
                "type": "object",
                "additionalProperties": {"type": ["string", "integer", "boolean"]},
            },
            "scope": {"type": "string"},
            "correlation": {"type": "array", "items": {"type": "string"}},
            "work_id": {"type": ["integer", "null"]},
            "execution_id": {"type": ["integer", "null"]},
            "parent_seq": {"type": ["integer", "null"], "description": "The causal parent, when derived."},
            "root_seq": {
                "type": "integer",
                "description": "The root of the causal chain (itself for a root).",
            },
            "depth": {"type": "integer", "minimum": 0},
            "accepted_at": TIMESTAMP,
            "accepted_by": {"type": "string"},
            "route_state": {"type": "string", "enum": ["unrouted", "routed", "skipped", "failed"]},
            "routed_at": NULLABLE_TIMESTAMP,
            "unrouted_reason": {"type": "string", "description": "Why an unrouted Event is still unrouted."},
        },
    },
    "AcceptedBatch": {
        "type": "object",
        "required": ["results"],
        "properties": {
            "results": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["created", "event"],
                    "properties": {"created": {"type": "boolean"}, "event": ref("Event")},
                },
            }
        },
    },
    "AcceptedEventOrBatch": {"oneOf": [ref("Event"), ref("AcceptedBatch")]},
    "Refusal": {
        "type": "object",
        "description": "A route that declined the Event, with the reason its handler gave (one line, at most "
        "500 bytes).",
        "required": ["route", "reason"],
        "properties": {"route": {"type": "string"}, "reason": {"type": "string"}},
    },
    "RouteFailure": {
        "type": "object",
        "description": "A route failure counted on an unrouted Event (retried ones back off: 2 s, doubling, "
        "at most 5 min).",
        "required": ["code", "route", "error", "count", "first_failed_at", "last_failed_at", "backoff_until"],
        "properties": {
            "code": {
                "type": "string",
                "enum": [
                    "handler_missing",
                    "binding_invalid",
                    "policy_invalid",
                    "handler_invalid",
                    "handler_failed",
                    "handler_timeout",
                    "handler_panic",
                ],
            },
            "route": {"type": "string", "description": "The route that failed (empty when unknown)."},
            "error": {"type": "string", "description": "The error text (a panic's carries its stack)."},
            "count": {"type": "integer", "minimum": 1, "description": "Failures so far."},
            "first_failed_at": NULLABLE_TIMESTAMP,
            "last_failed_at": NULLABLE_TIMESTAMP,
            "backoff_until": {
                **NULLABLE_TIMESTAMP,
                "description": "No retry before this time; null when the failure is not retried.",
            },
            "generation": {"type": "string", "description": "The configuration generation that failed."},
        },
    },
    "SettledRoute": {
        "type": "object",
        "description": "The RouteRecord of a settled Event: the one decision about it (R27).",
        "required": [
            "event",
            "state",
            "work",
            "route",
            "binding",
            "generation",
            "policy",
            "reason",
            "disposition",
            "refusals",
            "error",
            "attempts",
            "decided_at",
        ],
        "properties": {
            "event": {"type": "integer", "description": "The Event's seq."},
            "state": {"type": "string", "enum": ["routed", "skipped", "failed"]},
            "work": {"type": ["integer", "null"], "description": "The Work it was routed on, if any."},
            "route": {"type": "string", "description": "The route that selected it (empty when none did)."},
            "binding": {"type": "string"},
            "generation": {"type": "string", "description": "The configuration generation that decided."},
            "policy": {
                "type": "string",
                "description": "The effective policy: start, queue, inject, interrupt, held, drop, wake, "
                "unmatched, skipped, failed…",
            },
            "reason": {
                "type": "string",
                "description": "Why: the handler's reason, no_match, addressed, terminal, a route error code…",
            },
            "disposition": {"type": "string", "enum": ["routed", "skipped", "failed"]},
            "refusals": {
                "type": "array",
                "items": ref("Refusal"),
                "description": "Each route that declined the Event, in route order (R28).",
            },
            "error": {"type": "string", "description": "The route error of a failed (dead-lettered) Event."},
            "attempts": {"type": "integer", "minimum": 0, "description": "Failures before giving up."},
            "decided_at": TIMESTAMP,
        },
    },
    "UnroutedRoute": {
        "type": "object",
        "description": "Why an Event is not routed yet.",
        "required": ["event", "state", "reason", "waiting_on", "retry_at", "failure"],
        "properties": {
            "event": {"type": "integer", "description": "The Event's seq."},
            "state": {"type": "string", "const": "unrouted"},
            "reason": {
                "type": "string",
                "description": "Why it is unrouted (empty: the router has not looked at it yet).",
            },
            "waiting_on": {
                "type": ["integer", "null"],
                "description": "The seq of the earlier unrouted Event with the same target it waits behind.",
            },
            "retry_at": {**NULLABLE_TIMESTAMP, "description": "When the router looks at it again."},
            "failure": {"oneOf": [ref("RouteFailure"), {"type": "null"}]},
        },
    },
    "EventRoute": {
        "description": "An Event's route, by `state`: a settled Event's RouteRecord, or why an Event is "
        "unrouted.",
        "oneOf": [ref("SettledRoute"), ref("UnroutedRoute")],
        "discriminator": {
            "propertyName": "state",
            "mapping": {
                "routed": "#/components/schemas/SettledRoute",
                "skipped": "#/components/schemas/SettledRoute",
                "failed": "#/components/schemas/SettledRoute",
                "unrouted": "#/components/schemas/UnroutedRoute",
            },
        },
    },
}

RESPONSES: dict[str, Any] = {}

PATHS: dict[str, Any] = {
    "/api/events": {
        "post": {
            "operationId": "events_accept",
            "summary": "Accept an Event, or a batch of Events",
            "description": "A JSON object is one Event; a JSON array is a batch, validated whole and accepted "
            "in one transaction (all or nothing). The durable commit is the acknowledgement. The same "
            "(source, id) accepted again with the same body returns the first Event and stores nothing "
            "(200); with another body it is refused (409) with both bodies' digests.",
            "requestBody": {
                "required": True,
                "content": {
                    media: {"schema": ref("CloudEventOrBatch")}
                    for media in (
                        "application/cloudevents+json",
                        "application/json",
                        "application/cloudevents-batch+json",
                    )
                },
            },
            "responses": {
                "201": {
                    "description": "Accepted: a new Event (or a batch with at least one new Event).",
                    "headers": {"Location": {"schema": {"type": "string"}, "description": "The new Event."}},
                    "content": json_content(ref("AcceptedEventOrBatch")),
                },
                "200": {
                    "description": "A duplicate: the Event (or every Event of the batch) was accepted before.",
                    "content": json_content(ref("AcceptedEventOrBatch")),
                },
                "400": response_ref("Invalid"),
                "401": response_ref("Unauthorized"),
                "405": response_ref("MethodNotAllowed"),
                "409": {
                    "description": "A conflicting duplicate (error conflicting_duplicate): an Event with "
                    "this (source, id) was accepted with another body; `seq` names it and `digests` holds "
                    "both bodies' digests (`accepted`, `offered`). Nothing is stored.",
                    "content": json_content(ref("Error")),
                },
                "413": response_ref("TooLarge"),
                "415": response_ref("UnsupportedMediaType"),
            },
        }
    },
    "/api/events/{seq}": {
        "get": {
            "operationId": "event_detail",
            "summary": "An Event by its seq",
            "parameters": [SEQ_PARAMETER],
            "responses": {
                "200": {"description": "The Event.", "content": json_content(ref("Event"))},
                "401": response_ref("Unauthorized"),
                "404": response_ref("NotFound"),
                "405": response_ref("MethodNotAllowed"),
            },
        }
    },
    "/api/events/{seq}/route": {
        "get": {
            "operationId": "event_route",
            "summary": "How an Event was routed, or why it is not yet",
            "description": "A settled Event (state routed, skipped or failed): its RouteRecord with the "
            "policy, reason, route, binding, generation, Work, refusals (each route that declined it, in "
            "route order), error and attempts. An unrouted Event: why, the earlier Event it waits behind, "
            "when it is looked at again and the failure counted on it.",
            "parameters": [SEQ_PARAMETER],
            "responses": {
                "200": {"description": "The Event's route.", "content": json_content(ref("EventRoute"))},
                "401": response_ref("Unauthorized"),
                "404": response_ref("NotFound"),
                "405": response_ref("MethodNotAllowed"),
            },
        }
    },
}
