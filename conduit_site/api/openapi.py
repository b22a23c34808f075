"""The OpenAPI 3.1 description of the JSON API, written by hand.

Every route of ``conduit_site.api.urls`` must be described here with each of its methods: a
test walks the URLconf and fails otherwise. To add an endpoint, add its path item to
``PATHS`` (reusing the component schemas and responses below).
"""

from __future__ import annotations

import copy
from typing import Any

from django.conf import settings

from infra.converters import MAX_ID

API_VERSION = "1.0.0"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _response(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/responses/{name}"}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


SEQ_PARAMETER = {
    "name": "seq",
    "in": "path",
    "required": True,
    "description": "The Event's place in the acceptance order (Events are named by seq: envelope ids "
    "are unique only per source).",
    "schema": {"type": "integer", "minimum": 1, "maximum": MAX_ID},
}

WORK_ID_PARAMETER = {
    "name": "work_id",
    "in": "path",
    "required": True,
    "description": "The Work's id.",
    "schema": {"type": "integer", "minimum": 1, "maximum": MAX_ID},
}

CANDIDATE_ID_PARAMETER = {
    "name": "candidate_id",
    "in": "path",
    "required": True,
    "description": "The candidate's id (``manage.py config candidate`` prints it).",
    "schema": {"type": "integer", "minimum": 1, "maximum": MAX_ID},
}

TIMESTAMP = {"type": "string", "format": "date-time", "description": "RFC 3339, with an offset."}
NULLABLE_TIMESTAMP = {"type": ["string", "null"], "format": "date-time"}

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
            "work_id": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_ID,
                "description": "An explicit target Work.",
            },
            "execution_id": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_ID,
                "description": "An explicit target Execution.",
            },
        },
        "additionalProperties": {"type": ["string", "integer", "boolean"]},
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
                    "properties": {"created": {"type": "boolean"}, "event": _ref("Event")},
                },
            }
        },
    },
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
                "items": _ref("Refusal"),
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
            "failure": {"oneOf": [_ref("RouteFailure"), {"type": "null"}]},
        },
    },
    "Trace": {
        "type": "object",
        "description": "A trace: the effect routing would record and each route's verdict.",
        "properties": {
            "generation": {"type": "string", "description": "The generation number, or `candidate`."},
            "scope": {"type": "string"},
            "effect": {
                "type": "string",
                "description": "What routing records as the policy (start, queue, inject, interrupt, held, "
                "drop, wake, unmatched, or failed when it gives up), or why the Event stays unrouted "
                "(error: a failure counted and retried; waiting: behind earlier input; conflict), or "
                "duplicate (its source and id are already accepted: nothing is stored).",
            },
            "reason": {"type": "string"},
            "work": {"type": ["integer", "null"]},
            "route": {"type": "string"},
            "binding": {"type": "string"},
            "keys": {"type": "array", "items": {"type": "string"}},
            "verdicts": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "route": {"type": "string"},
                        "scope": {"type": "string"},
                        "verdict": {
                            "type": "string",
                            "enum": ["match", "skip", "not_reached", "bypassed", "error"],
                        },
                        "reason": {"type": "string"},
                    },
                },
            },
            "refusals": {"type": "array", "items": {"type": "object"}},
            "error": {"type": "string"},
            "notes": {"type": "array", "items": {"type": "string"}},
            "state": {
                "type": "string",
                "enum": ["routed", "failed", "unrouted", "duplicate"],
                "description": "The route state routing leaves the Event in.",
            },
            "unrouted_reason": {
                "type": ["string", "null"],
                "description": "The reason routing stores on an unrouted Event; null: left as it is.",
            },
            "waiting_on": {"type": ["integer", "null"], "description": "The earlier Event it waits behind."},
            "retry_at": {"type": ["string", "null"], "format": "date-time"},
            "attempts": {"type": "integer", "description": "Route failures counted, this one included."},
            "event": {
                "type": ["integer", "null"],
                "description": "The accepted Event traced, or the one a duplicate repeats.",
            },
        },
    },
    "EventRoute": {
        "description": "An Event's route, by `state`: a settled Event's RouteRecord, or why an Event is "
        "unrouted.",
        "oneOf": [_ref("SettledRoute"), _ref("UnroutedRoute")],
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
    "ControlResult": {
        "type": "object",
        "description": "What an operator control did to one Event (R20-R22). Each control commits a "
        "`core.manual.skip_event` / `core.manual.reroute_event` control Event naming the Event and the "
        "acting user, in the same transaction as its effect.",
        "required": ["action", "seq", "route_state", "outcome", "control_seq", "by", "message"],
        "properties": {
            "action": {"type": "string", "enum": ["skip_event", "reroute_event"]},
            "seq": {"type": "integer", "description": "The Event acted on."},
            "route_state": {
                "type": "string",
                "enum": ["unrouted", "skipped", "failed"],
                "description": "The Event's route state after the control.",
            },
            "outcome": {
                "type": "string",
                "enum": ["skipped", "failures_forgotten", "copied"],
                "description": "skipped: routed as skipped; failures_forgotten: an unrouted Event's failures "
                "were forgotten, the next pass tries it at once; copied: a copy of a failed or skipped Event "
                "was accepted (id `reroute/<original id>`, same source) and routes like new input.",
            },
            "control_seq": {"type": "integer", "description": "The control Event."},
            "copy_seq": {"type": ["integer", "null"], "description": "The copy a reroute accepted."},
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
    "Work": {
        "type": "object",
        "description": "A unit of work routed Events feed. Its scope never changes.",
        "required": ["id", "scope", "status", "binding", "version", "created_at", "updated_at"],
        "properties": {
            "id": {"type": "integer"},
            "scope": {"type": "string"},
            "status": {"type": "string", "enum": ["ready", "running", "waiting", "completed", "cancelled"]},
            "binding": {"type": "string", "description": "The binding the Work was started on."},
            "retry_binding": {"type": "string", "description": "The binding a retry runs on (a rebind)."},
            "rebind_binding": {"type": "string", "description": "The binding of the last rebind."},
            "rebind_after_attempt": {
                "type": ["integer", "null"],
                "description": "The attempt number the last rebind followed (0: before any).",
            },
            "parent_id": {"type": ["integer", "null"]},
            "predecessor_id": {"type": ["integer", "null"]},
            "trigger_seq": {"type": ["integer", "null"], "description": "The Event that brought it about."},
            "version": {"type": "integer", "description": "Increases on every change."},
            "created_at": TIMESTAMP,
            "created_by": {"type": "string", "description": "The operator who created it, if one did."},
            "updated_at": TIMESTAMP,
            "ended_at": NULLABLE_TIMESTAMP,
            "failures": {"type": "integer", "description": "Attempts that failed in a row."},
            "pending_run": {"type": "boolean", "description": "Runs even without pending input."},
            "retry_at": {**NULLABLE_TIMESTAMP, "description": "Backing off: no attempt before this time."},
            "parked_at": {
                **NULLABLE_TIMESTAMP,
                "description": "Parked after too many failures: an operator retries or cancels it.",
            },
            "last_error": {"type": "string", "description": "The last failure or refused dispatch."},
        },
    },
    "Attempt": {
        "type": "object",
        "description": "One execution of a Work, its configuration pinned at start (R36).",
        "properties": {
            "id": {"type": "integer", "description": "The Execution id Events may target."},
            "number": {"type": "integer"},
            "state": {
                "type": "string",
                "enum": ["running", "waiting", "succeeded", "failed", "cancelled", "lost"],
            },
            "binding": {"type": "string"},
            "executor": {"type": "string"},
            "generation": {"type": "integer"},
            "capabilities": {"type": "array", "items": {"type": "string"}},
            "lease_epoch": {"type": "integer"},
            "lease_until": NULLABLE_TIMESTAMP,
            "trigger_seq": {"type": ["integer", "null"]},
            "started_at": TIMESTAMP,
            "ended_at": NULLABLE_TIMESTAMP,
            "exit_status": {"type": ["integer", "null"]},
            "error": {"type": "string"},
        },
    },
    "WorkDetail": {
        "allOf": [
            _ref("Work"),
            {
                "type": "object",
                "properties": {
                    "attempts": {
                        "type": "array",
                        "items": _ref("Attempt"),
                        "description": "Newest first, at most 50.",
                    },
                    "more_attempts": {"type": "boolean"},
                    "keys": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "The correlation keys it owns, at most 100.",
                    },
                    "more_keys": {"type": "boolean"},
                },
            },
        ]
    },
    "WorkPage": {
        "type": "object",
        "required": ["work", "next_before"],
        "properties": {
            "work": {"type": "array", "items": _ref("Work"), "description": "Newest (highest id) first."},
            "next_before": {
                "type": ["integer", "null"],
                "description": "Pass as `before` for the next page; null on the last page.",
            },
        },
    },
    "OperatorInput": {
        "type": "object",
        "description": "Operator input, accepted as an addressed operator Event (source `core.manual`, "
        "`work_id` the Work, R30): the router queues it on the binding the Work runs on next, reason "
        "`addressed`, unless a route selects it.",
        "required": ["type"],
        "properties": {
            "type": {
                "type": "string",
                "minLength": 1,
                "maxLength": 255,
                "description": "The operator's own type; `core` and `core.*` are reserved.",
            },
            "data": {"description": "Any JSON value."},
            "subject": {"type": "string", "maxLength": 512},
        },
        "additionalProperties": False,
    },
    "WorkControlResult": {
        "type": "object",
        "description": "What an operator control did to one Work. Each control commits a "
        "`core.manual.<action>` control Event naming the Work and the acting user, in the same "
        "transaction as its effect; it is recorded in the Work's route history (policy `control`).",
        "required": ["action", "work_id", "status", "control_seq", "by", "scope", "message"],
        "properties": {
            "action": {
                "type": "string",
                "enum": ["cancel_work", "retry_work", "send_input", "create_work", "rebind_work"],
            },
            "work_id": {"type": "integer"},
            "status": {"type": "string", "description": "The Work's status after the control."},
            "control_seq": {"type": "integer", "description": "The control Event."},
            "by": {"type": "string", "description": "The acting user."},
            "scope": {"type": "string"},
            "binding": {"type": "string", "description": "create: the Work's binding; rebind: the new one."},
            "previous_binding": {
                "type": "string",
                "description": "rebind: the binding the Work would have run on next.",
            },
            "input_seq": {
                "type": ["integer", "null"],
                "description": "send, create: the addressed operator Event accepted.",
            },
            "attempts_cancelled": {
                "type": "integer",
                "description": "cancel: active attempts cancelled (their work loops stop the processes).",
            },
            "message": {"type": "string", "description": "The result in one sentence."},
        },
    },
    "WorkControlRefusal": {
        "type": "object",
        "description": "A control the Work's state or the live configuration refuses; nothing was stored.",
        "required": ["error", "message", "action"],
        "properties": {
            "error": {
                "type": "string",
                "enum": [
                    "wrong_state",
                    "no_configuration",
                    "unknown_scope",
                    "unknown_binding",
                    "binding_invalid",
                ],
            },
            "message": {"type": "string"},
            "action": {"type": "string"},
            "work_id": {"type": ["integer", "null"]},
            "status": {"type": "string", "description": "The Work's status when refused."},
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
                "failing: null, or the error, count, since and events of passes failing in a row); causal: "
                "roots refused in "
                "the last hour (root_seq, refusals, kinds, last_at); work_loop: work loops' last "
                "heartbeats (loop, at, age_seconds, slots, running, started, completed, failed, refused, "
                "lost, stopped); parked_work: parked Work (work_id, scope, failures, last_error, "
                "parked_at).",
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
            "checks": {"type": "array", "items": _ref("DoctorCheck")},
        },
    },
    "Generation": {
        "type": "object",
        "description": "A stored configuration: an applied generation (numbered) or a candidate.",
        "required": ["id", "kind", "number", "digest", "created_at", "created_by", "note"],
        "properties": {
            "id": {"type": "integer"},
            "kind": {"type": "string", "enum": ["applied", "candidate"]},
            "number": {"type": ["integer", "null"], "description": "The generation number (applied only)."},
            "digest": {"type": "string", "description": "SHA-256 of the document, hex."},
            "created_at": TIMESTAMP,
            "created_by": {"type": "string", "description": "Who stored or applied it."},
            "note": {"type": "string"},
        },
    },
    "ItemChange": {
        "type": "object",
        "description": "A route (by slot) or binding (by name) that differs in one scope, with both sides.",
        "required": ["name", "change", "fields", "live", "candidate"],
        "properties": {
            "name": {"type": "string"},
            "change": {"type": "string", "enum": ["added", "removed", "changed"]},
            "fields": {"type": "array", "items": {"type": "string"}, "description": "What changed."},
            "live": {"type": ["object", "null"]},
            "candidate": {"type": ["object", "null"]},
        },
    },
    "ConfigDiff": {
        "type": "object",
        "description": "A candidate against the live generation, scope by scope: effective routes and "
        "visible bindings added, removed or changed.",
        "required": ["live", "candidate", "unchanged", "scopes"],
        "properties": {
            "live": {"type": "string", "description": "The live generation number (empty: none)."},
            "candidate": {"type": "string"},
            "unchanged": {"type": "boolean"},
            "scopes": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["path", "change", "routes", "bindings"],
                    "properties": {
                        "path": {"type": "string"},
                        "change": {"type": "string", "enum": ["added", "removed", "changed", "same"]},
                        "routes": {"type": "array", "items": _ref("ItemChange")},
                        "bindings": {"type": "array", "items": _ref("ItemChange")},
                    },
                },
            },
        },
    },
    "Candidate": {
        "description": "A candidate with its document, its diff against live and its effective route "
        "tree (every scope, parents first; each route and binding names the scope it comes from and "
        "what it overrides or redefines).",
        "allOf": [
            _ref("Generation"),
            {
                "type": "object",
                "required": ["document", "diff", "tree"],
                "properties": {
                    "document": {"type": "string"},
                    "diff": _ref("ConfigDiff"),
                    "tree": {"type": "array", "items": {"type": "object"}},
                },
            },
        ],
    },
    "StoredCandidate": {
        "allOf": [
            _ref("Generation"),
            {"type": "object", "required": ["diff"], "properties": {"diff": _ref("ConfigDiff")}},
        ],
    },
    "ImpactReport": {
        "type": "object",
        "description": "The latest Events traced against live and the candidate: only those that would "
        "route otherwise, grouped (`start → queue`, `queue → unmatched`, `other route or binding`…), each "
        "with both traces.",
        "required": ["live", "candidate", "examined", "traced", "changed", "groups"],
        "properties": {
            "live": {"type": "string"},
            "candidate": {"type": "integer"},
            "examined": {"type": "integer", "minimum": 0},
            "traced": {"type": "integer", "minimum": 0, "description": "Events of changed scopes traced."},
            "first_seq": {"type": ["integer", "null"]},
            "last_seq": {"type": ["integer", "null"]},
            "changed": {"type": "integer", "minimum": 0},
            "seconds": {"type": "number"},
            "groups": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["group", "count", "changes"],
                    "properties": {
                        "group": {"type": "string"},
                        "count": {"type": "integer"},
                        "changes": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["seq", "type", "scope", "group", "live", "candidate"],
                                "properties": {
                                    "seq": {"type": "integer"},
                                    "type": {"type": "string"},
                                    "scope": {"type": "string"},
                                    "group": {"type": "string"},
                                    "live": {"type": "object", "description": "A Trace, or a refusal."},
                                    "candidate": {"type": "object", "description": "A Trace, or a refusal."},
                                },
                            },
                        },
                    },
                },
            },
        },
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
            "errors": {
                "type": "array",
                "items": {"type": "object"},
                "description": "Every refusal of a batch (each with index, field and message).",
            },
        },
    },
}

RESPONSES: dict[str, Any] = {
    "Invalid": {"description": "Invalid input; nothing is stored.", "content": _json(_ref("Error"))},
    "Unauthorized": {
        "description": "No valid API token (missing, malformed, unknown, revoked, or its user inactive).",
        "headers": {"WWW-Authenticate": {"schema": {"type": "string"}, "description": "Bearer"}},
        "content": _json(_ref("Error")),
    },
    "NotFound": {"description": "No such record.", "content": _json(_ref("Error"))},
    "MethodNotAllowed": {"description": "The method is not allowed.", "content": _json(_ref("Error"))},
    "TooLarge": {
        "description": "The request body is larger than the limit; nothing is stored.",
        "content": _json(_ref("Error")),
    },
    "UnsupportedMediaType": {"description": "The body is not JSON.", "content": _json(_ref("Error"))},
    "Forbidden": {
        "description": "The token's user lacks the permission this operation needs, or the token "
        "is narrowed (`api_token create --only …`) to scopes that exclude it.",
        "content": _json(_ref("Error")),
    },
    "ControlRefused": {
        "description": "The Event is in the wrong state for this control; nothing was changed.",
        "content": _json(_ref("ControlRefusal")),
    },
    "WorkControlRefused": {
        "description": "The Work's state or the live configuration refuses the control; nothing was stored.",
        "content": _json(_ref("WorkControlRefusal")),
    },
}

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
                    media: {
                        "schema": {
                            "oneOf": [
                                _ref("CloudEventInput"),
                                {"type": "array", "items": _ref("CloudEventInput")},
                            ]
                        }
                    }
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
                    "content": _json({"oneOf": [_ref("Event"), _ref("AcceptedBatch")]}),
                },
                "200": {
                    "description": "A duplicate: the Event (or every Event of the batch) was accepted before.",
                    "content": _json({"oneOf": [_ref("Event"), _ref("AcceptedBatch")]}),
                },
                "400": _response("Invalid"),
                "401": _response("Unauthorized"),
                "405": _response("MethodNotAllowed"),
                "409": {
                    "description": "A conflicting duplicate (error conflicting_duplicate): an Event with "
                    "this (source, id) was accepted with another body; `seq` names it and `digests` holds "
                    "both bodies' digests (`accepted`, `offered`). Nothing is stored.",
                    "content": _json(_ref("Error")),
                },
                "413": _response("TooLarge"),
                "415": _response("UnsupportedMediaType"),
            },
        }
    },
    "/api/events/{seq}": {
        "get": {
            "operationId": "event_detail",
            "summary": "An Event by its seq",
            "parameters": [SEQ_PARAMETER],
            "responses": {
                "200": {"description": "The Event.", "content": _json(_ref("Event"))},
                "401": _response("Unauthorized"),
                "404": _response("NotFound"),
                "405": _response("MethodNotAllowed"),
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
                "200": {"description": "The Event's route.", "content": _json(_ref("EventRoute"))},
                "401": _response("Unauthorized"),
                "404": _response("NotFound"),
                "405": _response("MethodNotAllowed"),
            },
        }
    },
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
                "200": {"description": "Skipped.", "content": _json(_ref("ControlResult"))},
                "401": _response("Unauthorized"),
                "403": _response("Forbidden"),
                "404": _response("NotFound"),
                "405": _response("MethodNotAllowed"),
                "409": _response("ControlRefused"),
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
                "200": {"description": "Rerouted.", "content": _json(_ref("ControlResult"))},
                "401": _response("Unauthorized"),
                "403": _response("Forbidden"),
                "404": _response("NotFound"),
                "405": _response("MethodNotAllowed"),
                "409": _response("ControlRefused"),
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
            "input or a due retry); parked_work: Work parked after too many failures in a row. Always "
            "200: `ok` says whether any check warns.",
            "responses": {
                "200": {"description": "The checks.", "content": _json(_ref("DoctorReport"))},
                "401": _response("Unauthorized"),
                "405": _response("MethodNotAllowed"),
            },
        }
    },
    "/api/trace": {
        "post": {
            "operationId": "trace",
            "summary": "Trace a hypothetical Event",
            "description": "A dry run of routing: the same handlers and the same decision routing would make "
            'now, against the live generation or the one `generation` names (`"3"`, `"candidate:12"`, '
            "a configuration not yet applied). Writes nothing. The Event is first refused as acceptance "
            "would refuse it; `specversion` and `id` may be left out. `operator: true` traces an operator "
            "Event (source `core.manual`, R30).",
            "requestBody": {
                "required": True,
                "content": _json(
                    {
                        "type": "object",
                        "required": ["event"],
                        "properties": {
                            "event": {
                                "type": "object",
                                "description": "A structured-mode CloudEvent with `scope`.",
                            },
                            "generation": {"type": "string"},
                            "operator": {"type": "boolean", "default": False},
                        },
                    }
                ),
            },
            "responses": {
                "200": {"description": "What routing would do, and why.", "content": _json(_ref("Trace"))},
                "400": _response("Invalid"),
                "401": _response("Unauthorized"),
                "404": _response("NotFound"),
                "405": _response("MethodNotAllowed"),
            },
        }
    },
    "/api/candidates": {
        "post": {
            "operationId": "candidate_create",
            "summary": "Store a candidate configuration",
            "description": "Validates `document` (YAML, as `manage.py config apply` takes it) and stores it as "
            "a candidate: never live, for diffs, traces and impact previews. 400 (`invalid_configuration`) "
            "lists every problem under `problems`, each with its `place`, `message` and `line`; nothing is "
            "stored then. Needs the permission `routing.apply_configuration`.",
            "requestBody": {
                "required": True,
                "content": _json(
                    {
                        "type": "object",
                        "required": ["document"],
                        "properties": {"document": {"type": "string"}},
                        "additionalProperties": False,
                    }
                ),
            },
            "responses": {
                "201": {"description": "Stored.", "content": _json(_ref("StoredCandidate"))},
                "400": _response("Invalid"),
                "401": _response("Unauthorized"),
                "405": _response("MethodNotAllowed"),
                "413": _response("TooLarge"),
                "415": _response("UnsupportedMediaType"),
            },
        }
    },
    "/api/candidates/{candidate_id}": {
        "get": {
            "operationId": "candidate_detail",
            "summary": "A candidate, its diff against live and its effective route tree",
            "description": 'Trace an Event against it with `POST /api/trace` and `generation: "candidate:ID"`.',
            "parameters": [CANDIDATE_ID_PARAMETER],
            "responses": {
                "200": {"description": "The candidate.", "content": _json(_ref("Candidate"))},
                "401": _response("Unauthorized"),
                "404": _response("NotFound"),
                "405": _response("MethodNotAllowed"),
            },
        }
    },
    "/api/candidates/{candidate_id}/impact": {
        "get": {
            "operationId": "candidate_impact",
            "summary": "Preview a candidate's impact on recent Events",
            "description": "Traces the latest `events` accepted Events again, against the live generation and "
            "against the candidate, and answers only those that would route otherwise, grouped. Writes "
            "nothing.",
            "parameters": [
                CANDIDATE_ID_PARAMETER,
                {
                    "name": "events",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": 1, "maximum": 10000, "default": 1000},
                    "description": "How many of the latest Events.",
                },
            ],
            "responses": {
                "200": {"description": "What would change.", "content": _json(_ref("ImpactReport"))},
                "400": _response("Invalid"),
                "401": _response("Unauthorized"),
                "404": _response("NotFound"),
                "405": _response("MethodNotAllowed"),
            },
        }
    },
    "/api/candidates/{candidate_id}/apply": {
        "post": {
            "operationId": "candidate_apply",
            "summary": "Apply a candidate as the next live generation",
            "description": "The candidate's document becomes the next applied generation, `created_by` the "
            "token's user; the candidate is removed. With `expected_live` (the live generation number the "
            "diff was read against, 0 for none) a newer live generation refuses the apply (409 "
            "`stale_candidate`); a document the registered handlers or executors no longer accept is a 409 "
            "too. Needs the permission `routing.apply_configuration`.",
            "parameters": [CANDIDATE_ID_PARAMETER],
            "requestBody": {
                "required": False,
                "content": _json(
                    {
                        "type": "object",
                        "properties": {"expected_live": {"type": "integer", "minimum": 0}},
                        "additionalProperties": False,
                    }
                ),
            },
            "responses": {
                "200": {"description": "The new live generation.", "content": _json(_ref("Generation"))},
                "400": _response("Invalid"),
                "401": _response("Unauthorized"),
                "404": _response("NotFound"),
                "405": _response("MethodNotAllowed"),
                "409": {
                    "description": "Live moved on, or the document is refused.",
                    "content": _json(_ref("Error")),
                },
                "413": _response("TooLarge"),
                "415": _response("UnsupportedMediaType"),
            },
        }
    },
    "/api/candidates/{candidate_id}/discard": {
        "post": {
            "operationId": "candidate_discard",
            "summary": "Discard a candidate",
            "description": "Deletes the candidate; it takes no body. Needs the permission "
            "`routing.apply_configuration`.",
            "parameters": [CANDIDATE_ID_PARAMETER],
            "responses": {
                "200": {
                    "description": "Discarded.",
                    "content": _json(
                        {
                            "type": "object",
                            "required": ["discarded"],
                            "properties": {"discarded": {"type": "integer"}},
                        }
                    ),
                },
                "401": _response("Unauthorized"),
                "404": _response("NotFound"),
                "405": _response("MethodNotAllowed"),
            },
        }
    },
    "/api/work": {
        "get": {
            "operationId": "work_list",
            "summary": "Work, newest first",
            "parameters": [
                {"name": "scope", "in": "query", "schema": {"type": "string"}, "description": "Exact scope."},
                {
                    "name": "status",
                    "in": "query",
                    "schema": {
                        "type": "string",
                        "enum": ["ready", "running", "waiting", "completed", "cancelled", "parked"],
                    },
                    "description": "The Work's status; `parked`: ready Work parked after too many failures.",
                },
                {
                    "name": "binding",
                    "in": "query",
                    "schema": {"type": "string", "maxLength": 128},
                    "description": "The binding the Work runs on (exact).",
                },
                {
                    "name": "key",
                    "in": "query",
                    "schema": {"type": "string", "maxLength": 512},
                    "description": "A correlation key the Work owns (exact; with `scope`, that scope's key).",
                },
                {
                    "name": "before",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": 1, "maximum": MAX_ID},
                    "description": "Only Work with a lower id (the previous page's `next_before`).",
                },
                {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 200}},
            ],
            "responses": {
                "200": {"description": "One page of Work.", "content": _json(_ref("WorkPage"))},
                "400": _response("Invalid"),
                "401": _response("Unauthorized"),
                "405": _response("MethodNotAllowed"),
            },
        },
        "post": {
            "operationId": "work_create",
            "summary": "Create a Work with its first input",
            "description": "Opens a Work in `scope` (a scope of the live configuration) on `binding` (a "
            "binding visible there that can run) and accepts `input` as its first input, an addressed "
            "operator Event naming it (R30), which is also its trigger. The Work runs once the router "
            "queues that input. Commits a `core.manual.create_work` control Event in the same transaction. "
            "Needs the permission `worklife.create_work`.",
            "requestBody": {
                "required": True,
                "content": _json(
                    {
                        "type": "object",
                        "required": ["scope", "binding", "input"],
                        "properties": {
                            "scope": {"type": "string"},
                            "binding": {"type": "string"},
                            "input": _ref("OperatorInput"),
                        },
                        "additionalProperties": False,
                    }
                ),
            },
            "responses": {
                "201": {
                    "description": "Created.",
                    "headers": {"Location": {"schema": {"type": "string"}, "description": "The new Work."}},
                    "content": _json(_ref("WorkControlResult")),
                },
                "400": _response("Invalid"),
                "401": _response("Unauthorized"),
                "403": _response("Forbidden"),
                "405": _response("MethodNotAllowed"),
                "409": _response("WorkControlRefused"),
                "413": _response("TooLarge"),
                "415": _response("UnsupportedMediaType"),
            },
        },
    },
    "/api/work/{work_id}": {
        "get": {
            "operationId": "work_detail",
            "summary": "A Work with its attempts and keys",
            "parameters": [WORK_ID_PARAMETER],
            "responses": {
                "200": {"description": "The Work.", "content": _json(_ref("WorkDetail"))},
                "401": _response("Unauthorized"),
                "404": _response("NotFound"),
                "405": _response("MethodNotAllowed"),
            },
        }
    },
    "/api/work/{work_id}/cancel": {
        "post": {
            "operationId": "work_cancel",
            "summary": "Cancel a Work",
            "description": "Cancels the Work's active attempts and waits, removes its timers and its queue "
            "eligibility and makes it terminal, atomically (R48); the work loop holding a cancelled attempt "
            "stops its process after the commit. Terminal Work is refused (409). Commits a "
            "`core.manual.cancel_work` control Event in the same transaction. Needs the permission "
            "`worklife.cancel_work`. No request body.",
            "parameters": [WORK_ID_PARAMETER],
            "responses": {
                "200": {"description": "Cancelled.", "content": _json(_ref("WorkControlResult"))},
                "401": _response("Unauthorized"),
                "403": _response("Forbidden"),
                "404": _response("NotFound"),
                "405": _response("MethodNotAllowed"),
                "409": _response("WorkControlRefused"),
            },
        }
    },
    "/api/work/{work_id}/retry": {
        "post": {
            "operationId": "work_retry",
            "summary": "Retry a parked or backing-off Work",
            "description": "The Work runs again at once, with the input its failed attempts took and a fresh "
            "attempt budget. Work that is neither parked nor backing off is refused (409). Commits a "
            "`core.manual.retry_work` control Event in the same transaction. Needs the permission "
            "`worklife.retry_work`. No request body.",
            "parameters": [WORK_ID_PARAMETER],
            "responses": {
                "200": {"description": "Retried.", "content": _json(_ref("WorkControlResult"))},
                "401": _response("Unauthorized"),
                "403": _response("Forbidden"),
                "404": _response("NotFound"),
                "405": _response("MethodNotAllowed"),
                "409": _response("WorkControlRefused"),
            },
        }
    },
    "/api/work/{work_id}/send": {
        "post": {
            "operationId": "work_send",
            "summary": "Send operator input to a Work",
            "description": "Accepts the input as an addressed operator Event (source `core.manual`, `work_id` "
            "the Work, R30): the router queues it on the binding the Work runs on next, reason `addressed`, "
            "unless a route selects it. Terminal Work is refused (409). Commits a `core.manual.send_input` "
            "control Event naming the input in the same transaction. Needs the permission "
            "`worklife.send_input`.",
            "parameters": [WORK_ID_PARAMETER],
            "requestBody": {"required": True, "content": _json(_ref("OperatorInput"))},
            "responses": {
                "200": {"description": "Sent.", "content": _json(_ref("WorkControlResult"))},
                "400": _response("Invalid"),
                "401": _response("Unauthorized"),
                "403": _response("Forbidden"),
                "404": _response("NotFound"),
                "405": _response("MethodNotAllowed"),
                "409": _response("WorkControlRefused"),
                "413": _response("TooLarge"),
                "415": _response("UnsupportedMediaType"),
            },
        }
    },
    "/api/work/{work_id}/rebind": {
        "post": {
            "operationId": "work_rebind",
            "summary": "Rebind a Work",
            "description": "Makes `binding` the one the Work's next attempt runs on: recorded after its latest "
            "attempt, taken by a parked or backing-off Work's retry and by its pending queued input. The "
            "binding must be visible in the Work's scope in the live configuration and able to run (409 "
            "otherwise, as for terminal Work). Commits a `core.manual.rebind_work` control Event in the "
            "same transaction. Needs the permission `worklife.rebind_work`.",
            "parameters": [WORK_ID_PARAMETER],
            "requestBody": {
                "required": True,
                "content": _json(
                    {
                        "type": "object",
                        "required": ["binding"],
                        "properties": {"binding": {"type": "string", "minLength": 1, "maxLength": 128}},
                        "additionalProperties": False,
                    }
                ),
            },
            "responses": {
                "200": {"description": "Rebound.", "content": _json(_ref("WorkControlResult"))},
                "400": _response("Invalid"),
                "401": _response("Unauthorized"),
                "403": _response("Forbidden"),
                "404": _response("NotFound"),
                "405": _response("MethodNotAllowed"),
                "409": _response("WorkControlRefused"),
                "415": _response("UnsupportedMediaType"),
            },
        }
    },
    "/api/openapi.json": {
        "get": {
            "operationId": "openapi_json",
            "summary": "This OpenAPI document",
            "security": [],
            "responses": {
                "200": {"description": "The OpenAPI 3.1 document.", "content": _json({"type": "object"})},
                "405": _response("MethodNotAllowed"),
            },
        }
    },
}


# Every operation that needs a token needs a permission too (routing.access.roles): each can answer 403.
for _operations in PATHS.values():
    for _operation in _operations.values():
        if "401" in _operation["responses"]:
            _operation["responses"].setdefault("403", _response("Forbidden"))
            _operation["responses"] = dict(sorted(_operation["responses"].items()))


def openapi_schema(*, server_url: str = "/") -> dict[str, Any]:
    """The OpenAPI 3.1 document of the JSON API, served from ``server_url``."""
    limit = settings.CONDUIT_MAX_EVENT_BYTES
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Conduit API",
            "version": API_VERSION,
            "description": "The JSON API of Conduit, a durable event router. Authenticate with a per-user "
            "API token: `Authorization: Bearer <token>` (create one with `manage.py api_token create "
            f"USERNAME` or in the admin). The token acts with its user's permissions (roles viewer, "
            "operator, admin: reading needs `routing.view_event`, accepting `routing.accept_event`, each "
            "control its own), narrowed further by `--only` when it was created. Request bodies are "
            f"limited to {limit} bytes.",
        },
        "servers": [{"url": server_url.rstrip("/") or "/"}],
        "security": [{"bearerToken": []}],
        "paths": copy.deepcopy(PATHS),
        "components": {
            "securitySchemes": {
                "bearerToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A per-user API token (cdt_…), shown once when created.",
                }
            },
            "schemas": copy.deepcopy(SCHEMAS),
            "responses": copy.deepcopy(RESPONSES),
        },
    }
