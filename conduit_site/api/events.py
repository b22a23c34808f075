"""JSON API endpoints (token-authenticated, see ``conduit_site.api.auth``). Events are named by
their ``seq``: envelope ids are unique only per source."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.urls import reverse

from causal.clock import system_clock
from causal.models import Event
from causal.selectors import event_get
from conduit_site.api.auth import ApiError, api_view, request_json
from conduit_site.api.openapi import openapi_schema
from routing.acceptance import services
from routing.access.roles import ACCEPT_EVENT, VIEW_EVENT
from routing.config.problems import GenerationNotFound
from routing.selectors import event_route as event_route_get
from routing.serializers import accepted_json, event_json, event_route_json
from routing.setup.trace import TraceRefused, trace


@api_view(["POST"], permission=ACCEPT_EVENT)
def events_accept(request: HttpRequest) -> JsonResponse:
    """Accept one Event (a JSON object: 201 new, 200 duplicate) or a batch (a JSON array,
    all or nothing: 201 when any is new, else 200)."""
    body = request_json(request)  # its text's depth checked (routing.acceptance.envelopes.parse_json)
    accepted_by = request.user.get_username()
    if isinstance(body, list):
        results = services.events_accept(
            payloads=body, clock=system_clock, accepted_by=accepted_by, depth_checked=True
        )
        created = any(result.created for result in results)
        return JsonResponse(
            {"results": [accepted_json(r.event, created=r.created) for r in results]},
            status=201 if created else 200,
        )
    accepted = services.event_accept(
        payload=body, clock=system_clock, accepted_by=accepted_by, depth_checked=True
    )
    response = JsonResponse(event_json(accepted.event), status=201 if accepted.created else 200)
    response["Location"] = reverse("api-event-detail", args=[accepted.event.seq])
    return response


@api_view(["GET"], permission=VIEW_EVENT)
def event_detail(request: HttpRequest, seq: int) -> JsonResponse:
    """One Event by its ``seq``: envelope, targets, ancestry and route state."""
    try:
        event = event_get(seq)
    except Event.DoesNotExist:
        raise ApiError(404, "not_found", f"no Event has seq {seq}") from None
    return JsonResponse(event_json(event))


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
    ``generation`` names (``"3"``, ``"candidate:12"``); writes nothing (R37)."""
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
    result = trace(payload=body["event"], clock=system_clock, generation=generation, operator=operator)
    return JsonResponse(result.as_dict())
