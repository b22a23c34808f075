"""Events in the OpenAPI document: accepting Events (structured, binary or batch mode), the
CloudEvents webhook validation handshake, listing and reading them (as CloudEvents with Conduit's
fields beside them), and how one was routed or why it is not yet."""

from __future__ import annotations

from typing import Any

from conduit_site.api.openapi.common import (
    EMPTY_VALUE,
    EVENT_FORMAT_PARAMETER,
    EXTENSION_NAMES,
    ID,
    NO_NUL,
    NOT_RESERVED_ID,
    NOT_RESERVED_NAME,
    NOT_RESERVED_SOURCE,
    NULLABLE_TIMESTAMP,
    SCOPE_PATH,
    SEQ_PARAMETER,
    TIMESTAMP,
    WEBHOOK_PARAMETERS,
    json_content,
    nullable,
    ref,
    response_ref,
    webhook_handshake_answer,
)
from routing.records.filters import MAX_LIST_LIMIT, QUERY_MAX_LENGTH

# A time ago or a day, as infra.times.parse_time reads them besides ISO 8601.
MOMENT_WORDS: dict[str, Any] = {
    "type": "string",
    "pattern": "^(-[0-9]{1,6}[smhdw]|today|yesterday)$",
    "examples": ["-2h", "today"],
}

TAG: dict[str, str] = {
    "name": "events",
    "description": (
        "Accept Events in every CloudEvents HTTP mode (structured, binary, batch; the durable commit is "
        "the acknowledgement), answer the CloudEvents webhook validation handshake, list and read Events "
        "as CloudEvents, and see how one was routed or why it is not yet."
    ),
}
"""Every operation of ``PATHS`` has this tag."""

SCHEMAS: dict[str, Any] = {
    "CloudEventInput": {
        "allOf": [ref("EventAttributes")],
        "description": "A structured-mode CloudEvent 1.0 with the router's fields beside the attributes. "
        "Any other attribute is a CloudEvents extension attribute: its name is 1 to 20 lowercase "
        "letters a-z and digits 0-9, its value a string, an integer or a boolean. A null optional "
        "attribute is an absent one. Types and sources `core` and `core.*` are reserved for core Events. "
        "Without `scope` the Event takes the token's default scope, else the configuration's "
        "`default_scope`; without either it is refused (400).",
        "required": ["specversion", "id", "source", "type"],
    },
    # The attributes an offered Event may have (CloudEventInput, TracedEvent), written once.
    "EventAttributes": {
        "type": "object",
        "properties": {
            "specversion": {"type": "string", "const": "1.0"},
            "id": {
                **NO_NUL,
                "minLength": 1,
                "maxLength": 512,
                **NOT_RESERVED_ID,
                "description": "Unique per source.",
            },
            "source": {**NO_NUL, "minLength": 1, "maxLength": 512, **NOT_RESERVED_SOURCE},
            "type": {**NO_NUL, "minLength": 1, "maxLength": 255, **NOT_RESERVED_NAME},
            "subject": nullable({**NO_NUL, "maxLength": 512}),
            "time": NULLABLE_TIMESTAMP,
            "datacontenttype": nullable(
                {**NO_NUL, "default": "application/json", "minLength": 1, "maxLength": 255}
            ),
            "dataschema": nullable({**NO_NUL, "minLength": 1, "maxLength": 2048}),
            "data": ref("JsonValue"),
            "data_base64": {
                "type": ["string", "null"],
                "contentEncoding": "base64",
                "pattern": "^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$",
                "description": "Binary data as base64 text, instead of `data`.",
            },
            "scope": {
                **nullable(SCOPE_PATH),
                "description": "A scope path of the live configuration generation; by default the token's "
                "default scope, else the configuration's `default_scope`.",
            },
            "correlation": {
                "type": ["array", "null"],
                "maxItems": 64,
                "items": {**NO_NUL, "minLength": 1, "maxLength": 512},
                "description": "Correlation keys the sender chooses: the Event's explicit targets, each "
                "the Work owning it (its sender needs worklife.send_input: 403 otherwise; without keys of "
                "its own, its route's key templates choose them).",
            },
            "work_id": {
                **nullable(ID),
                "description": "An explicit target Work (its sender needs worklife.send_input: 403 otherwise).",
            },
            "execution_id": {
                **nullable(ID),
                "description": "An explicit target Execution (its sender needs worklife.send_input: 403 "
                "otherwise).",
            },
        },
        "propertyNames": EXTENSION_NAMES,
        "additionalProperties": ref("ExtensionValue"),
        "not": ref("DataAndDataBase64"),
    },
    "ExtensionValue": {
        "description": "An extension attribute's value: text, a 32-bit integer (CloudEvents Integer) or a "
        "boolean; null is an absent attribute.",
        "anyOf": [
            NO_NUL,
            {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1},
            {"type": ["boolean", "null"]},
        ],
    },
    "DataAndDataBase64": {
        "description": "An Event with both `data` and `data_base64` (a null one is absent): no Event has "
        "both.",
        "required": ["data", "data_base64"],
        "properties": {"data": {"not": {"type": "null"}}, "data_base64": {"type": "string"}},
    },
    "OptionalMoment": {
        "description": "A time a filter takes (RFC 3339, a time ago such as `-2h`, `today` or `yesterday`), "
        "or nothing (empty: any time).",
        "anyOf": [TIMESTAMP, MOMENT_WORDS, EMPTY_VALUE],
    },
    "OptionalId": {"description": "A record id, or nothing (empty: any).", "anyOf": [ID, EMPTY_VALUE]},
    # POST /api/events takes this under each of its media types, and answers AcceptedEventOrBatch:
    # named once, so a generated client defines each type once.
    "CloudEventOrBatch": {"oneOf": [ref("CloudEventInput"), ref("CloudEventBatch")]},
    "CloudEventBatch": {"type": "array", "items": ref("CloudEventInput"), "minItems": 1},
    # POST /api/trace takes this: an offered Event whose specversion and id may be left out.
    "TracedEvent": {
        "allOf": [ref("EventAttributes")],
        "description": "A structured-mode CloudEvent whose `specversion` and `id` may be left out; without "
        "`scope` it takes the token's default scope, else the traced generation's `default_scope`, as "
        "acceptance would.",
        "required": ["source", "type"],
    },
    "CloudEvent": {
        "type": "object",
        "description": "An accepted Event as a structured-mode CloudEvent 1.0 (JSON format), as the "
        "official SDKs read it: the attributes, `scope` and the other extension attributes flat beside them "
        "(lower-case letters and digits), and `data`, or `data_base64` for binary data. Optional "
        "attributes the Event has not are left out, as is the default `datacontenttype` "
        "(application/json).",
        "required": ["specversion", "id", "source", "type", "scope"],
        "properties": {
            "specversion": {"type": "string", "const": "1.0"},
            "id": {"type": "string"},
            "source": {"type": "string"},
            "type": {"type": "string"},
            "subject": {"type": "string"},
            "time": TIMESTAMP,
            "datacontenttype": {"type": "string"},
            "dataschema": {"type": "string"},
            "scope": {"type": "string", "description": "The scope path the Event belongs to (an extension)."},
            "data": {},
            "data_base64": {"type": "string", "contentEncoding": "base64"},
        },
        "propertyNames": {"pattern": "^(data_base64|[a-z0-9]+)$"},
        "additionalProperties": {"type": ["string", "integer", "boolean"]},
    },
    "ConduitFields": {
        "type": "object",
        "description": "What Conduit knows of an Event beyond its CloudEvent.",
        "required": [
            "seq",
            "correlation",
            "work_id",
            "execution_id",
            "parent_seq",
            "root_seq",
            "depth",
            "accepted_at",
            "accepted_by",
            "route_state",
            "routed_at",
            "unrouted_reason",
        ],
        "properties": {
            "seq": {"type": "integer", "description": "Place in the acceptance order."},
            "correlation": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Correlation keys: the Event's explicit targets.",
            },
            "work_id": {"type": ["integer", "null"], "description": "An explicit target Work."},
            "execution_id": {"type": ["integer", "null"], "description": "An explicit target Execution."},
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
    "Event": {
        "type": "object",
        "description": "An accepted Event: its CloudEvent, and Conduit's own fields beside it (never in it).",
        "required": ["event", "conduit"],
        "properties": {"event": ref("CloudEvent"), "conduit": ref("ConduitFields")},
    },
    "EventWithRoute": {
        "type": "object",
        "description": "An Event with its route, as `events list --json` prints it.",
        "required": ["event", "conduit", "route"],
        "properties": {
            "event": ref("CloudEvent"),
            "conduit": ref("ConduitFields"),
            "route": ref("EventRoute"),
        },
    },
    "EventPage": {
        "type": "object",
        "required": ["events", "next_after"],
        "properties": {
            "events": {"type": "array", "items": ref("EventWithRoute")},
            "next_after": {
                "type": ["integer", "null"],
                "description": "Pass it as `after` for the next page; null on the last one.",
            },
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
                    "required": ["created", "event", "conduit"],
                    "properties": {
                        "created": {"type": "boolean"},
                        "event": ref("CloudEvent"),
                        "conduit": ref("ConduitFields"),
                    },
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
                    "conflicting_identity",
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
        "description": "The RouteRecord of a settled Event: the one decision about it.",
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
                "description": "Each route that declined the Event, in route order.",
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

# An RFC 3339 time as a header's text: years 0001 to 9999, days to the 28th (any month has them).
HEADER_TIMESTAMP = {
    "type": "string",
    "pattern": "^(000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])"
    "T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-](0[0-9]|1[0-9]|2[0-3]):[0-5][0-9])$",
}

# The ce-* headers of binary mode: name, description, schema (the attribute's, as a header).
BINARY_HEADERS = (
    (
        "specversion",
        "`1.0`. Any ce-* header makes a request binary mode unless its Content-Type is a CloudEvents one.",
        {"type": "string", "enum": ["1.0"]},
    ),
    (
        "id",
        "The Event's id (unique per source).",
        {"type": "string", "minLength": 1, "maxLength": 512, **NOT_RESERVED_ID},
    ),
    (
        "source",
        "The Event's source.",
        {"type": "string", "minLength": 1, "maxLength": 512, **NOT_RESERVED_SOURCE},
    ),
    ("type", "The Event's type.", {"type": "string", "minLength": 1, "maxLength": 255, **NOT_RESERVED_NAME}),
    ("subject", "The Event's subject.", {"type": "string", "maxLength": 512}),
    # A pattern, not format date-time: generated clients take no date-time header
    # (openapi-python-client leaves the whole operation out).
    ("time", "An RFC 3339 timestamp, with an offset.", HEADER_TIMESTAMP),
    ("scope", "The scope path (else the token's default scope, else the configuration's).", SCOPE_PATH),
)

# A moment as the list filters read it (infra.times.parse_time).


# A yes or no a filter takes, in any case.
FLAG: dict[str, Any] = {"type": "string", "pattern": "^([tT][rR][uU][eE]|[fF][aA][lL][sS][eE]|0|1)?$"}


def _list_parameter(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": description, "schema": schema}


LIST_PARAMETERS: list[dict[str, Any]] = [
    _list_parameter(
        "query",
        "The start of an envelope id or a subject (a whole one too), or a seq (digits, `#` optional).",
        {**NO_NUL, "maxLength": QUERY_MAX_LENGTH},
    ),
    _list_parameter(
        "data",
        "Text the Event's data contains, as JSON text (case-sensitive), among the newest 10,000 Events: "
        "their data is not indexed, so the search reads at most that many.",
        {**NO_NUL, "maxLength": QUERY_MAX_LENGTH},
    ),
    _list_parameter("scope", "Only Events of this scope path.", {**NO_NUL, "maxLength": 255}),
    _list_parameter(
        "subtree",
        "With `scope`: also every scope under it (`true` or `1`; `false`, `0` or empty: not).",
        FLAG,
    ),
    _list_parameter(
        "type",
        "An Event type, or a glob (`*` any characters, `?` one; case-sensitive): `github.*`.",
        {**NO_NUL, "maxLength": 255},
    ),
    _list_parameter(
        "state",
        "Only Events in this route state.",
        {"type": "string", "enum": ["", "unrouted", "routed", "skipped", "failed"]},
    ),
    _list_parameter(
        "policy",
        "Only Events whose route record has this policy (unmatched, drop, start, queue…).",
        {**NO_NUL, "maxLength": 32},
    ),
    _list_parameter(
        "work",
        "Only Events routed on this Work or naming it as their target (empty: any).",
        ref("OptionalId"),
    ),
    _list_parameter(
        "since",
        "Only Events accepted at or after this time: ISO 8601 (UTC without an offset), a time ago "
        "(`-10m`, `-2h`, `-3d`) or `today`/`yesterday` (midnight UTC); empty: any.",
        ref("OptionalMoment"),
    ),
    _list_parameter(
        "until",
        "Only Events accepted before this time, written as `since` (empty: any).",
        ref("OptionalMoment"),
    ),
    _list_parameter(
        "limit",
        "Events a page (default 50, also when empty).",
        {"anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_LIST_LIMIT}, EMPTY_VALUE]},
    ),
    _list_parameter(
        "after", "The `next_after` of the previous page (empty: the first page).", ref("OptionalId")
    ),
    _list_parameter("oldest", "Oldest first (`true` or `1`); the default is newest first.", FLAG),
    EVENT_FORMAT_PARAMETER,
]

PATHS: dict[str, Any] = {
    "/api/events": {
        "get": {
            "operationId": "events_list",
            "summary": "List Events",
            "description": "Events newest first (`oldest`: oldest first), filtered as the console's Events "
            "list and `manage.py events list` filter them, each with its route, paged by keyset: pass "
            "`next_after` as `after` for the next page. With `format=cloudevent` the page is a CloudEvents "
            "batch (`application/cloudevents-batch+json`) and the next page's `after` is in the "
            "`Conduit-Next-After` header.",
            "parameters": LIST_PARAMETERS,
            "responses": {
                "200": {
                    "description": "A page of Events.",
                    "headers": {
                        "Conduit-Next-After": {
                            "schema": {"type": "string"},
                            "description": "With format=cloudevent: `after` for the next page (absent on the "
                            "last).",
                        }
                    },
                    "content": {
                        "application/json": {"schema": ref("EventPage")},
                        "application/cloudevents-batch+json": {
                            "schema": {"type": "array", "items": ref("CloudEvent")}
                        },
                    },
                },
                "400": response_ref("Invalid"),
                "401": response_ref("Unauthorized"),
                "405": response_ref("MethodNotAllowed"),
            },
        },
        "post": {
            "operationId": "events_accept",
            "summary": "Accept an Event, or a batch of Events",
            "description": "Every mode of the CloudEvents HTTP binding. Structured mode "
            "(`application/cloudevents+json`, or `application/json`): a JSON object is one Event. Batch mode "
            "(`application/cloudevents-batch+json`, or a JSON array as `application/json`): validated whole "
            "and accepted in one transaction (all or nothing). Binary mode (any other Content-Type, or "
            "`application/json`, with `ce-*` headers): the attributes are the `ce-*` headers "
            "(percent-encoded), the Content-Type is the `datacontenttype` and the body the data: JSON "
            "types are parsed, other data is kept as text, or as `data_base64` when it is not UTF-8; the "
            "same checks apply. The durable commit is the acknowledgement. The same (source, id) accepted "
            "again with the same body returns the first Event and stores nothing (200); with another body "
            "it is refused (409) with both bodies' digests. An Event naming a Work (`work_id`, `execution_id`) "
            "or choosing its correlation keys (`correlation`, not empty) needs worklife.send_input too (a narrowed token: the `send` scope): without it the request is "
            "refused (403 `forbidden`, with `field` and `permission`) and nothing is stored.",
            "parameters": [
                {
                    "name": f"ce-{name}",
                    "in": "header",
                    "required": False,
                    "description": f"Binary mode: {description}",
                    "schema": schema,
                }
                for name, description, schema in BINARY_HEADERS
            ],
            "requestBody": {
                "required": True,
                # One media type: with several, openapi-python-client's generated call picks the
                # body's type by isinstance over list[...] types, which Python refuses, so no
                # Event could be sent through it. The server also takes application/json (the
                # same bodies) and application/cloudevents-batch+json (a batch), as the
                # description says.
                "description": "One CloudEvent (structured mode) or a JSON array of them (a batch). The same "
                "bodies may be sent as `application/json`, and a batch as `application/cloudevents-batch+json`; "
                "binary mode sends the data as the body with the ce-* headers.",
                "content": {
                    "application/cloudevents+json": {"schema": ref("CloudEventOrBatch")},
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
        },
        "options": {
            "operationId": "events_webhook_validation",
            "summary": "The CloudEvents webhook validation handshake",
            "description": "Abuse protection of the CloudEvents Webhook specification: a sender asks with "
            "`WebHook-Request-Origin` whether it may deliver; the answer allows its origin, at any rate. "
            "No token is needed (senders send none) and nothing is read or stored: accepting Events still "
            "needs one.",
            "security": [],
            "parameters": WEBHOOK_PARAMETERS,
            "responses": {
                "200": webhook_handshake_answer("GET, POST, OPTIONS"),
                "400": response_ref("Invalid"),
            },
        },
    },
    "/api/events/{seq}": {
        "get": {
            "operationId": "event_detail",
            "summary": "An Event by its seq",
            "description": 'The Event as `{"event": <CloudEvent>, "conduit": {...}}`, or with '
            "`format=cloudevent` the bare structured-mode CloudEvent (`application/cloudevents+json`), which "
            "the official CloudEvents SDKs read as it is.",
            "parameters": [SEQ_PARAMETER, EVENT_FORMAT_PARAMETER],
            "responses": {
                "200": {
                    "description": "The Event.",
                    "content": {
                        "application/json": {"schema": ref("Event")},
                        "application/cloudevents+json": {"schema": ref("CloudEvent")},
                    },
                },
                "400": response_ref("Invalid"),
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
