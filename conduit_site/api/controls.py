"""JSON API endpoints of the operator controls and of doctor (token-authenticated, see
``conduit_site.api.auth``): ``POST /api/events/{seq}/skip``, ``POST /api/events/{seq}/reroute``
(R20), ``POST /api/events/{seq}/replay`` and ``POST /api/events/replay`` (several) and
``GET /api/doctor`` (R23).

Each control needs its own permission (``routing.skip_event``, ``routing.reroute_event``,
``routing.replay_event``), doctor ``routing.view_event``: 403 without it
(:func:`conduit_site.api.auth.api_view` checks). An Event in the wrong state is a 409
(``wrong_state``, naming the copy of an Event already rerouted), an unknown seq a 404; nothing is
changed then. A replay of several answers each Event's outcome.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, JsonResponse

import controls.events
from causal.clock import Clock, system_clock
from conduit_site.api.auth import ApiError, api_view, request_json
from conduit_site.api.work import job_accepted
from conduit_site.doctor import doctor
from controls import jobs, replay
from controls.bulk import BulkCountChanged
from routing.acceptance.envelopes import json_whole
from routing.access.roles import VIEW_EVENT

# The trusted clock the endpoints use (tests inject a fake one).
clock: Clock = system_clock

CONTROL_ERRORS = {controls.events.ControlRefused: (409, "wrong_state")}
REPLAY_ERRORS = {replay.ReplayInvalid: (400, "invalid_replay"), BulkCountChanged: (409, "count_changed")}
# A replay body names at most REPLAY_LIMIT seqs: room for each with its separator.
REPLAY_BODY_BYTES = replay.REPLAY_LIMIT * 24 + 1024


def _control(
    request: HttpRequest, seq: int, action: str, service: Callable[..., controls.events.ControlResult]
):
    result = service(seq=seq, user=request.user, clock=clock)
    return JsonResponse(result.as_dict())


@api_view(["POST"], permission=controls.events.PERMISSIONS[controls.events.SKIP_EVENT], errors=CONTROL_ERRORS)
def event_skip_view(request: HttpRequest, seq: int) -> JsonResponse:
    """Skip the unrouted Event ``seq``: routed as skipped without asking its routes (R21)."""
    return _control(request, seq, controls.events.SKIP_EVENT, controls.events.event_skip)


@api_view(
    ["POST"], permission=controls.events.PERMISSIONS[controls.events.REROUTE_EVENT], errors=CONTROL_ERRORS
)
def event_reroute_view(request: HttpRequest, seq: int) -> JsonResponse:
    """Reroute the Event ``seq``: forget an unrouted Event's failures, or accept a copy of a
    failed or skipped one (R22)."""
    return _control(request, seq, controls.events.REROUTE_EVENT, controls.events.event_reroute)


@api_view(
    ["POST"], permission=controls.events.PERMISSIONS[controls.events.REPLAY_EVENT], errors=CONTROL_ERRORS
)
def event_replay_view(request: HttpRequest, seq: int) -> JsonResponse:
    """Replay the settled Event ``seq``: accept a copy (id ``replay/<id>/<n>``) that routes under
    the live configuration."""
    return _control(request, seq, controls.events.REPLAY_EVENT, replay.event_replay)


@api_view(
    ["POST"], permission=controls.events.PERMISSIONS[controls.events.REPLAY_EVENT], errors=REPLAY_ERRORS
)
def events_replay_view(request: HttpRequest) -> JsonResponse:
    """Replay several Events as a bulk job: ``{"seqs": [...], "count": N}`` (at most
    ``REPLAY_LIMIT``; ``count`` is how many Events the caller confirmed, required). Answers 202
    with the job, which the route loop runs in batches (``GET /api/jobs/{id}``: its progress,
    each Event's copy or refusal)."""
    body = request_json(request, max_bytes=REPLAY_BODY_BYTES)
    if not isinstance(body, dict) or set(body) - {"seqs", "count"} or "seqs" not in body:
        raise ApiError(400, "invalid_replay", 'expected {"seqs": [Event seqs], "count": N}', field="seqs")
    seqs = body["seqs"]
    if isinstance(seqs, list):
        seqs = [json_whole(seq) for seq in seqs]  # 7.0 is the integer 7 in JSON
    job = jobs.events_replay_job(
        seqs=seqs, count=json_whole(body.get("count")), user=request.user, clock=clock
    )
    return job_accepted(job)


@api_view(["GET"], permission=VIEW_EVENT)
def doctor_report(request: HttpRequest) -> JsonResponse:
    """Doctor's checks: ``{"ok": bool, "at": …, "checks": [...]}``, always 200 (R23)."""
    return JsonResponse(doctor(clock=clock).as_dict())
