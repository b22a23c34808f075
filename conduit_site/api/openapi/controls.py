"""Operator controls in the OpenAPI document: skipping, rerouting and replaying one Event,
replaying several, and doctor's health checks."""

from __future__ import annotations

from typing import Any

from conduit_site.api.openapi.common import ID, SEQ_PARAMETER, TIMESTAMP, json_content, ref, response_ref

TAG: dict[str, str] = {
    "name": "controls",
    "description": (
        "Operator controls on Events (skip, reroute, replay), each recorded as a control Event, and "
        "doctor's health checks."
    ),
}
"""Every operation of ``PATHS`` has this tag."""

SCHEMAS: dict[str, Any] = {
    "ControlResult": {
        "type": "object",
        "description": "What an operator control did to one Event (skip, reroute or replay). Each control commits "
        "a `core.manual.skip_event` / `core.manual.reroute_event` / `core.manual.replay_event` control Event "
        "naming the Event and the acting user, in the same transaction as its effect.",
        "required": ["action", "seq", "route_state", "outcome", "control_seq", "by", "message"],
        "properties": {
            "action": {"type": "string", "enum": ["skip_event", "reroute_event", "replay_event"]},
            "seq": {"type": "integer", "description": "The Event acted on."},
            "route_state": {
                "type": "string",
                "enum": ["unrouted", "routed", "skipped", "failed"],
                "description": "The Event's route state after the control.",
            },
            "outcome": {
                "type": "string",
                "enum": ["skipped", "failures_forgotten", "copied", "replayed"],
                "description": "skipped: routed as skipped; failures_forgotten: an unrouted Event's failures "
                "were forgotten, the next pass tries it at once; copied: a copy of a failed or skipped Event "
                "was accepted (id `reroute/<original id>`, same source) and routes like new input; replayed: "
                "a copy of a settled Event was accepted (id `replay/<original id>/<n>`, same source) and "
                "routes under the live configuration.",
            },
            "control_seq": {"type": "integer", "description": "The control Event."},
            "copy_seq": {
                "type": ["integer", "null"],
                "description": "The copy a reroute or a replay accepted.",
            },
            "work_id": {"type": ["integer", "null"], "description": "The Work the control was recorded on."},
            "by": {"type": "string", "description": "The acting user."},
            "failures": {"type": "integer", "description": "Route failures counted before the control."},
            "last_error": {"type": "string", "description": "The last route failure's error, if any."},
            "message": {"type": "string", "description": "The result in one sentence."},
        },
    },
    "ControlRefusal": {
        "type": "object",
        "description": "A control on an Event in the wrong state; nothing was changed.",
        "required": ["error", "message", "seq", "route_state"],
        "properties": {
            "error": {"type": "string", "const": "wrong_state"},
            "message": {"type": "string"},
            "seq": {"type": "integer"},
            "route_state": {"type": "string", "enum": ["unrouted", "routed", "skipped", "failed"]},
            "copy_seq": {
                "type": ["integer", "null"],
                "description": "The copy of an Event already rerouted (a second reroute is refused).",
            },
        },
    },
    "ReplayRequest": {
        "type": "object",
        "required": ["seqs", "count"],
        "additionalProperties": False,
        "properties": {
            "seqs": {
                "type": "array",
                "minItems": 1,
                "maxItems": 10000,
                "items": ID,
                "description": "The Events to replay (an impact preview group's, for one), each once.",
            },
            "count": {
                "type": "integer",
                "minimum": 0,
                "description": "How many Events the caller confirmed (the distinct `seqs`): another number is "
                "refused with 409 `count_changed` and nothing is stored.",
            },
        },
    },
    "DoctorCheck": {
        "type": "object",
        "required": ["name", "ok", "status", "summary", "total", "items"],
        "properties": {
            "name": {
                "type": "string",
                "enum": [
                    "routing",
                    "route_loop",
                    "handler_calls",
                    "causal",
                    "work_loop",
                    "parked_work",
                    "supervision",
                    "live_updates",
                    "pauses",
                ],
            },
            "ok": {"type": "boolean"},
            "status": {"type": "string", "enum": ["ok", "warn"]},
            "summary": {"type": "string", "description": "The verdict in one line."},
            "total": {"type": "integer", "description": "Findings in all (items lists at most 50)."},
            "items": {
                "type": "array",
                "description": "routing: Events unrouted ten minutes after acceptance, or whose route "
                "keeps failing (seq, type, scope, accepted_at, age_seconds, failures, last_code, last_error, "
                "retry_at, waiting_on, reason); route_loop and handler_calls: route loops' last heartbeats "
                "(loop, at, age_seconds, generation, passes, routed, abandoned_calls, abandoned_total, "
                "failing: null, or the error, count, since and events of passes failing in a row; stopped: "
                "its last beat, written as it exited); causal: "
                "roots refused in "
                "the last hour (root_seq, refusals, kinds, last_at); work_loop: work loops' last "
                "heartbeats (loop, at, age_seconds, slots, running, started, completed, failed, refused, "
                "lost, stopped, isolation: what its Work cannot reach); parked_work: parked Work (work_id, "
                "scope, failures, last_error, parked_at); pauses: the pauses in force (kind, scope, name, "
                "line, until).",
                "items": {"type": "object"},
            },
        },
    },
    "DoctorReport": {
        "type": "object",
        "required": ["ok", "at", "checks"],
        "properties": {
            "ok": {"type": "boolean", "description": "False when any check warns."},
            "at": TIMESTAMP,
            "checks": {"type": "array", "items": ref("DoctorCheck")},
        },
    },
}

RESPONSES: dict[str, Any] = {
    "ControlRefused": {
        "description": "The Event is in the wrong state for this control; nothing was changed.",
        "content": json_content(ref("ControlRefusal")),
    },
}

PATHS: dict[str, Any] = {
    "/api/events/{seq}/skip": {
        "post": {
            "operationId": "event_skip",
            "summary": "Skip an unrouted Event",
            "description": "Routes the unrouted Event as skipped without asking its routes (RouteRecord "
            "disposition and policy `skipped`, reason `skipped by <user>`, on the Work its explicit targets "
            "name when exactly one; its route failures are forgotten, their count and last error kept in "
            "the record). Commits a `core.manual.skip_event` control Event in the same transaction. Needs "
            "the permission `routing.skip_event`. No request body.",
            "parameters": [SEQ_PARAMETER],
            "responses": {
                "200": {"description": "Skipped.", "content": json_content(ref("ControlResult"))},
                "401": response_ref("Unauthorized"),
                "403": response_ref("Forbidden"),
                "404": response_ref("NotFound"),
                "405": response_ref("MethodNotAllowed"),
                "409": response_ref("ControlRefused"),
            },
        }
    },
    "/api/events/{seq}/reroute": {
        "post": {
            "operationId": "event_reroute",
            "summary": "Reroute an Event",
            "description": "An unrouted Event: its route failures are forgotten (backoff and wait cleared), so "
            "the next pass tries it at once. A failed or skipped Event: a copy is accepted, the same "
            "envelope under the id `reroute/<original id>` and the same source, and routes like new input; "
            "a second reroute is refused naming the copy. Commits a `core.manual.reroute_event` control "
            "Event in the same transaction. Needs the permission `routing.reroute_event`. No request body.",
            "parameters": [SEQ_PARAMETER],
            "responses": {
                "200": {"description": "Rerouted.", "content": json_content(ref("ControlResult"))},
                "401": response_ref("Unauthorized"),
                "403": response_ref("Forbidden"),
                "404": response_ref("NotFound"),
                "405": response_ref("MethodNotAllowed"),
                "409": response_ref("ControlRefused"),
            },
        }
    },
    "/api/events/{seq}/replay": {
        "post": {
            "operationId": "event_replay",
            "summary": "Replay a routed Event",
            "description": "A settled Event (routed with any policy — unmatched, drop, start… — or failed or "
            "skipped) is accepted again as a copy: the same envelope and source under the id "
            "`replay/<original id>/<n>` (n counts its replays from 1; the prefix is reserved, refused from "
            "senders), which routes like new input under the live configuration. An unrouted Event, or one "
            "Conduit wrote for itself (`core.*`), is refused (409). Commits a `core.manual.replay_event` "
            "control Event naming the Event and its copy in the same transaction. Needs the permission "
            "`routing.replay_event`. No request body.",
            "parameters": [SEQ_PARAMETER],
            "responses": {
                "200": {"description": "Replayed.", "content": json_content(ref("ControlResult"))},
                "401": response_ref("Unauthorized"),
                "403": response_ref("Forbidden"),
                "404": response_ref("NotFound"),
                "405": response_ref("MethodNotAllowed"),
                "409": response_ref("ControlRefused"),
            },
        }
    },
    "/api/events/replay": {
        "post": {
            "operationId": "events_replay",
            "summary": "Replay several Events",
            "description": "Stores a bulk job replaying each Event of `seqs` (at most 10,000; more is refused with "
            "400 before anything is stored; `count`, required, is how many the caller confirmed) and answers 202 "
            "with it at once. The route loop runs it in batches: each Event is copied as `POST "
            "/api/events/{seq}/replay` copies one, with its own `core.manual.replay_event` control Event; a refusal "
            "of one is its outcome and the others go on (`GET /api/jobs/{job_id}`). Needs the permission "
            "`routing.replay_event`.",
            "requestBody": {"required": True, "content": json_content(ref("ReplayRequest"))},
            "responses": {
                "202": {"description": "The job, stored.", "content": json_content(ref("BulkJob"))},
                "400": response_ref("Invalid"),
                "409": {
                    "description": "`count` is not the number of Events named: nothing was stored.",
                    "content": json_content(ref("WorkBulkCountChanged")),
                },
                "401": response_ref("Unauthorized"),
                "403": response_ref("Forbidden"),
                "405": response_ref("MethodNotAllowed"),
                "413": response_ref("TooLarge"),
                "415": response_ref("UnsupportedMediaType"),
            },
        }
    },
    "/api/doctor": {
        "get": {
            "operationId": "doctor",
            "summary": "Doctor's health checks",
            "description": "routing: Events still unrouted ten minutes after acceptance, with their failure "
            "counts, last error code, next retry and the Event they wait behind; route_loop: no route loop "
            "heartbeat newer than 60 s while Events are unrouted; handler_calls: handler calls a live route "
            "loop abandoned at their deadline; causal: roots whose derived Events were refused in the last "
            "hour; work_loop: no work loop heartbeat newer than 60 s while Work is ready to run (pending "
            "input or a due retry); parked_work: Work parked after too many failures in a row; pauses: an "
            "operator's pause of a scope, binding, route or schedule is in force. Always "
            "200: `ok` says whether any check warns.",
            "responses": {
                "200": {"description": "The checks.", "content": json_content(ref("DoctorReport"))},
                "401": response_ref("Unauthorized"),
                "405": response_ref("MethodNotAllowed"),
            },
        }
    },
}
