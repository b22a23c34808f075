"""JSON API endpoints of pauses and schedules (token-authenticated): ``GET /api/pauses`` (in
force), ``POST /api/pauses`` (pause a scope, a binding, a route or a schedule),
``POST /api/pauses/resume``, ``GET /api/schedules`` (next and last fire times) and
``POST /api/schedules/fire`` (fire one now).

Writes need ``worklife.pause_work``, reads ``routing.view_event``. A refused control is a 409
naming why, malformed input a 400 naming the field; nothing is stored then.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse

import controls.pauses
from causal.clock import Clock, system_clock
from conduit_site.api.auth import api_view, request_json
from controls.pauses import PauseInvalid, PauseRefused
from infra.times import timestamp
from routing.access.roles import VIEW_EVENT
from routing.config.selectors import live_generation, load_configuration
from routing.schedules import schedule_rows
from worklife.models import Pause
from worklife.pauses import pause_line

# The trusted clock the endpoints use (tests inject a fake one).
clock: Clock = system_clock

ERRORS = {PauseRefused: (409, "refused"), PauseInvalid: (400, "invalid_input")}
PAUSE_FIELDS = frozenset({"kind", "scope", "name", "reason", "until"})
RESUME_FIELDS = frozenset({"kind", "scope", "name"})
FIRE_FIELDS = frozenset({"scope", "name"})


def pause_json(pause: Pause) -> dict[str, Any]:
    return {
        "id": pause.pk,
        "kind": pause.kind,
        "scope": pause.scope,
        "name": pause.name,
        "paused_by": pause.paused_by,
        "reason": pause.reason,
        "created_at": timestamp(pause.created_at),
        "until": timestamp(pause.until),
        "ended_at": timestamp(pause.ended_at),
        "ended_by": pause.ended_by,
        "line": pause_line(pause),
    }


def _body(request: HttpRequest, fields: frozenset[str]) -> dict[str, Any]:
    body = request_json(request)
    if not isinstance(body, dict):
        raise PauseInvalid("body", "the body must be a JSON object")
    unknown = sorted(set(body) - fields)
    if unknown:
        raise PauseInvalid(unknown[0], f"unknown field: this control takes {', '.join(sorted(fields))}")
    return body


@api_view(["GET", "POST"], permission={"GET": VIEW_EVENT, "POST": controls.pauses.PERMISSION}, errors=ERRORS)
def pauses_collection(request: HttpRequest) -> JsonResponse:
    """``GET``: the pauses in force, oldest first. ``POST``: pause ``{kind, scope, name?, reason?,
    until?}`` (``until``: a duration like ``30m`` or an RFC 3339 time) (201)."""
    if request.method == "GET":
        return JsonResponse({"pauses": [pause_json(p) for p in controls.pauses.pauses_in_force(clock)]})
    body = _body(request, PAUSE_FIELDS)
    target = controls.pauses.target_parse(body.get("kind"), body.get("scope"), body.get("name"))
    reason = body.get("reason") or ""
    if not isinstance(reason, str):
        raise PauseInvalid("reason", "expected text")
    until = body.get("until")
    if until is not None and not isinstance(until, str):
        raise PauseInvalid("until", "expected a duration like 30m or an RFC 3339 time")
    result = controls.pauses.pause(
        target=target,
        user=request.user,
        reason=reason,
        until=controls.pauses.until_parse(until, now=clock()),
        clock=clock,
    )
    return JsonResponse(pause_json(result.pause), status=201)


@api_view(["POST"], permission=controls.pauses.PERMISSION, errors=ERRORS)
def pauses_resume(request: HttpRequest) -> JsonResponse:
    """Resume ``{kind, scope, name?}``; a route's held Events route at once, in order."""
    body = _body(request, RESUME_FIELDS)
    target = controls.pauses.target_parse(body.get("kind"), body.get("scope"), body.get("name"))
    result = controls.pauses.resume(target=target, user=request.user, clock=clock)
    return JsonResponse({**pause_json(result.pause), "released": result.released})


@api_view(["GET"], permission=VIEW_EVENT)
def schedules_collection(request: HttpRequest) -> JsonResponse:
    """The live configuration's schedules with their next and last fire times and pauses."""
    generation = live_generation()
    rows = schedule_rows(load_configuration(generation), now=clock()) if generation is not None else []
    return JsonResponse(
        {
            "schedules": [
                {
                    "scope": row.spec.scope,
                    "name": row.spec.name,
                    "when": row.spec.when,
                    "type": row.spec.type,
                    "overlap": row.spec.overlap,
                    "catch_up": row.spec.catch_up,
                    "next_fire": timestamp(row.next_fire),
                    "last_fire": timestamp(row.last_fire),
                    "last_outcome": row.last_outcome,
                    "last_event": row.last_event,
                    "fired": row.fired,
                    "skipped": row.skipped,
                    "paused": row.paused,
                }
                for row in rows
            ]
        }
    )


@api_view(["POST"], permission=controls.pauses.PERMISSION, errors=ERRORS)
def schedules_fire(request: HttpRequest) -> JsonResponse:
    """Fire ``{scope, name}`` now: its Event is accepted at once (201)."""
    body = _body(request, FIRE_FIELDS)
    for field in ("scope", "name"):
        if not isinstance(body.get(field), str) or not body.get(field):
            raise PauseInvalid(field, "required")
    event = controls.pauses.schedule_fire(
        scope=body["scope"], name=body["name"], user=request.user, clock=clock
    )
    return JsonResponse({"seq": event.seq, "id": event.envelope_id, "type": event.type}, status=201)
