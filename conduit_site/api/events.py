"""JSON API endpoints (token-authenticated, see ``conduit_site.api.auth``). Events are named by
their ``seq``: envelope ids are unique only per source.

``/api/events`` speaks the CloudEvents HTTP binding (``routing.acceptance.binding``): ``POST``
takes an Event in structured, binary or batch mode; ``OPTIONS`` answers the CloudEvents Webhook
validation handshake (no token: the sender sends none, and nothing is read or stored); ``GET``
lists Events. An Event comes out as ``{"event": <CloudEvent>, "conduit": {...}}``, or, with
``?format=cloudevent`` or ``Accept: application/cloudevents+json`` (or
``application/cloudevents-batch+json``), as the bare CloudEvent (``application/cloudevents+json``;
a list as ``application/cloudevents-batch+json``). docs/cloudevents.md tells it all.
"""

from __future__ import annotations

import json
import re
from datetime import datetime

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse
from django.utils.cache import patch_vary_headers

from causal.clock import system_clock
from causal.models import Event
from causal.selectors import PAGE_SIZE, event_get
from conduit_site.api.auth import (
    ApiError,
    api_permitted,
    api_view,
    is_json_media_type,
    query_whole,
    request_body,
    request_json,
)
from conduit_site.api.openapi import openapi_schema
from conduit_site.logformat import trace_context, trace_fields
from infra.converters import MAX_ID
from infra.times import parse_time
from routing.acceptance import services
from routing.acceptance.binding import Mode, binary_event, content_mode
from routing.access.roles import ACCEPT_EVENT, VIEW_EVENT
from routing.config.problems import GenerationNotFound
from routing.records.filters import MAX_LIST_LIMIT, EventListFilter, EventListInvalid
from routing.records.selectors import event_route as event_route_get
from routing.records.selectors import events_route_page
from routing.serializers import accepted_json, cloudevent_json, event_json, event_route_json
from routing.setup.trace import TraceRefused, trace

STRUCTURED_MEDIA_TYPE = "application/cloudevents+json"
BATCH_MEDIA_TYPE = "application/cloudevents-batch+json"
# ?format=: the wrapper with Conduit's fields (default), or the bare CloudEvent.
FORMATS = ("conduit", "cloudevent")
# GET /api/events takes the filters of ``events list`` under the same names.
LIST_TEXT_FILTERS = ("query", "data", "scope", "type", "state", "policy")
# The header of a bare CloudEvents list that names the next page's ``after``.
NEXT_AFTER_HEADER = "Conduit-Next-After"
# What a WebHook-Request-Origin may be: a host name (visible ASCII, no spaces), echoed back.
WEBHOOK_ORIGIN = re.compile(r"^[\x21-\x7e]{1,255}$")
ALLOWED_METHODS = "GET, POST, OPTIONS"


@api_view(
    ["GET", "POST", "OPTIONS"],
    permission={"GET": VIEW_EVENT, "POST": ACCEPT_EVENT},
    public_methods=["OPTIONS"],
    accept_methods=["POST"],
)
def events_collection(request: HttpRequest) -> HttpResponse:
    """``POST``: accept Events (:func:`events_accept`); ``GET``: list them
    (:func:`events_list`); ``OPTIONS``: the webhook validation handshake
    (:func:`webhook_validation`)."""
    if request.method == "OPTIONS":
        return webhook_validation(request)
    if request.method == "GET":
        return events_list(request)
    return events_accept(request)


def events_accept(request: HttpRequest) -> JsonResponse:
    """Accept one Event (201 new, 200 duplicate) or a batch (all or nothing: 201 when any is
    new, else 200), in the content mode the request uses. An Event without a scope takes the
    token's default scope, else the configuration's. An Event naming a Work (``work_id``,
    ``execution_id``) or choosing its correlation keys needs ``worklife.send_input`` too (403
    otherwise, nothing stored)."""
    accepted_by = request.user.get_username()
    may_address_work = api_permitted(request, services.SEND_INPUT)
    default_scope = getattr(request.api_token, "default_scope", "") or None
    mode = content_mode(request.content_type or "", request.headers.keys())
    if mode is Mode.BINARY:
        # Its JSON data is depth-checked as text, one level less deep than the limit.
        payload = binary_event(_binary_headers(request), request_body(request))
        accepted = services.event_accept(
            payload=payload,
            clock=system_clock,
            accepted_by=accepted_by,
            depth_checked=True,
            default_scope=default_scope,
            may_address_work=may_address_work,
        )
        return _accepted_one(accepted)
    if not is_json_media_type((request.content_type or "").lower()) and request_body(request).strip():
        raise ApiError(
            415,
            "unsupported_media_type",
            f"Content-Type {request.content_type or '(none)'} is not accepted without ce-* headers: send "
            f"{STRUCTURED_MEDIA_TYPE} (structured mode), {BATCH_MEDIA_TYPE} (a batch) or application/json; "
            "in binary mode, send the Event's attributes as ce-* headers (ce-specversion, ce-id, "
            "ce-source, ce-type…) and its data as the body",
        )
    body = request_json(request)  # its text's depth checked (routing.acceptance.envelopes.parse_json)
    if isinstance(body, dict) and trace_fields(body.get("traceparent")):
        # The lines logged about this Event carry its trace (conduit_site.requestid).
        trace_context.set(body["traceparent"])
    if mode is Mode.BATCH and not isinstance(body, list):
        raise ApiError(
            400, "invalid_event", f"a {BATCH_MEDIA_TYPE} body is a JSON array of Events", field=None
        )
    if isinstance(body, list):
        results = services.events_accept(
            payloads=body,
            clock=system_clock,
            accepted_by=accepted_by,
            depth_checked=True,
            default_scope=default_scope,
            may_address_work=may_address_work,
        )
        created = any(result.created for result in results)
        return JsonResponse(
            {"results": [accepted_json(r.event, created=r.created) for r in results]},
            status=201 if created else 200,
        )
    accepted = services.event_accept(
        payload=body,
        clock=system_clock,
        accepted_by=accepted_by,
        depth_checked=True,
        default_scope=default_scope,
        may_address_work=may_address_work,
    )
    return _accepted_one(accepted)


def _accepted_one(accepted: services.Accepted) -> JsonResponse:
    response = JsonResponse(event_json(accepted.event), status=201 if accepted.created else 200)
    response["Location"] = reverse("api-event-detail", args=[accepted.event.seq])
    return response


def _binary_headers(request: HttpRequest) -> dict[str, str]:
    """The headers binary mode reads (``ce-*`` and ``Content-Type``), as text: a server hands
    header bytes over as Latin-1 (PEP 3333); UTF-8 sent as it is is read as UTF-8."""
    headers = {}
    for name, value in request.headers.items():
        lower = name.lower()
        if lower.startswith("ce-") or (lower == "content-type" and value.strip()):
            try:
                headers[lower] = value.encode("latin-1").decode("utf-8")
            except UnicodeError:
                headers[lower] = value
    return headers


def webhook_validation(request: HttpRequest, *, allow: str = ALLOWED_METHODS) -> HttpResponse:
    """The CloudEvents Webhook validation handshake (abuse protection, section 4): an
    ``OPTIONS`` with ``WebHook-Request-Origin`` is answered 200 with that origin in
    ``WebHook-Allowed-Origin``, ``WebHook-Allowed-Rate`` (acceptance's rate limit, requests a
    minute: ``CONDUIT_ACCEPT_RATE_PER_MINUTE``; ``*`` when it is off) and ``Allow`` (``allow``); a
    plain ``OPTIONS`` gets ``Allow`` alone. Events still need a token (or a receiver's signature)
    to be accepted."""
    origin = request.headers.get("WebHook-Request-Origin")
    if origin is not None and not WEBHOOK_ORIGIN.match(origin):
        raise ApiError(
            400,
            "invalid_request",
            "WebHook-Request-Origin must name the sender's host: 1 to 255 visible ASCII characters",
            field="WebHook-Request-Origin",
        )
    response = HttpResponse(status=200)
    del response["Content-Type"]
    response["Allow"] = allow
    if origin is not None:
        response["WebHook-Allowed-Origin"] = origin
        rate = settings.CONDUIT_ACCEPT_RATE_PER_MINUTE
        response["WebHook-Allowed-Rate"] = str(rate) if rate > 0 else "*"
    return response


def events_list(request: HttpRequest) -> HttpResponse:
    """Events newest first (``oldest``: oldest first), filtered as ``events list`` filters them,
    ``limit`` a page, the next page after ``next_after``: each with its route, as
    ``events list --json`` prints them. ``format=cloudevent``: the page's bare CloudEvents, a
    batch, the next page's ``after`` in the ``Conduit-Next-After`` header."""
    output = _format(request)
    try:
        filters = _list_filters(request)
    except EventListInvalid as exc:
        raise ApiError(400, "invalid_filter", exc.message, field=exc.field) from None
    page = events_route_page(filters)
    if output == "cloudevent":
        response = HttpResponse(
            json.dumps([cloudevent_json(item.event) for item in page], ensure_ascii=False),
            content_type=BATCH_MEDIA_TYPE,
        )
        if page.next_after is not None:
            response[NEXT_AFTER_HEADER] = str(page.next_after)
    else:
        response = JsonResponse(
            {
                "events": [{**event_json(item.event), "route": event_route_json(item)} for item in page],
                "next_after": page.next_after,
            }
        )
    patch_vary_headers(response, ["Accept"])
    return response


def _list_filters(request: HttpRequest) -> EventListFilter:
    params = request.GET
    text = {name: params.get(name, "") for name in LIST_TEXT_FILTERS}
    times = {name: _time_param(params.get(name, ""), name) for name in ("since", "until")}
    return EventListFilter(
        **text,
        **times,
        subtree=_flag_param(params.get("subtree", ""), "subtree"),
        oldest=_flag_param(params.get("oldest", ""), "oldest"),
        work_id=_int_param(params.get("work", ""), "work", maximum=MAX_ID),
        after=_int_param(params.get("after", ""), "after", maximum=MAX_ID),
        limit=_int_param(params.get("limit", ""), "limit", maximum=MAX_LIST_LIMIT) or PAGE_SIZE,
    )


def _time_param(raw: str, name: str) -> datetime | None:
    if raw == "":
        return None
    try:
        return parse_time(raw)
    except ValueError as exc:
        raise EventListInvalid(name, str(exc)) from None


def _flag_param(raw: str, name: str) -> bool:
    if raw.lower() in ("", "0", "false"):
        return False
    if raw.lower() in ("1", "true"):
        return True
    raise EventListInvalid(name, f"expected true or false, got {raw[:40]!r}")


def _int_param(raw: str, name: str, *, maximum: int) -> int | None:
    try:
        return query_whole(raw, minimum=1, maximum=maximum)
    except ValueError as exc:
        raise EventListInvalid(name, str(exc)) from None


# What Accept may ask for, the wrapper first (what */* and no Accept get).
ACCEPTED_MEDIA_TYPES = ("application/json", STRUCTURED_MEDIA_TYPE, BATCH_MEDIA_TYPE)


def _format(request: HttpRequest) -> str:
    """``?format=`` when given, else what ``Accept`` prefers: ``application/cloudevents+json``
    or ``application/cloudevents-batch+json`` ask for the bare CloudEvents (``cloudevent``),
    anything else for the wrapper (``conduit``)."""
    output = request.GET.get("format", "")
    if not output:
        preferred = request.get_preferred_type(ACCEPTED_MEDIA_TYPES) if "Accept" in request.headers else None
        return "cloudevent" if preferred in (STRUCTURED_MEDIA_TYPE, BATCH_MEDIA_TYPE) else "conduit"
    if output not in FORMATS:
        raise ApiError(
            400,
            "invalid_request",
            f"format must be one of {', '.join(FORMATS)}, not {output[:40]!r}",
            field="format",
        )
    return output


@api_view(["GET"], permission=VIEW_EVENT)
def event_detail(request: HttpRequest, seq: int) -> HttpResponse:
    """One Event by its ``seq``: ``{"event": <CloudEvent>, "conduit": {seq, targets, ancestry,
    route state}}``; ``format=cloudevent``: the bare CloudEvent (``application/cloudevents+json``)."""
    output = _format(request)
    try:
        event = event_get(seq)
    except Event.DoesNotExist:
        raise ApiError(404, "not_found", f"no Event has seq {seq}") from None
    if output == "cloudevent":
        response = HttpResponse(
            json.dumps(cloudevent_json(event), ensure_ascii=False), content_type=STRUCTURED_MEDIA_TYPE
        )
    else:
        response = JsonResponse(event_json(event))
    patch_vary_headers(response, ["Accept"])
    return response


@api_view(["GET"], permission=VIEW_EVENT)
def event_route(request: HttpRequest, seq: int) -> JsonResponse:
    """How the Event ``seq`` was routed (its RouteRecord, with refusals), or why it is still
    unrouted (reason, the Event it waits behind, next retry, counted failure) (R29)."""
    try:
        item = event_route_get(seq)
    except Event.DoesNotExist:
        raise ApiError(404, "not_found", f"no Event has seq {seq}") from None
    return JsonResponse(event_route_json(item))


@api_view(["GET"], public=True)
def openapi_json(request: HttpRequest) -> JsonResponse:
    """The OpenAPI 3.1 schema of this API (public: it describes, it holds no data)."""
    return JsonResponse(openapi_schema(server_url=request.build_absolute_uri("/")))


@api_view(
    ["POST"],
    permission=VIEW_EVENT,
    errors={TraceRefused: (400, "invalid_trace"), GenerationNotFound: (404, "not_found")},
)
def trace_event(request: HttpRequest) -> JsonResponse:
    """A dry run of routing for a hypothetical Event against the live generation or the one
    ``generation`` names (``"3"``, ``"candidate:12"``), asking only the routes ``filter``
    names when it is given; writes nothing (R37)."""
    body = request_json(request)
    if not isinstance(body, dict) or not isinstance(body.get("event"), dict):
        raise ApiError(
            400, "invalid_trace", "the body must be an object with the Event under 'event'", field="event"
        )
    generation = body.get("generation")
    if generation is not None and not isinstance(generation, str):
        raise ApiError(
            400, "invalid_trace", "generation must be a string like '3' or 'candidate:12'", field="generation"
        )
    operator = bool(body.get("operator", False))
    result = trace(
        payload=body["event"],
        clock=system_clock,
        generation=generation,
        operator=operator,
        default_scope=getattr(request.api_token, "default_scope", "") or None,
        filter=body.get("filter"),
    )
    return JsonResponse(result.as_dict())
