"""Work in the OpenAPI document: listing and reading Work, and the operator controls on one Work
(create, cancel, retry, send input, rebind)."""

from __future__ import annotations

from typing import Any

from conduit_site.api.openapi.common import (
    BINDING_NAME,
    EMPTY_VALUE,
    ID,
    JOB_ID_PARAMETER,
    NO_NUL,
    NOT_RESERVED_NAME,
    NULLABLE_TIMESTAMP,
    SCOPE_PATH,
    TIMESTAMP,
    WORK_ID_PARAMETER,
    json_content,
    ref,
    response_ref,
)
from worklife.selectors import WORK_STATES

# The states the Work list filters by ("": any), as worklife.selectors.WorkFilter takes them.
WORK_STATE_FILTER: dict[str, Any] = {"type": "string", "enum": ["", *WORK_STATES]}

TAG: dict[str, str] = {
    "name": "work",
    "description": (
        "Work: list and read it, and the operator controls on one Work (create, cancel, retry, send "
        "input, rebind), each recorded as a control Event."
    ),
}
"""Every operation of ``PATHS`` has this tag."""

SCHEMAS: dict[str, Any] = {
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
            "losses": {
                "type": "integer",
                "description": "Attempts lost in a row with their work loop (run again at once; "
                "CONDUIT_MAX_LOSSES of them park the Work).",
            },
            "pending_run": {"type": "boolean", "description": "Runs even without pending input."},
            "retry_at": {**NULLABLE_TIMESTAMP, "description": "Backing off: no attempt before this time."},
            "parked_at": {
                **NULLABLE_TIMESTAMP,
                "description": "Parked after too many failures: an operator retries or cancels it.",
            },
            "last_error": {"type": "string", "description": "The last failure or refused dispatch."},
            "flow_hold": {
                "type": ["object", "null"],
                "description": "Flow control's hold (docs/flow-control.md): null when none was recorded; "
                "it holds until `until`.",
                "properties": {
                    "kind": {"type": "string", "enum": ["concurrency", "throttle", "debounce", "batch"]},
                    "reason": {"type": "string"},
                    "until": NULLABLE_TIMESTAMP,
                    "gate": {"type": "string", "description": "The gate it waits on ('': none)."},
                },
            },
        },
    },
    "Attempt": {
        "type": "object",
        "description": "One execution of a Work, its configuration pinned at start.",
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
            "idempotency_key": {
                "type": "string",
                "description": "The same for every attempt that presents the same input again (after "
                "a failed or lost one), new after a success: what an executor makes its side effects "
                "exactly-once with.",
            },
        },
    },
    "WorkDetail": {
        "allOf": [
            ref("Work"),
            {
                "type": "object",
                "properties": {
                    "attempts": {
                        "type": "array",
                        "items": ref("Attempt"),
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
            "work": {"type": "array", "items": ref("Work"), "description": "Newest (highest id) first."},
            "next_before": {
                "type": ["integer", "null"],
                "description": "Pass as `before` for the next page; null on the last page.",
            },
        },
    },
    "OperatorInput": {
        "type": "object",
        "description": "Operator input, accepted as an addressed operator Event (source `core.manual`, "
        "`work_id` the Work): the router queues it on the binding the Work runs on next, reason "
        "`addressed`, unless a route selects it.",
        "required": ["type"],
        "properties": {
            "type": {
                "type": "string",
                "minLength": 1,
                "maxLength": 255,
                "pattern": "^[^\\u0000]*[^\\s\\u0000][^\\u0000]*$",
                **NOT_RESERVED_NAME,
                "description": "The operator's own type (not blank, no NUL); `core` and `core.*` are reserved.",
            },
            "data": ref("JsonValue"),
            "subject": {**NO_NUL, "maxLength": 512},
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
            "outlook": {
                "type": "string",
                "description": "retry: what happens next when the Work does not simply run again at once "
                "(its binding only queues input, or cannot run); empty otherwise.",
            },
            "reason": {"type": "string", "description": "cancel: the operator's reason, if given."},
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
    "WorkBulkRequest": {
        "type": "object",
        "description": "Which control to apply and to which Work: `ids`, or `filter` (the Work list's "
        "filters; `status` takes `parked` and `backing_off` too), not both, with `count`; at most 10,000 Work.",
        "required": ["action", "count"],
        "oneOf": [
            {"required": ["ids", "count"], "not": {"required": ["filter"]}},
            {"required": ["filter", "count"], "not": {"required": ["ids"]}},
        ],
        "properties": {
            "action": {"type": "string", "enum": ["retry", "cancel"]},
            "ids": {"type": "array", "items": ID, "maxItems": 10000},
            "count": {
                "type": "integer",
                "minimum": 0,
                "description": "How many Work the caller saw (the filter's matches, or the distinct `ids`), "
                "required: another number now is refused with 409 `count_changed` and nothing is stored.",
            },
            "filter": {
                "type": "object",
                "properties": {
                    "scope": {**NO_NUL, "maxLength": 255},
                    "status": WORK_STATE_FILTER,
                    "binding": {**NO_NUL, "maxLength": 128},
                    "key": {**NO_NUL, "maxLength": 512},
                },
                "additionalProperties": False,
            },
        },
        "additionalProperties": False,
    },
    "WorkBulkCountChanged": {
        "type": "object",
        "required": ["error", "message", "confirmed", "count"],
        "properties": {
            "error": {"type": "string", "enum": ["count_changed"]},
            "message": {"type": "string"},
            "confirmed": {"type": "integer", "description": "The `count` the request confirmed."},
            "count": {"type": "integer", "description": "How many Work the request names now."},
        },
    },
    "BulkJob": {
        "type": "object",
        "description": "A bulk control stored as a job (retry or cancel of Work, replay of Events): the route "
        "loop runs it in batches, each target with its own control Event; `position` of `total` have their "
        "outcome so far. `items` are the outcomes asked for (`GET /api/jobs/{job_id}?after=&limit=`), of the "
        "targets acted on.",
        "required": ["id", "kind", "state", "total", "position", "done", "refused", "items"],
        "properties": {
            "id": {"type": "integer"},
            "kind": {"type": "string", "enum": ["retry_work", "cancel_work", "replay_event"]},
            "state": {
                "type": "string",
                "enum": ["pending", "running", "done", "cancelled"],
                "description": "pending: no batch run yet; cancelled: the targets from `position` on were not "
                "acted on.",
            },
            "description": {"type": "string"},
            "created_by": {"type": "string"},
            "created_at": TIMESTAMP,
            "finished_at": NULLABLE_TIMESTAMP,
            "cancelled_by": {"type": "string"},
            "total": {"type": "integer"},
            "position": {"type": "integer", "description": "How many targets have their outcome."},
            "done": {"type": "integer"},
            "refused": {"type": "integer", "description": "Targets refused or not found."},
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["position", "target", "outcome", "message", "control_seq", "copy_seq"],
                    "properties": {
                        "position": {"type": "integer"},
                        "target": {"type": "integer", "description": "The Work's id or the Event's seq."},
                        "outcome": {
                            "type": "string",
                            "enum": ["done", "refused", "not_found"],
                        },
                        "message": {"type": "string"},
                        "control_seq": {"type": ["integer", "null"]},
                        "copy_seq": {"type": ["integer", "null"], "description": "A replay's copy."},
                    },
                },
            },
        },
    },
}

RESPONSES: dict[str, Any] = {
    "WorkControlRefused": {
        "description": "The Work's state or the live configuration refuses the control; nothing was stored.",
        "content": json_content(ref("WorkControlRefusal")),
    },
}

PATHS: dict[str, Any] = {
    "/api/work": {
        "get": {
            "operationId": "work_list",
            "summary": "Work, newest first",
            "parameters": [
                {
                    "name": "scope",
                    "in": "query",
                    "schema": {**NO_NUL, "maxLength": 255},
                    "description": "Exact scope.",
                },
                {
                    "name": "status",
                    "in": "query",
                    "schema": WORK_STATE_FILTER,
                    "description": (
                        "The Work's state (empty: any): `parked`, ready Work parked after too many failures;"
                        " `backing_off`, ready Work whose next try is later; `awaiting_binding`, ready Work whose"
                        " binding cannot run it (queue-only): it waits for a rebind; `flow_held`, ready Work"
                        " flow control holds (docs/flow-control.md); `paused`, ready Work a pause of its scope or"
                        " binding holds; `ready`, none of them."
                    ),
                },
                {
                    "name": "binding",
                    "in": "query",
                    "schema": {**NO_NUL, "maxLength": 128},
                    "description": "The binding the Work runs on (exact).",
                },
                {
                    "name": "key",
                    "in": "query",
                    "schema": {**NO_NUL, "maxLength": 512},
                    "description": "The start of a correlation key the Work owns (a whole key, or `pr:acme/web` for every "
                    "such key; with `scope`, that scope's keys).",
                },
                {
                    "name": "before",
                    "in": "query",
                    "schema": ref("OptionalId"),
                    "description": "Only Work with a lower id (the previous page's `next_before`; empty: the "
                    "first page).",
                },
                {
                    "name": "limit",
                    "in": "query",
                    "schema": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 200}, EMPTY_VALUE]},
                    "description": "Work a page (empty: the default).",
                },
            ],
            "responses": {
                "200": {"description": "One page of Work.", "content": json_content(ref("WorkPage"))},
                "400": response_ref("Invalid"),
                "401": response_ref("Unauthorized"),
                "405": response_ref("MethodNotAllowed"),
            },
        },
        "post": {
            "operationId": "work_create",
            "summary": "Create a Work with its first input",
            "description": "Opens a Work in `scope` (a scope of the live configuration) on `binding` (a "
            "binding visible there that can run) and accepts `input` as its first input, an addressed "
            "operator Event naming it, which is also its trigger. The Work runs once the router "
            "queues that input. Commits a `core.manual.create_work` control Event in the same transaction. "
            "Needs the permission `worklife.create_work`.",
            "requestBody": {
                "required": True,
                "content": json_content(
                    {
                        "type": "object",
                        "required": ["scope", "binding", "input"],
                        "properties": {
                            "scope": SCOPE_PATH,
                            "binding": BINDING_NAME,
                            "input": ref("OperatorInput"),
                        },
                        "additionalProperties": False,
                    }
                ),
            },
            "responses": {
                "201": {
                    "description": "Created.",
                    "headers": {"Location": {"schema": {"type": "string"}, "description": "The new Work."}},
                    "content": json_content(ref("WorkControlResult")),
                },
                "400": response_ref("Invalid"),
                "401": response_ref("Unauthorized"),
                "403": response_ref("Forbidden"),
                "405": response_ref("MethodNotAllowed"),
                "409": response_ref("WorkControlRefused"),
                "413": response_ref("TooLarge"),
                "415": response_ref("UnsupportedMediaType"),
            },
        },
    },
    "/api/work/{work_id}": {
        "get": {
            "operationId": "work_detail",
            "summary": "A Work with its attempts and keys",
            "parameters": [WORK_ID_PARAMETER],
            "responses": {
                "200": {"description": "The Work.", "content": json_content(ref("WorkDetail"))},
                "401": response_ref("Unauthorized"),
                "404": response_ref("NotFound"),
                "405": response_ref("MethodNotAllowed"),
            },
        }
    },
    "/api/work/{work_id}/cancel": {
        "post": {
            "operationId": "work_cancel",
            "summary": "Cancel a Work",
            "description": "Cancels the Work's active attempts and waits, removes its timers and its queue "
            "eligibility and makes it terminal, atomically; the work loop holding a cancelled attempt "
            "stops its process after the commit. Terminal Work is refused (409). Commits a "
            "`core.manual.cancel_work` control Event in the same transaction. Needs the permission "
            "`worklife.cancel_work`. The body is optional: `reason`, kept in the control Event's data and "
            "shown in the Work's history.",
            "parameters": [WORK_ID_PARAMETER],
            "requestBody": {
                "required": False,
                "content": json_content(
                    {
                        "type": "object",
                        "properties": {"reason": {"type": "string", "maxLength": 500}},
                        "additionalProperties": False,
                    }
                ),
            },
            "responses": {
                "200": {"description": "Cancelled.", "content": json_content(ref("WorkControlResult"))},
                "400": response_ref("Invalid"),
                "401": response_ref("Unauthorized"),
                "403": response_ref("Forbidden"),
                "404": response_ref("NotFound"),
                "405": response_ref("MethodNotAllowed"),
                "409": response_ref("WorkControlRefused"),
                "413": response_ref("TooLarge"),
            },
        }
    },
    "/api/work/bulk": {
        "post": {
            "operationId": "work_bulk",
            "summary": "Retry or cancel several Work, as a bulk job",
            "description": "Stores a job applying `retry` or `cancel` to each Work named by `ids` or matched by "
            "`filter` (at most 10,000; more is refused with 400 before anything is stored; `count`, required, is the "
            "number of Work the caller saw, and another number now is a 409) and answers 202 with it at once. The "
            "route loop runs it in batches: each Work gets its own `core.manual.<action>` control Event and outcome; "
            "`GET /api/jobs/{job_id}` shows the progress. Needs the permission of the control "
            "(`worklife.retry_work` or `worklife.cancel_work`).",
            "requestBody": {"required": True, "content": json_content(ref("WorkBulkRequest"))},
            "responses": {
                "202": {
                    "description": "The job, stored: the route loop runs it (`Location`: its address).",
                    "content": json_content(ref("BulkJob")),
                },
                "400": response_ref("Invalid"),
                "401": response_ref("Unauthorized"),
                "403": response_ref("Forbidden"),
                "405": response_ref("MethodNotAllowed"),
                "409": {
                    "description": "The filter matches another number of Work than `count`: nothing was done.",
                    "content": json_content(ref("WorkBulkCountChanged")),
                },
                "413": response_ref("TooLarge"),
                "415": response_ref("UnsupportedMediaType"),
            },
        }
    },
    "/api/jobs/{job_id}": {
        "get": {
            "operationId": "job_get",
            "summary": "A bulk job and its progress",
            "description": "The job's state, `position` of `total` targets with their outcome, how many were done and "
            "refused, and the outcomes from the position `after` (`limit` of them, at most 1,000).",
            "parameters": [
                JOB_ID_PARAMETER,
                {
                    "name": "after",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": -1},
                    "description": "Outcomes after this position (-1, the default: from the first).",
                },
                {
                    "name": "limit",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": 1, "maximum": 1000},
                    "description": "How many outcomes (default 100).",
                },
            ],
            "responses": {
                "200": {"description": "The job.", "content": json_content(ref("BulkJob"))},
                "400": response_ref("Invalid"),
                "401": response_ref("Unauthorized"),
                "404": response_ref("NotFound"),
                "405": response_ref("MethodNotAllowed"),
            },
        }
    },
    "/api/jobs/{job_id}/cancel": {
        "post": {
            "operationId": "job_cancel",
            "summary": "Stop a bulk job",
            "description": "The batch in progress commits; the targets left are not acted on (outcome `skipped`). "
            "A finished job is answered as it is. Needs the permission of the job's control. No request body.",
            "parameters": [JOB_ID_PARAMETER],
            "responses": {
                "200": {"description": "The job, cancelled.", "content": json_content(ref("BulkJob"))},
                "401": response_ref("Unauthorized"),
                "403": response_ref("Forbidden"),
                "404": response_ref("NotFound"),
                "405": response_ref("MethodNotAllowed"),
            },
        }
    },
    "/api/work/{work_id}/retry": {
        "post": {
            "operationId": "work_retry",
            "summary": "Retry a parked or backing-off Work",
            "description": "The Work's input is ready again, with the input its failed attempts took and a "
            "fresh attempt budget: it runs at once when its binding can run it; `outlook` says what "
            "happens when it cannot (a queue-only binding runs nothing). Work that is neither parked "
            "nor backing off is refused (409). Commits a "
            "`core.manual.retry_work` control Event in the same transaction. Needs the permission "
            "`worklife.retry_work`. No request body.",
            "parameters": [WORK_ID_PARAMETER],
            "responses": {
                "200": {"description": "Retried.", "content": json_content(ref("WorkControlResult"))},
                "401": response_ref("Unauthorized"),
                "403": response_ref("Forbidden"),
                "404": response_ref("NotFound"),
                "405": response_ref("MethodNotAllowed"),
                "409": response_ref("WorkControlRefused"),
            },
        }
    },
    "/api/work/{work_id}/send": {
        "post": {
            "operationId": "work_send",
            "summary": "Send operator input to a Work",
            "description": "Accepts the input as an addressed operator Event (source `core.manual`, `work_id` "
            "the Work): the router queues it on the binding the Work runs on next, reason `addressed`, "
            "unless a route selects it. Terminal Work is refused (409). Commits a `core.manual.send_input` "
            "control Event naming the input in the same transaction. Needs the permission "
            "`worklife.send_input`.",
            "parameters": [WORK_ID_PARAMETER],
            "requestBody": {"required": True, "content": json_content(ref("OperatorInput"))},
            "responses": {
                "200": {"description": "Sent.", "content": json_content(ref("WorkControlResult"))},
                "400": response_ref("Invalid"),
                "401": response_ref("Unauthorized"),
                "403": response_ref("Forbidden"),
                "404": response_ref("NotFound"),
                "405": response_ref("MethodNotAllowed"),
                "409": response_ref("WorkControlRefused"),
                "413": response_ref("TooLarge"),
                "415": response_ref("UnsupportedMediaType"),
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
                "content": json_content(
                    {
                        "type": "object",
                        "required": ["binding"],
                        "properties": {"binding": BINDING_NAME},
                        "additionalProperties": False,
                    }
                ),
            },
            "responses": {
                "200": {"description": "Rebound.", "content": json_content(ref("WorkControlResult"))},
                "400": response_ref("Invalid"),
                "401": response_ref("Unauthorized"),
                "403": response_ref("Forbidden"),
                "404": response_ref("NotFound"),
                "405": response_ref("MethodNotAllowed"),
                "409": response_ref("WorkControlRefused"),
                "415": response_ref("UnsupportedMediaType"),
            },
        }
    },
}
