"""JSON API endpoints of Work and its operator controls (token-authenticated, see
``conduit_site.api.auth``): ``GET /api/work`` (list), ``POST /api/work`` (create),
``GET /api/work/{id}`` and ``POST /api/work/{id}/cancel|retry|send|rebind``.

Each control needs its own permission (``worklife.cancel_work``, ``worklife.retry_work``,
``worklife.send_input``, ``worklife.create_work``, ``worklife.rebind_work``), reading
``routing.view_event``: 403 without it, before the body is read (:func:`conduit_site.api.auth.api_view`
checks). A control the Work's state or the live configuration refuses is a 409
naming why, an unknown Work a 404 and malformed input a 400 naming the field; nothing is stored
then.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse
from django.urls import reverse

import controls.work
from causal.clock import Clock, system_clock
from causal.selectors import PAGE_SIZE
from conduit_site.api.auth import (
    ApiError,
    api_permitted,
    api_require,
    api_view,
    is_json_media_type,
    query_whole,
    request_json,
)
from controls import bulk
from controls.bulk import bulk_action
from controls.jobs import (
    JOB_PERMISSIONS,
    bulk_job_as_dict,
    bulk_job_cancel,
    bulk_job_get,
    bulk_job_items,
    work_bulk_job,
)
from controls.models import BulkJob
from controls.work import WorkControl, WorkControlInvalid, WorkControlRefused
from infra.converters import MAX_ID
from routing.acceptance.envelopes import json_whole
from routing.access.roles import VIEW_EVENT
from routing.serializers import attempt_json, work_json
from worklife.models import Work
from worklife.selectors import WorkFilter, work_attempts, work_get, work_keys, work_page

# The trusted clock the endpoints use (tests inject a fake one).
clock: Clock = system_clock

CONTROL_ERRORS = {WorkControlRefused: (409, "refused"), WorkControlInvalid: (400, "invalid_input")}
MAX_LIST_LIMIT = 200
# The most outcomes GET /api/jobs/{id} answers at once (page on with ``after``).
JOB_ITEMS_MAX = 1000
# The list's filters: query parameters named as the console's and ``work list``'s (WorkFilter).
LIST_FILTERS = ("scope", "status", "binding", "key")
# The fields each control's body may hold (anything else is refused, naming it).
SEND_FIELDS = frozenset({"type", "data", "subject"})
CREATE_FIELDS = frozenset({"scope", "binding", "input"})
REBIND_FIELDS = frozenset({"binding"})
CANCEL_FIELDS = frozenset({"reason"})
BULK_FIELDS = frozenset({"action", "ids", "filter", "count"})


@api_view(
    ["GET", "POST"],
    permission={"GET": VIEW_EVENT, "POST": controls.work.PERMISSIONS[WorkControl.CREATE]},
    errors=CONTROL_ERRORS,
)
def work_collection(request: HttpRequest) -> JsonResponse:
    """``GET``: Work newest first, filtered by ``scope``, ``status`` (``parked`` included),
    ``binding`` and an owned correlation ``key``, paged by ``before``
    (``limit`` a page). ``POST``: create a Work with its first input (201)."""
    if request.method == "POST":
        return _create(request)
    filters, before, limit = _list_query(request)
    page = work_page(filters, before=before, limit=limit)
    return JsonResponse({"work": [work_json(work) for work in page], "next_before": page.next_cursor})


@api_view(["GET"], permission=VIEW_EVENT)
def work_detail(request: HttpRequest, work_id: int) -> JsonResponse:
    """One Work with its attempts (newest first, at most 50) and its owned keys (at most 100)."""
    work = _work(work_id)
    attempts = work_attempts(work.pk)
    keys = work_keys(work.pk)
    return JsonResponse(
        {
            **work_json(work),
            "attempts": [attempt_json(attempt) for attempt in attempts],
            "more_attempts": attempts.has_next,
            "keys": [key.key for key in keys],
            "more_keys": keys.has_next,
        }
    )


@api_view(["POST"], permission=controls.work.PERMISSIONS[WorkControl.CANCEL], errors=CONTROL_ERRORS)
def work_cancel_view(request: HttpRequest, work_id: int) -> JsonResponse:
    """Cancel the Work (R48); its work loop stops a running attempt's process. An optional JSON
    body ``{"reason": "…"}`` is kept with the control Event; a POST without one (or not JSON, as
    before there was a body) cancels without a reason."""
    json_body = is_json_media_type((request.content_type or "").lower())
    body = _body(request, CANCEL_FIELDS, allow_empty=True) if json_body else {}
    result = controls.work.work_cancel(
        work_id=work_id, user=request.user, clock=clock, reason=body.get("reason")
    )
    return JsonResponse(result.as_dict())


@api_view(["POST"], permission=controls.work.PERMISSIONS[WorkControl.RETRY], errors=CONTROL_ERRORS)
def work_retry_view(request: HttpRequest, work_id: int) -> JsonResponse:
    """Run a parked or backing-off Work again at once. No body."""
    result = controls.work.work_retry(work_id=work_id, user=request.user, clock=clock)
    return JsonResponse(result.as_dict())


@api_view(["POST"], permission=controls.work.PERMISSIONS[WorkControl.SEND], errors=CONTROL_ERRORS)
def work_send_view(request: HttpRequest, work_id: int) -> JsonResponse:
    """Send operator input to the Work: ``{"type", "data"?, "subject"?}`` accepted as an
    addressed operator Event (R30)."""
    body = _body(request, SEND_FIELDS)
    result = controls.work.work_input_send(
        work_id=work_id,
        event_type=body.get("type"),
        data=body.get("data"),
        subject=body.get("subject", ""),
        user=request.user,
        clock=clock,
    )
    return JsonResponse(result.as_dict())


@api_view(["POST"], permission=controls.work.PERMISSIONS[WorkControl.REBIND], errors=CONTROL_ERRORS)
def work_rebind_view(request: HttpRequest, work_id: int) -> JsonResponse:
    """Make ``{"binding"}`` (a binding of the Work's scope in the live configuration) the one
    the Work runs on next."""
    body = _body(request, REBIND_FIELDS)
    result = controls.work.work_rebind(
        work_id=work_id, binding=body.get("binding"), user=request.user, clock=clock
    )
    return JsonResponse(result.as_dict())


@api_view(
    ["POST"], permission=VIEW_EVENT, errors={**CONTROL_ERRORS, bulk.BulkCountChanged: (409, "count_changed")}
)
def work_bulk_view(request: HttpRequest) -> JsonResponse:
    """Retry or cancel several Work as a bulk job: ``{"action": "retry"|"cancel", "ids": [...],
    "count": N}`` or ``{"action", "filter": {"scope", "status", "binding", "key"}, "count": N}``
    (at most ``BULK_LIMIT`` Work; ``count``, required either way, is how many Work the caller
    saw: another number now is a 409 and nothing is stored). Answers 202 with the job, which the
    route loop runs in batches (``GET /api/jobs/{id}`` shows its progress); needs the control's
    own permission."""
    if not any(api_permitted(request, controls.work.PERMISSIONS[a]) for a in bulk.BULK_ACTIONS.values()):
        # Neither bulk control: refused before the body is read.
        api_require(request, controls.work.PERMISSIONS[WorkControl.RETRY], to="retry in bulk")
    body = _body(request, BULK_FIELDS)
    action = bulk_action(body.get("action"))
    api_require(request, controls.work.PERMISSIONS[action], to=f"{action.value.replace('_', ' ')} in bulk")
    filters = None
    if "filter" in body:
        raw = body["filter"]
        if not isinstance(raw, dict) or set(raw) - set(LIST_FILTERS):
            raise WorkControlInvalid("filter", f"expected an object with {', '.join(LIST_FILTERS)}")
        if not all(isinstance(value, str) for value in raw.values()):
            raise WorkControlInvalid("filter", "each filter is a string")
        try:
            filters = WorkFilter(**raw)
        except ValueError as exc:
            field, _, message = str(exc).partition(": ")
            raise WorkControlInvalid(f"filter.{field}", message) from None
    ids = body.get("ids")
    if "ids" in body and not isinstance(ids, list):
        raise WorkControlInvalid("ids", "expected a list of Work ids")
    if ids is not None:
        ids = [json_whole(i) for i in ids]
        if any(isinstance(i, int) and i > MAX_ID for i in ids):
            raise WorkControlInvalid("ids", f"a Work id is at most {MAX_ID}")
    job = work_bulk_job(
        action=action,
        ids=ids,
        filters=filters,
        count=json_whole(body.get("count")),
        user=request.user,
        clock=clock,
    )
    return job_accepted(job)


def job_accepted(job: BulkJob) -> JsonResponse:
    """202 with the job just stored and its address (``Location``)."""
    response = JsonResponse(bulk_job_as_dict(job), status=202)
    response["Location"] = reverse("api-job-detail", args=[job.pk])
    return response


@api_view(["GET"], permission=VIEW_EVENT)
def job_detail(request: HttpRequest, job_id: int) -> JsonResponse:
    """A bulk job and its progress: ``position`` of ``total`` done so far, ``done`` and
    ``refused``, and its targets' outcomes from ``after`` (a position; ``limit`` of them)."""
    job = _job(job_id)
    after = _query_int(request, "after", default=-1, lowest=-1)
    limit = _query_int(request, "limit", default=100, lowest=1, highest=JOB_ITEMS_MAX)
    return JsonResponse(bulk_job_as_dict(job, bulk_job_items(job, after=after, limit=limit)))


@api_view(["POST"], permission=VIEW_EVENT)
def job_cancel(request: HttpRequest, job_id: int) -> JsonResponse:
    """Stop a bulk job: the batch in progress commits, the targets left are skipped. Needs the
    permission of the job's control."""
    job = _job(job_id)
    api_require(request, JOB_PERMISSIONS[job.kind], to="cancel this job")
    return JsonResponse(bulk_job_as_dict(bulk_job_cancel(job_id=job.pk, user=request.user, clock=clock)))


def _job(job_id: int) -> BulkJob:
    try:
        return bulk_job_get(job_id)
    except BulkJob.DoesNotExist:
        raise ApiError(404, "not_found", f"no job has id {job_id}") from None


def _query_int(
    request: HttpRequest, name: str, *, default: int, lowest: int, highest: int | None = None
) -> int:
    raw = request.GET.get(name, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, "invalid_input", f"{name}: expected a whole number", field=name) from None
    if value < lowest or (highest is not None and value > highest):
        raise ApiError(400, "invalid_input", f"{name}: expected {lowest} to {highest or 'more'}", field=name)
    return value


def _create(request: HttpRequest) -> JsonResponse:
    body = _body(request, CREATE_FIELDS)
    first = body.get("input")
    if not isinstance(first, dict):
        raise WorkControlInvalid("input", "the first input is required: an object with 'type' (and 'data')")
    unknown = sorted(set(first) - SEND_FIELDS)
    if unknown:
        raise WorkControlInvalid(
            f"input.{unknown[0]}", "unknown field: the input takes type, data and subject"
        )
    result = controls.work.work_create(
        scope=body.get("scope"),
        binding=body.get("binding"),
        event_type=first.get("type"),
        data=first.get("data"),
        subject=first.get("subject", ""),
        user=request.user,
        clock=clock,
    )
    response = JsonResponse(result.as_dict(), status=201)
    response["Location"] = reverse("api-work-detail", args=[result.work_id])
    return response


def _body(request: HttpRequest, fields: frozenset[str], *, allow_empty: bool = False) -> dict[str, Any]:
    body = request_json(request, allow_empty=allow_empty)
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise WorkControlInvalid(None, "the body must be a JSON object")
    unknown = sorted(set(body) - fields)
    if unknown:
        raise WorkControlInvalid(unknown[0], f"unknown field: this control takes {', '.join(sorted(fields))}")
    return body


def _list_query(request: HttpRequest) -> tuple[WorkFilter, int | None, int]:
    try:
        filters = WorkFilter(**{name: request.GET.get(name, "") for name in LIST_FILTERS})
    except ValueError as exc:
        field, _, message = str(exc).partition(": ")
        raise WorkControlInvalid(field, message) from None
    before = _int_param(request, "before", minimum=1)
    limit = _int_param(request, "limit", minimum=1, maximum=MAX_LIST_LIMIT)
    return filters, before, limit if limit is not None else PAGE_SIZE


def _int_param(request: HttpRequest, name: str, *, minimum: int, maximum: int | None = None) -> int | None:
    try:
        return query_whole(
            request.GET.get(name, ""), minimum=minimum, maximum=MAX_ID if maximum is None else maximum
        )
    except ValueError as exc:
        raise WorkControlInvalid(name, str(exc)) from None


def _work(work_id: int) -> Work:
    try:
        return work_get(work_id)
    except Work.DoesNotExist:
        raise ApiError(404, "not_found", f"no Work has id {work_id}") from None
