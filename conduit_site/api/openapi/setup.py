"""Setup in the OpenAPI document: tracing an Event against a configuration, and candidate
configurations (store, read with diff and tree, preview the impact, apply, discard)."""

from __future__ import annotations

from typing import Any

from conduit_site.api.openapi.common import (
    CANDIDATE_ID_PARAMETER,
    EMPTY_VALUE,
    NULLABLE_TIMESTAMP,
    RUN_ID_PARAMETER,
    TIMESTAMP,
    json_content,
    ref,
    response_ref,
)

TAG: dict[str, str] = {
    "name": "setup",
    "description": (
        "Configuration: trace an Event against the live generation or a candidate, and store, "
        "inspect, preview, apply or discard candidate configurations."
    ),
}
"""Every operation of ``PATHS`` has this tag."""

SCHEMAS: dict[str, Any] = {
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
            "filter": {
                "type": ["array", "null"],
                "items": {"type": "string"},
                "description": "The routes asked, in route order, when the trace was limited to them; "
                "null: every route of the scope.",
            },
            "flow": {
                "type": "string",
                "description": "What flow control would do with the Work's attempt now (docs/flow-control.md); "
                "empty: its binding has none.",
            },
            "flow_hold": {
                "type": "string",
                "enum": ["", "concurrency", "throttle", "debounce", "batch"],
                "description": "The hold flow control would record; empty: the attempt may start.",
            },
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
                        "routes": {"type": "array", "items": ref("ItemChange")},
                        "bindings": {"type": "array", "items": ref("ItemChange")},
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
            ref("Generation"),
            {
                "type": "object",
                "required": ["document", "diff", "tree"],
                "properties": {
                    "document": {"type": "string"},
                    "diff": ref("ConfigDiff"),
                    "tree": {"type": "array", "items": {"type": "object"}},
                },
            },
        ],
    },
    "ImpactJob": {
        "type": "object",
        "description": "An impact preview run in the background: its state and progress, and once `done` "
        "its report (on `GET /api/impact/{run_id}`; null otherwise). `failed` and `cancelled` say why in "
        "`error`: a job nobody polled for CONDUIT_IMPACT_ABANDON_SECONDS stops as `cancelled`.",
        "required": ["id", "url", "candidate", "events", "status", "traced", "total", "error", "report"],
        "properties": {
            "id": {"type": "integer"},
            "url": {"type": "string", "description": "Where to poll it."},
            "candidate": {"type": "integer", "description": "The candidate's id (kept after it is applied)."},
            "events": {"type": "integer", "minimum": 1},
            "status": {"type": "string", "enum": ["running", "done", "failed", "cancelled"]},
            "traced": {"type": "integer", "minimum": 0, "description": "Events looked at so far."},
            "total": {"type": "integer", "minimum": 0, "description": "Events to look at (0 until known)."},
            "started_by": {"type": "string"},
            "started_at": TIMESTAMP,
            "finished_at": NULLABLE_TIMESTAMP,
            "error": {"type": "string"},
            "report": {"anyOf": [ref("ImpactReport"), {"type": "null"}]},
        },
    },
    "StoredCandidate": {
        "allOf": [
            ref("Generation"),
            {"type": "object", "required": ["diff"], "properties": {"diff": ref("ConfigDiff")}},
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
}

RESPONSES: dict[str, Any] = {}

PATHS: dict[str, Any] = {
    "/api/trace": {
        "post": {
            "operationId": "trace",
            "summary": "Trace a hypothetical Event",
            "description": "A dry run of routing: the same handlers and the same decision routing would make "
            'now, against the live generation or the one `generation` names (`"3"`, `"candidate:12"`, '
            "a configuration not yet applied). Writes nothing. The Event is first refused as acceptance "
            "would refuse it; `specversion` and `id` may be left out. `operator: true` traces an operator "
            "Event (source `core.manual`). `filter` limits the trace to the routes it names.",
            "requestBody": {
                "required": True,
                "content": json_content(
                    {
                        "type": "object",
                        "required": ["event"],
                        "properties": {
                            "event": ref("TracedEvent"),
                            "generation": {"type": "string"},
                            "operator": {"type": "boolean", "default": False},
                            "filter": {
                                "type": ["array", "null"],
                                "items": {"type": "string"},
                                "description": "Limit the trace to these routes (slots of the Event's scope): only "
                                "they are asked, in route order. 400 (`invalid_trace`, field `filter`) names an "
                                "unknown route and the scope's routes.",
                            },
                        },
                    }
                ),
            },
            "responses": {
                "200": {
                    "description": "What routing would do, and why.",
                    "content": json_content(ref("Trace")),
                },
                "400": response_ref("Invalid"),
                "401": response_ref("Unauthorized"),
                "404": response_ref("NotFound"),
                "405": response_ref("MethodNotAllowed"),
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
                "content": json_content(
                    {
                        "type": "object",
                        "required": ["document"],
                        "properties": {"document": {"type": "string", "minLength": 1}},
                        "additionalProperties": False,
                    }
                ),
            },
            "responses": {
                "201": {"description": "Stored.", "content": json_content(ref("StoredCandidate"))},
                "400": response_ref("Invalid"),
                "401": response_ref("Unauthorized"),
                "405": response_ref("MethodNotAllowed"),
                "413": response_ref("TooLarge"),
                "415": response_ref("UnsupportedMediaType"),
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
                "200": {"description": "The candidate.", "content": json_content(ref("Candidate"))},
                "401": response_ref("Unauthorized"),
                "404": response_ref("NotFound"),
                "405": response_ref("MethodNotAllowed"),
            },
        }
    },
    "/api/candidates/{candidate_id}/impact": {
        "get": {
            "operationId": "candidate_impact",
            "summary": "Preview a candidate's impact on recent Events",
            "description": "Traces the latest `events` accepted Events again, against the live generation and "
            "against the candidate, and answers only those that would route otherwise, grouped. Writes "
            "nothing. Up to CONDUIT_IMPACT_INLINE_EVENTS (500) Events the report is the answer (200); more "
            "are traced in the background as a job (202, `Location` the job to poll until it is `done`), "
            "the candidate's running job when it has one. A user or token with as many jobs running as "
            "its quota allows (CONDUIT_IMPACT_JOBS_PER_LOGIN, CONDUIT_IMPACT_JOBS_PER_TOKEN, "
            "CONDUIT_IMPACT_JOBS_TOTAL on the site) is refused with 429 and Retry-After.",
            "parameters": [
                CANDIDATE_ID_PARAMETER,
                {
                    "name": "events",
                    "in": "query",
                    "schema": {
                        "anyOf": [{"type": "integer", "minimum": 1, "maximum": 10000}, EMPTY_VALUE],
                        "default": 1000,
                    },
                    "description": "How many of the latest Events (empty: the default).",
                },
            ],
            "responses": {
                "200": {"description": "What would change.", "content": json_content(ref("ImpactReport"))},
                "202": {
                    "description": "Too many Events to answer at once: the job that traces them.",
                    "headers": {"Location": {"schema": {"type": "string"}, "description": "The job."}},
                    "content": json_content(ref("ImpactJob")),
                },
                "400": response_ref("Invalid"),
                "401": response_ref("Unauthorized"),
                "404": response_ref("NotFound"),
                "405": response_ref("MethodNotAllowed"),
            },
        }
    },
    "/api/impact/{run_id}": {
        "get": {
            "operationId": "impact_job",
            "summary": "Poll an impact preview job",
            "description": "The job's state and progress, and once `done` its report. Polling keeps it going: "
            "a job nobody polled for CONDUIT_IMPACT_ABANDON_SECONDS (30) stops. Needs `routing.view_event`.",
            "parameters": [RUN_ID_PARAMETER],
            "responses": {
                "200": {"description": "The job.", "content": json_content(ref("ImpactJob"))},
                "401": response_ref("Unauthorized"),
                "404": response_ref("NotFound"),
                "405": response_ref("MethodNotAllowed"),
            },
        },
        "delete": {
            "operationId": "impact_job_cancel",
            "summary": "Cancel an impact preview job",
            "description": "Stops the job at its next chunk (status `cancelled`, `error` naming who cancelled "
            "it); a job that ended stays as it is. A job is its candidate's, shared by whoever asked for it: "
            "any user who may read may cancel it. Needs `routing.view_event`.",
            "parameters": [RUN_ID_PARAMETER],
            "responses": {
                "200": {"description": "The job, as it is now.", "content": json_content(ref("ImpactJob"))},
                "401": response_ref("Unauthorized"),
                "404": response_ref("NotFound"),
                "405": response_ref("MethodNotAllowed"),
            },
        },
    },
    "/api/candidates/{candidate_id}/apply": {
        "post": {
            "operationId": "candidate_apply",
            "summary": "Apply a candidate as the next live generation",
            "description": "The candidate's document becomes the next applied generation, `created_by` the "
            "token's user; the candidate is removed. With `expected_live` (the live generation number the "
            "diff was read against, 0 for none; null: not checked) a newer live generation refuses the apply (409 "
            "`stale_candidate`); a document the registered handlers or executors no longer accept is a 409 "
            "too. Needs the permission `routing.apply_configuration`.",
            "parameters": [CANDIDATE_ID_PARAMETER],
            "requestBody": {
                "required": False,
                "content": json_content(
                    {
                        "type": "object",
                        "properties": {"expected_live": {"type": ["integer", "null"], "minimum": 0}},
                        "additionalProperties": False,
                    }
                ),
            },
            "responses": {
                "200": {
                    "description": "The new live generation.",
                    "content": json_content(ref("Generation")),
                },
                "400": response_ref("Invalid"),
                "401": response_ref("Unauthorized"),
                "404": response_ref("NotFound"),
                "405": response_ref("MethodNotAllowed"),
                "409": {
                    "description": "Live moved on, or the document is refused.",
                    "content": json_content(ref("Error")),
                },
                "413": response_ref("TooLarge"),
                "415": response_ref("UnsupportedMediaType"),
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
                    "content": json_content(
                        {
                            "type": "object",
                            "required": ["discarded"],
                            "properties": {"discarded": {"type": "integer"}},
                        }
                    ),
                },
                "401": response_ref("Unauthorized"),
                "404": response_ref("NotFound"),
                "405": response_ref("MethodNotAllowed"),
            },
        }
    },
}
