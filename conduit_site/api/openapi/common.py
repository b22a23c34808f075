"""What the resources of the OpenAPI document share: the helpers that build references, the
path parameters naming records, timestamps, the error schema, the error responses and the
``info`` block.

The one import of ``MAX_ID`` for the whole document is here; the other modules take ``ID``.
"""

from __future__ import annotations

from typing import Any

from infra.converters import MAX_ID

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
    "candidate_id": {
        "name": "candidate_id",
        "in": "path",
        "required": True,
        "description": "The candidate's id (``manage.py config candidate`` prints it).",
        "schema": ID,
    },
    "event_format": {
        "name": "format",
        "in": "query",
        "required": False,
        "description": '`conduit` (the default): each Event as `{"event": <CloudEvent>, "conduit": '
        "{...}}`; `cloudevent`: the bare structured-mode CloudEvent (`application/cloudevents+json`; a list "
        "as `application/cloudevents-batch+json`).",
        "schema": {"type": "string", "enum": ["conduit", "cloudevent"], "default": "conduit"},
    },
}
"""The path parameters naming records, each declared once under ``components/parameters``."""

SEQ_PARAMETER = parameter_ref("seq")
WORK_ID_PARAMETER = parameter_ref("work_id")
CANDIDATE_ID_PARAMETER = parameter_ref("candidate_id")
EVENT_FORMAT_PARAMETER = parameter_ref("event_format")

TIMESTAMP = {"type": "string", "format": "date-time", "description": "RFC 3339, with an offset."}
NULLABLE_TIMESTAMP = {"type": ["string", "null"], "format": "date-time"}

SCHEMAS: dict[str, Any] = {
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
