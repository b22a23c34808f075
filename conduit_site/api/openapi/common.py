"""What the resources of the OpenAPI document share: the helpers that build references, the
path parameters naming records, timestamps, the error schema, the error responses and the
``info`` block.

The one import of ``MAX_ID`` for the whole document is here; the other modules take ``ID``.
"""

from __future__ import annotations

from typing import Any

from causal.checks import RESERVED_FAMILY, RESERVED_ID_PREFIXES, RESERVED_SOURCE_PREFIXES
from infra.converters import MAX_ID
from routing.config.validate import NAME_PATTERN, SCOPE_PATH_PATTERN

API_VERSION = "1.0.0"


def ref(name: str) -> dict[str, str]:
    """A reference to the component schema ``name``."""
    return {"$ref": f"#/components/schemas/{name}"}


def response_ref(name: str) -> dict[str, str]:
    """A reference to the component response ``name``."""
    return {"$ref": f"#/components/responses/{name}"}


def parameter_ref(name: str) -> dict[str, str]:
    """A reference to the component parameter ``name``."""
    return {"$ref": f"#/components/parameters/{name}"}


def json_content(schema: dict[str, Any]) -> dict[str, Any]:
    """A ``content`` map: ``schema`` as JSON."""
    return {"application/json": {"schema": schema}}


ID: dict[str, Any] = {"type": "integer", "minimum": 1, "maximum": MAX_ID}
"""A record id, as the URLconf's ``id`` converter accepts it."""


def _any_case(text: str) -> str:
    """A pattern matching ``text`` in any case (``core`` -> ``[cC][oO][rR][eE]``)."""
    folds = {"k": "\u212a", "s": "\u017f"}  # the Kelvin sign and the long s casefold to k and s
    return "".join(
        f"[{c.lower()}{c.upper()}{folds.get(c.lower(), '')}]" if c.isalpha() else "\\." if c == "." else c
        for c in text
    )


_RESERVED_FAMILY = f"{_any_case(RESERVED_FAMILY)}(\\.|$)"
NOT_RESERVED_NAME: dict[str, Any] = {"not": {"pattern": f"^{_RESERVED_FAMILY}"}}
"""Not a type of the ``core`` family (in any case), which only core code may use."""
NOT_RESERVED_SOURCE: dict[str, Any] = {
    "not": {"pattern": "^(" + "|".join([_RESERVED_FAMILY, *map(_any_case, RESERVED_SOURCE_PREFIXES)]) + ")"}
}
"""Not a source of the ``core`` family or one the system writes for itself (``conduit.work/``)."""
NOT_RESERVED_ID: dict[str, Any] = {
    "not": {"pattern": "^(" + "|".join(map(_any_case, RESERVED_ID_PREFIXES)) + ")"}
}
"""Not an id with a prefix the system writes for itself (``reroute/``, ``timer/``…)."""

NO_NUL: dict[str, Any] = {"type": "string", "pattern": "^[^\\u0000]*$"}
BINDING_NAME: dict[str, Any] = {"type": "string", "pattern": NAME_PATTERN, "maxLength": 128}
"""A binding's name as the configuration allows it (what create and rebind take)."""
"""Text a filter takes: no stored value has a NUL character (PostgreSQL refuses one in a query)."""
EXTENSION_NAMES: dict[str, Any] = {"pattern": "^(data_base64|work_id|execution_id|[a-z0-9]{1,20})$"}
"""The attribute names of an offered Event: CloudEvents' (extensions are 1 to 20 lowercase
letters and digits) and the router's."""

SCOPE_PATH: dict[str, Any] = {
    "type": "string",
    "minLength": 1,
    "maxLength": 255,
    "pattern": SCOPE_PATH_PATTERN,
}
"""A scope path as it is written (``acme/web``); whether the live configuration has it is the
server's to say."""

PARAMETERS: dict[str, Any] = {
    "seq": {
        "name": "seq",
        "in": "path",
        "required": True,
        "description": "The Event's place in the acceptance order (Events are named by seq: envelope ids "
        "are unique only per source).",
        "schema": ID,
    },
    "work_id": {
        "name": "work_id",
        "in": "path",
        "required": True,
        "description": "The Work's id.",
        "schema": ID,
    },
    "job_id": {
        "name": "job_id",
        "in": "path",
        "required": True,
        "description": "The bulk job's id.",
        "schema": ID,
    },
    "candidate_id": {
        "name": "candidate_id",
        "in": "path",
        "required": True,
        "description": "The candidate's id (``manage.py config candidate`` prints it).",
        "schema": ID,
    },
    "run_id": {
        "name": "run_id",
        "in": "path",
        "required": True,
        "description": "The impact preview job's id (the `id` a preview answered with 202).",
        "schema": ID,
    },
    "event_format": {
        "name": "format",
        "in": "query",
        "required": False,
        "description": '`conduit` (the default): each Event as `{"event": <CloudEvent>, "conduit": '
        "{...}}`; `cloudevent`: the bare structured-mode CloudEvent (`application/cloudevents+json`; a list "
        "as `application/cloudevents-batch+json`); empty: the default.",
        "schema": {"type": "string", "enum": ["", "conduit", "cloudevent"], "default": "conduit"},
    },
    "receiver_name": {
        "name": "name",
        "in": "path",
        "required": True,
        "description": "The receiver's name, as the configuration document declares it under `receivers`.",
        "schema": {"type": "string", "pattern": "^[a-z0-9][a-z0-9_-]*$", "maxLength": 64},
        "examples": {"github": {"value": "github"}, "slack": {"value": "slack"}},
    },
    # The CloudEvents webhook validation handshake's request headers (OPTIONS).
    "webhook_request_origin": {
        "name": "WebHook-Request-Origin",
        "in": "header",
        "required": False,
        "description": "The sender's host name.",
        "schema": {"type": "string", "pattern": "^[\\x21-\\x7e]{1,255}$"},
    },
    "webhook_request_rate": {
        "name": "WebHook-Request-Rate",
        "in": "header",
        "required": False,
        "description": "The rate the sender asks for (requests a minute); any is allowed.",
        "schema": {"type": "string"},
    },
}
"""The path parameters naming records, each declared once under ``components/parameters``."""

SEQ_PARAMETER = parameter_ref("seq")
WORK_ID_PARAMETER = parameter_ref("work_id")
CANDIDATE_ID_PARAMETER = parameter_ref("candidate_id")
JOB_ID_PARAMETER = parameter_ref("job_id")
RUN_ID_PARAMETER = parameter_ref("run_id")
EVENT_FORMAT_PARAMETER = parameter_ref("event_format")
WEBHOOK_PARAMETERS = [parameter_ref("webhook_request_origin"), parameter_ref("webhook_request_rate")]


def webhook_handshake_answer(allow: str) -> dict[str, Any]:
    """The ``200`` of the CloudEvents webhook handshake (``OPTIONS``), ``allow`` its methods."""
    return {
        "description": "Delivery allowed (with WebHook-Request-Origin), or the methods allowed.",
        "headers": {
            "Allow": {"schema": {"type": "string"}, "description": allow},
            "WebHook-Allowed-Origin": {"schema": {"type": "string"}, "description": "The origin asked for."},
            "WebHook-Allowed-Rate": {
                "schema": {"type": "string"},
                "description": "Deliveries a minute the sender may make (acceptance's rate limit, "
                "CONDUIT_ACCEPT_RATE_PER_MINUTE); `*` when it is off.",
            },
        },
    }


TIMESTAMP = {"type": "string", "format": "date-time", "description": "RFC 3339, with an offset."}
EMPTY_VALUE: dict[str, Any] = {"type": "string", "maxLength": 0}
"""An empty query value (``?work=``): the filter left out."""
NULLABLE_TIMESTAMP = {"type": ["string", "null"], "format": "date-time"}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` that also takes ``null`` (an optional field a request may send as ``null``,
    which the server reads as absent)."""
    return {**schema, "type": [schema["type"], "null"]}


SCHEMAS: dict[str, Any] = {
    # Any JSON value, written as the empty schema: a recursive one (an array or object of
    # JsonValue) is what client generators cannot read (openapi-python-client drops every
    # operation that uses it; openapi-generator's Python client refuses any object). What JSON
    # Schema could add (no NUL in a nested string, the depth) the server checks, answering 400.
    "JsonValue": {
        "description": "Any JSON value: null, a boolean, a number, a string, an array or an object, nested "
        "at most CONDUIT_MAX_JSON_DEPTH (64) levels, with no NUL character (\\u0000) in a string or a key "
        "(400 otherwise, naming the place)."
    },
    "Error": {
        "type": "object",
        "required": ["error", "message"],
        "properties": {
            "error": {
                "type": "string",
                "description": "A stable code: invalid_event, invalid_input, event_too_large, unauthorized, "
                "not_found, method_not_allowed, unsupported_media_type…",
            },
            "message": {"type": "string"},
            "field": {"type": ["string", "null"], "description": "The field at fault, when one is."},
            "index": {"type": "integer", "description": "The Event's position in a batch."},
            "retry_after": {
                "type": "integer",
                "description": "With 429: seconds to wait before trying again.",
            },
            "errors": {
                "type": "array",
                "items": {"type": "object"},
                "description": "Every refusal of a batch (each with index, field and message).",
            },
        },
    },
}

RESPONSES: dict[str, Any] = {
    "Invalid": {"description": "Invalid input; nothing is stored.", "content": json_content(ref("Error"))},
    "NotFound": {"description": "No such record.", "content": json_content(ref("Error"))},
    "MethodNotAllowed": {"description": "The method is not allowed.", "content": json_content(ref("Error"))},
    "TooLarge": {
        "description": "The request body is larger than the limit; nothing is stored.",
        "content": json_content(ref("Error")),
    },
    "UnsupportedMediaType": {"description": "The body is not JSON.", "content": json_content(ref("Error"))},
    "TooManyRequests": {
        "description": "Past a rate limit (error rate_limited: requests a minute per API token, per user "
        "over all its tokens, or for acceptance per token or per receiver) or a quota of running jobs "
        "(error too_many_requests); `retry_after` and the header say when to try again. Nothing is stored.",
        "headers": {
            "Retry-After": {
                "schema": {"type": "string", "pattern": "^[0-9]+$"},
                "description": "Seconds to wait.",
            }
        },
        "content": json_content(ref("Error")),
    },
}


def info(*, max_event_bytes: int) -> dict[str, Any]:
    """The document's ``info`` block: how to authenticate, and the request body limit."""
    return {
        "title": "Conduit API",
        "version": API_VERSION,
        "description": "The JSON API of Conduit, a durable event router. Authenticate with a per-user "
        "API token: `Authorization: Bearer <token>` (create one with `manage.py api_token create "
        f"USERNAME` or in the admin). The token acts with its user's permissions (roles viewer, "
        "operator, admin: reading needs `routing.view_event`, accepting `routing.accept_event`, each "
        "control its own), narrowed further by `--only` when it was created. Request bodies are "
        f"limited to {max_event_bytes} bytes.",
    }
