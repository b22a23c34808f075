"""The setup session through the JSON API: store a candidate, read its diff against live and
its effective route tree, preview its impact, apply or discard it. (Tracing an Event against a
candidate is ``POST /api/trace`` with ``generation: "candidate:ID"``.)

An impact preview over at most ``CONDUIT_IMPACT_INLINE_EVENTS`` Events is answered at once; a
larger one is a job (``routing.setup.impact_runs``), traced in a thread of the web process as
the console's are: ``202`` with the job and its ``Location`` (``/api/impact/ID``), which the
client polls until it is ``done`` (the report) and may cancel (``DELETE``). Past its login's or
token's quota of running jobs, ``429`` with ``Retry-After``; a job nobody polls stops."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.urls import reverse

from causal.clock import Clock, system_clock
from conduit_site.api.auth import ApiError, api_view, request_json
from infra.times import timestamp
from routing.acceptance.envelopes import json_whole
from routing.access.roles import APPLY_CONFIGURATION, VIEW_EVENT
from routing.config.problems import ConfigInvalid
from routing.config.reader import MAX_DOCUMENT_BYTES
from routing.config.selectors import load_configuration
from routing.config.services import config_candidate
from routing.models import Generation, ImpactRun, ImpactRunStatus
from routing.setup.candidates import (
    CandidateNotFound,
    CandidateStale,
    candidate_apply,
    candidate_diff,
    candidate_discard,
    candidate_get,
    effective_tree,
)
from routing.setup.impact import ImpactInvalid, check_limit, impact_preview
from routing.setup.impact_runs import (
    ImpactBusy,
    impact_run_cancel,
    impact_run_get,
    impact_run_launch,
    impact_run_lost,
    impact_run_report,
    impact_run_start,
    impact_run_waited,
)

# The trusted clock, and how a started job is traced: in a thread of this process (tests
# inject their own).
clock: Clock = system_clock
launch: Callable[[int, Clock], Any] = impact_run_launch

# A document of MAX_DOCUMENT_BYTES may double in size as a JSON string (escaped quotes,
# backslashes, newlines).
MAX_BODY_BYTES = 2 * MAX_DOCUMENT_BYTES + 1024
ERRORS = {
    CandidateNotFound: (404, "not_found"),
    CandidateStale: (409, "stale_candidate"),
    ImpactInvalid: (400, "invalid_impact"),
}


def problems_json(exc: ConfigInvalid) -> list[dict[str, Any]]:
    """Every problem of an invalid document with its place and line."""
    return [{"place": p.place, "message": p.message, "line": p.line} for p in exc.problems]


def invalid_configuration(exc: ConfigInvalid) -> ApiError:
    count = len(exc.problems)
    return ApiError(
        400,
        "invalid_configuration",
        f"the document is not valid ({count} problem{'s' if count != 1 else ''}); nothing was stored",
        field="document",
        problems=problems_json(exc),
    )


def generation_json(generation: Generation) -> dict[str, Any]:
    return {
        "id": generation.pk,
        "kind": generation.kind,
        "number": generation.number,
        "digest": generation.digest,
        "created_at": timestamp(generation.created_at),
        "created_by": generation.created_by,
        "note": generation.note,
    }


def _object(request: HttpRequest, fields: set[str], *, allow_empty: bool = False) -> dict[str, Any]:
    body = request_json(request, max_bytes=MAX_BODY_BYTES, allow_empty=allow_empty)
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_input", "the body must be a JSON object", field=None)
    unknown = sorted(set(body) - fields)
    if unknown:
        raise ApiError(
            400, "invalid_input", f"unknown field: this takes {', '.join(sorted(fields))}", field=unknown[0]
        )
    return body


@api_view(["POST"], permission=APPLY_CONFIGURATION, errors=ERRORS)
def candidates(request: HttpRequest) -> JsonResponse:
    """Validate ``document`` and store it as a candidate (201, with its diff against live);
    400 lists every problem with its place and line, nothing stored."""
    body = _object(request, {"document"})
    document = body.get("document")
    if not isinstance(document, str):
        raise ApiError(
            400, "invalid_input", "document must be the YAML document as a string", field="document"
        )
    try:
        candidate = config_candidate(
            document=document, clock=system_clock, created_by=request.user.get_username()
        )
    except ConfigInvalid as exc:
        raise invalid_configuration(exc) from None
    return JsonResponse(
        {**generation_json(candidate), "diff": candidate_diff(candidate).as_dict()}, status=201
    )


@api_view(["GET"], permission=VIEW_EVENT, errors=ERRORS)
def candidate_detail(request: HttpRequest, candidate_id: int) -> JsonResponse:
    """The candidate: its document, its diff against live per scope, its effective route tree."""
    candidate = candidate_get(candidate_id)
    return JsonResponse(
        {
            **generation_json(candidate),
            "document": candidate.document,
            "diff": candidate_diff(candidate).as_dict(),
            "tree": effective_tree(load_configuration(candidate)),
        }
    )


@api_view(["GET"], permission=VIEW_EVENT, errors=ERRORS)
def candidate_impact(request: HttpRequest, candidate_id: int) -> JsonResponse:
    """The impact preview over the latest ``events`` Events (default 1000, at most 10000): at
    once up to ``CONDUIT_IMPACT_INLINE_EVENTS``, else a job (202; 429 past a quota)."""
    raw = request.GET.get("events", "")
    events = None
    if raw != "":
        if not (raw.isascii() and raw.isdigit()) or len(raw) > 6:
            raise ImpactInvalid("events", f"events must be a whole number from 1 to 10000, not {raw!r}")
        events = int(raw)
    candidate = candidate_get(candidate_id)
    if check_limit(events) <= settings.CONDUIT_IMPACT_INLINE_EVENTS:
        report = impact_preview(candidate=candidate, clock=clock, events=events)
        return JsonResponse(report.as_dict())
    token = getattr(request, "api_token", None)
    try:
        run, created = impact_run_start(
            candidate=candidate,
            clock=clock,
            events=events,
            by=request.user.get_username(),
            token_id=token.pk if token is not None else None,
        )
    except ImpactBusy as exc:
        raise ApiError.answering(exc, status=429, headers={"Retry-After": str(exc.retry_after)}) from exc
    if created:
        launch(run.pk, clock)
    response = JsonResponse(job_json(impact_run_get(run.pk)), status=202)
    response["Location"] = reverse("api-impact-job", args=[run.pk])
    return response


def job_json(run: ImpactRun, *, report: bool = False) -> dict[str, Any]:
    """An impact preview job: its state and progress, and with ``report`` its report once done."""
    status = run.status
    if impact_run_lost(run, now=clock()):
        status = ImpactRunStatus.FAILED
    return {
        "id": run.pk,
        "url": reverse("api-impact-job", args=[run.pk]),
        "candidate": run.candidate_number,
        "events": run.events,
        "status": str(status),
        "traced": run.traced,
        "total": run.total,
        "started_by": run.started_by,
        "started_at": timestamp(run.started_at),
        "finished_at": timestamp(run.finished_at) if run.finished_at else None,
        "error": run.error or ("lost with its process" if status != run.status else ""),
        "report": impact_run_report(run) if report and status == ImpactRunStatus.DONE else None,
    }


@api_view(["GET", "DELETE"], permission=VIEW_EVENT)
def impact_job(request: HttpRequest, run_id: int) -> JsonResponse:
    """``GET``: the impact preview job, its report once done (polling it keeps it running);
    ``DELETE``: cancel it (it stops at its next chunk; the run names who cancelled it)."""
    run = impact_run_get(run_id)
    if request.method == "DELETE":
        impact_run_cancel(run.pk, clock=clock, by=request.user.get_username())
    else:
        impact_run_waited(run.pk, clock=clock)
    return JsonResponse(job_json(impact_run_get(run.pk), report=request.method == "GET"))


@api_view(["POST"], permission=APPLY_CONFIGURATION, errors=ERRORS)
def candidate_apply_endpoint(request: HttpRequest, candidate_id: int) -> JsonResponse:
    """Apply the candidate as the next live generation (its applier recorded); the candidate
    is gone afterwards. ``expected_live`` refuses (409) when live moved on meanwhile."""
    body = _object(request, {"expected_live"}, allow_empty=True)
    expected = json_whole(body.get("expected_live"))
    if expected is not None and (isinstance(expected, bool) or not isinstance(expected, int) or expected < 0):
        raise ApiError(
            400, "invalid_input", "expected_live must be a generation number (0: none)", field="expected_live"
        )
    try:
        generation = candidate_apply(
            candidate_id=candidate_id,
            clock=system_clock,
            applied_by=request.user.get_username(),
            expected_live=expected,
        )
    except ConfigInvalid as exc:
        error = invalid_configuration(exc)
        error.status = 409
        raise error from None
    return JsonResponse(generation_json(generation))


@api_view(["POST"], permission=APPLY_CONFIGURATION, errors=ERRORS)
def candidate_discard_endpoint(request: HttpRequest, candidate_id: int) -> JsonResponse:
    """Discard the candidate (any body is ignored)."""
    candidate_discard(candidate_id=candidate_id)
    return JsonResponse({"discarded": candidate_id})
