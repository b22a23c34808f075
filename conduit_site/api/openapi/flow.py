"""Pauses and schedules in the OpenAPI document: pause and resume a scope, a binding, a route or
a schedule, list the pauses in force, list the schedules and fire one now."""

from __future__ import annotations

from typing import Any

from conduit_site.api.openapi.common import (
    NO_NUL,
    NULLABLE_TIMESTAMP,
    SCOPE_PATH,
    TIMESTAMP,
    json_content,
    ref,
    response_ref,
)
from controls.pauses import UNTIL_PATTERN
from routing.config.validate import NAME_PATTERN

TAG: dict[str, str] = {
    "name": "flow",
    "description": "Pauses (who, why, until) of scopes, bindings, routes and schedules, and the schedules.",
}
"""Every operation of ``PATHS`` has this tag."""

_KIND = {"type": "string", "enum": ["scope", "binding", "route", "schedule"]}
_NAME = {
    "type": "string",
    "maxLength": 128,
    "pattern": NAME_PATTERN.replace("^", "^(", 1).replace("$", ")?$"),
    "description": "The binding's name, the route's slot or the schedule's name; none for a scope, required "
    "for the others (409 otherwise).",
}

SCHEMAS: dict[str, Any] = {
    "Pause": {
        "type": "object",
        "required": ["id", "kind", "scope", "name", "paused_by", "reason", "created_at", "until", "line"],
        "properties": {
            "id": {"type": "integer"},
            "kind": _KIND,
            "scope": {"type": "string"},
            "name": _NAME,
            "paused_by": {"type": "string"},
            "reason": {"type": "string"},
            "created_at": TIMESTAMP,
            "until": NULLABLE_TIMESTAMP,
            "ended_at": NULLABLE_TIMESTAMP,
            "ended_by": {"type": "string"},
            "line": {
                "type": "string",
                "description": "How pages say it: paused by alice at 10:05: incident 42.",
            },
            "released": {"type": "integer", "description": "On resume: a route's held Events made routable."},
        },
    },
    "Schedule": {
        "type": "object",
        "required": ["scope", "name", "when", "type", "next_fire", "last_fire", "paused"],
        "properties": {
            "scope": {"type": "string"},
            "name": {"type": "string"},
            "when": {"type": "string", "description": "cron EXPR (ZONE) or every N s."},
            "type": {"type": "string", "description": "The type of the Event each fire accepts."},
            "overlap": {"type": "string", "enum": ["skip", "allow"]},
            "catch_up": {"type": "string", "enum": ["none", "last", "all"]},
            "next_fire": TIMESTAMP,
            "last_fire": NULLABLE_TIMESTAMP,
            "last_outcome": {
                "type": "string",
                "description": "fired, missed, skipped: … or fired now by USER.",
            },
            "last_event": {"type": ["integer", "null"]},
            "fired": {"type": "integer"},
            "skipped": {"type": "integer"},
            "paused": {"type": "string", "description": "The pause line, empty when it is not paused."},
        },
    },
}

RESPONSES: dict[str, Any] = {
    "FlowRefused": {
        "description": "The state or the live configuration refuses it (paused already, not paused, no such "
        "target); nothing was stored.",
        "content": json_content(ref("Error")),
    },
}

_TARGET = {"kind": _KIND, "scope": SCOPE_PATH, "name": _NAME}

PATHS: dict[str, Any] = {
    "/api/pauses": {
        "get": {
            "operationId": "pauses_list",
            "summary": "The pauses in force",
            "responses": {
                "200": {
                    "description": "Oldest first.",
                    "content": json_content(
                        {"type": "object", "properties": {"pauses": {"type": "array", "items": ref("Pause")}}}
                    ),
                },
                "401": response_ref("Unauthorized"),
                "403": response_ref("Forbidden"),
                "405": response_ref("MethodNotAllowed"),
            },
        },
        "post": {
            "operationId": "pause_create",
            "summary": "Pause a scope, a binding, a route or a schedule",
            "description": "Routing goes on: the Work it holds queues its input and starts no attempt; a paused "
            "route's Events stay unrouted (held) and route in order on resume; a paused schedule skips its fire "
            "times. Needs the permission `worklife.pause_work`.",
            "requestBody": {
                "required": True,
                "content": json_content(
                    {
                        "type": "object",
                        "required": ["kind", "scope"],
                        "additionalProperties": False,
                        "properties": {
                            **_TARGET,
                            "reason": {**NO_NUL, "maxLength": 500},
                            "until": {
                                "type": "string",
                                "pattern": UNTIL_PATTERN,
                                "description": "A duration (30m, 2h, 1d) or an ISO 8601 time (UTC without an "
                                "offset); a time not in the future, or one the calendar does not have, is refused "
                                "(409).",
                            },
                        },
                    }
                ),
            },
            "responses": {
                "201": {"description": "Paused.", "content": json_content(ref("Pause"))},
                "400": response_ref("Invalid"),
                "401": response_ref("Unauthorized"),
                "403": response_ref("Forbidden"),
                "405": response_ref("MethodNotAllowed"),
                "409": response_ref("FlowRefused"),
            },
        },
    },
    "/api/pauses/resume": {
        "post": {
            "operationId": "pause_resume",
            "summary": "Resume a paused scope, binding, route or schedule",
            "description": "A route's held Events become routable at once and route in acceptance order. Needs "
            "the permission `worklife.pause_work`.",
            "requestBody": {
                "required": True,
                "content": json_content(
                    {
                        "type": "object",
                        "required": ["kind", "scope"],
                        "additionalProperties": False,
                        "properties": _TARGET,
                    }
                ),
            },
            "responses": {
                "200": {"description": "Resumed.", "content": json_content(ref("Pause"))},
                "400": response_ref("Invalid"),
                "401": response_ref("Unauthorized"),
                "403": response_ref("Forbidden"),
                "405": response_ref("MethodNotAllowed"),
                "409": response_ref("FlowRefused"),
            },
        }
    },
    "/api/schedules": {
        "get": {
            "operationId": "schedules_list",
            "summary": "The live configuration's schedules, with next and last fire times",
            "responses": {
                "200": {
                    "description": "Scope by scope.",
                    "content": json_content(
                        {
                            "type": "object",
                            "properties": {"schedules": {"type": "array", "items": ref("Schedule")}},
                        }
                    ),
                },
                "401": response_ref("Unauthorized"),
                "403": response_ref("Forbidden"),
                "405": response_ref("MethodNotAllowed"),
            },
        }
    },
    "/api/schedules/fire": {
        "post": {
            "operationId": "schedule_fire",
            "summary": "Fire a schedule now",
            "description": "Accepts the schedule's Event at once (id `schedule/<name>/now/<uuid>`), whatever its "
            "fire times, pause and overlap. Needs the permission `worklife.pause_work`.",
            "requestBody": {
                "required": True,
                "content": json_content(
                    {
                        "type": "object",
                        "required": ["scope", "name"],
                        "additionalProperties": False,
                        "properties": {
                            "scope": SCOPE_PATH,
                            "name": {"type": "string", "maxLength": 128, "pattern": NAME_PATTERN},
                        },
                    }
                ),
            },
            "responses": {
                "201": {
                    "description": "Fired.",
                    "content": json_content(
                        {
                            "type": "object",
                            "properties": {
                                "seq": {"type": "integer"},
                                "id": {"type": "string"},
                                "type": {"type": "string"},
                            },
                        }
                    ),
                },
                "400": response_ref("Invalid"),
                "401": response_ref("Unauthorized"),
                "403": response_ref("Forbidden"),
                "405": response_ref("MethodNotAllowed"),
                "409": response_ref("FlowRefused"),
            },
        }
    },
}
