"""The Events list and the Event page."""

from __future__ import annotations

import json
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from causal.models import Event
from causal.selectors import EventFilter
from conduit_site.live import events_ws_path
from routing.engine.failures import failures_read
from routing.envelopes import raw_envelope
from routing.roles import VIEW_EVENT
from routing.selectors import (
    event_chain_routes,
    event_with_route,
    events_with_route_page,
    live_scope_paths,
)
from routing.views.access import permission_needed
from routing.views.common import htmx_partial, paging_urls, render_console
from routing.views.forms import EventFilterForm

LIST_TEMPLATE = "routing/event_list.html"
LIST_PARTIALS = ("event-list", "event-rows")
DETAIL_TEMPLATE = "routing/event_detail.html"
DETAIL_PARTIALS = ("event-route", "event-chain")


def filter_params(filters: EventFilter) -> dict[str, str]:
    """The query parameters that reproduce ``filters``."""
    return {"scope": filters.scope, "type": filters.type, "route_state": filters.route_state}


def event_rows_context(filters: EventFilter, *, before: int | None = None) -> dict[str, Any]:
    """What the ``event-rows`` partial needs: one page of Events and the paging links.

    The websocket consumer renders the same partial with this context (first page only).
    """
    page = events_with_route_page(filters, before=before)
    return {"filters": filters, "page": page, **paging_urls("event-list", filter_params(filters), page)}


@permission_needed(VIEW_EVENT)
@require_GET
def event_list(request: HttpRequest) -> HttpResponse:
    """Events newest first, filtered by scope, type and route state, 50 a page by seq."""
    form = EventFilterForm(request.GET)
    context: dict[str, Any] = {"section": "events", "form": form}
    if not form.is_valid():
        context.update(page=None, scope_paths=live_scope_paths())
        return render_console(request, LIST_TEMPLATE, context, partials=LIST_PARTIALS, status=400)
    filters = form.filters()
    before = form.cleaned_data["before"]
    context.update(event_rows_context(filters, before=before))
    # Live updates only on the first page: a later page keeps still.
    context["live_url"] = events_ws_path(filter_params(filters)) if before is None else ""
    if not request.htmx:
        context["scope_paths"] = live_scope_paths()
    return render_console(request, LIST_TEMPLATE, context, partials=LIST_PARTIALS)


def pretty_json(value: Any) -> str:
    """``value`` as indented JSON for reading (keys sorted, non-ASCII kept)."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


@permission_needed(VIEW_EVENT)
@require_GET
def event_detail(request: HttpRequest, seq: int) -> HttpResponse:
    """One Event: its envelope, its targets and ancestry, its route state and RouteRecord."""
    try:
        event = event_with_route(seq)
    except Event.DoesNotExist:
        raise Http404(f"No Event with seq {seq}.") from None
    record = getattr(event, "route_record", None)
    context = {
        "section": "events",
        "event": event,
        "record": record,
        # Why an unrouted Event is not routed yet: the failure counted on it (R13, R29).
        "failure": None if event.is_settled else failures_read([event.seq]).get(event.seq),
        # The causal chain, root first, each Event with its policy (not read for the route alone).
        "chain": [] if htmx_partial(request, DETAIL_PARTIALS) == "event-route" else event_chain_routes(seq),
        "data_json": pretty_json(event.data),
        "extensions_json": pretty_json(event.extensions) if event.extensions else "",
        "raw_envelope_json": json.dumps(raw_envelope(event), indent=2, ensure_ascii=False),
    }
    return render_console(request, DETAIL_TEMPLATE, context, partials=DETAIL_PARTIALS)
