"""The Events list and the Event page."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from causal.models import Event, RouteState
from conduit_site.console.forms import EventFilterForm
from conduit_site.console.views.access import permission_needed
from conduit_site.console.views.common import htmx_partial, list_paging_urls, render_console
from controls.events import reroute_copies
from controls.replay import COPIES_SHOWN, replay_copies, replay_original
from infra.live import event_ws_path, events_ws_path
from routing.acceptance.raw import raw_envelope
from routing.access.roles import VIEW_EVENT
from routing.config.receivers import receiver_of
from routing.engine.failures import failures_read
from routing.records.filters import EventListFilter, known_event_scopes, known_event_types, known_policies
from routing.records.selectors import (
    event_chain_routes,
    event_outcome,
    event_with_route,
    events_route_page,
    events_route_total,
)

LIST_TEMPLATE = "routing/event_list.html"
LIST_PARTIALS = ("event-list", "event-rows")
DETAIL_TEMPLATE = "routing/event_detail.html"
# The Event page's parts that change as the Event is routed, skipped or rerouted: each one a
# partial with a stable id, re-rendered together (after a control, and live).
DETAIL_PARTIALS = ("event-heading", "event-state", "event-route", "event-chain")


def filter_params(filters: EventListFilter) -> dict[str, str]:
    """The query parameters that reproduce ``filters`` (paging aside)."""
    return {
        "q": filters.query,
        "scope": filters.scope,
        "subtree": "1" if filters.subtree else "",
        "type": filters.type,
        "route_state": filters.state,
        "policy": filters.policy,
        "data": filters.data,
        "since": filters.since.isoformat() if filters.since else "",
        "until": filters.until.isoformat() if filters.until else "",
    }


def page_params(filters: EventListFilter) -> dict[str, str]:
    """The query parameters that reproduce ``filters`` with their page (the live updates'
    address: a paged list stays on its page)."""
    cursor = "" if filters.after is None else str(filters.after)
    paging = {"oldest": "1", "after": cursor} if filters.oldest else {"before": cursor}
    return {**filter_params(filters), **paging}


def event_rows_context(filters: EventListFilter) -> dict[str, Any]:
    """What the ``event-rows`` partial needs: one page of Events with their routes, the
    total and the paging links. The websocket consumer renders the same partial with it."""
    page = events_route_page(filters)
    paging = list_paging_urls(
        "event-list",
        filter_params(filters),
        oldest=filters.oldest,
        cursor=filters.after,
        next_cursor=page.next_after,
    )
    return {
        "filters": filters,
        "page": page,
        "paged": filters.after is not None,
        "total": events_route_total(filters),
        "total_noun": "Events",
        **paging,
    }


@permission_needed(VIEW_EVENT)
@require_GET
def event_list(request: HttpRequest) -> HttpResponse:
    """Events newest (or oldest) first, 50 a page by seq, filtered as ``events list`` filters
    them, with their total."""
    form = EventFilterForm(request.GET)
    context: dict[str, Any] = {"section": "events", "form": form}
    if not form.is_valid():
        context.update(page=None, **_pick_lists())
        return render_console(request, LIST_TEMPLATE, context, partials=LIST_PARTIALS, status=400)
    filters = form.filters()
    context.update(event_rows_context(filters))
    context["live_url"] = events_ws_path(page_params(filters))
    if not request.htmx:
        context.update(_pick_lists())
    return render_console(request, LIST_TEMPLATE, context, partials=LIST_PARTIALS)


def _pick_lists() -> dict[str, Any]:
    # What the filters offer to pick from (datalists).
    return {
        "scope_paths": known_event_scopes(),
        "event_types": known_event_types(),
        "policies": known_policies(),
    }


def pretty_json(value: Any) -> str:
    """``value`` as indented JSON for reading (keys sorted, non-ASCII kept)."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def event_detail_context(seq: int, partials: Iterable[str] = DETAIL_PARTIALS) -> dict[str, Any]:
    """What the Event page's ``partials`` show (``Event.DoesNotExist`` for an unknown seq):
    the Event with its route, why it is unrouted, the copy a reroute accepted, its replay copies
    (or the Event it is a replay of) and its causal chain. The page, the controls' answers and the live updates all render from it."""
    partials = set(partials)
    event = event_with_route(seq)
    record = getattr(event, "route_record", None) if event.is_settled else None
    settled_dead = event.route_state in (RouteState.FAILED, RouteState.SKIPPED)
    return {
        "section": "events",
        "event": event,
        "record": record,
        "outcome": event_outcome(event, record),
        # The receiver that accepted it, when one did.
        "receiver": receiver_of(event.accepted_by),
        # Why an unrouted Event is not routed yet: the failure counted on it (R13, R29).
        "failure": None if event.is_settled else failures_read([event.seq]).get(event.seq),
        # A failed or skipped Event rerouted already links to its copy instead of offering
        # Reroute again (R22).
        "copy_seq": reroute_copies([event]).get(event.seq) if settled_dead else None,
        # Replay's lineage: the Event this one is a copy of, and this one's copies.
        "replay_of": replay_original(event),
        "replays": replay_copies(event),
        "replays_shown": COPIES_SHOWN,
        # The causal chain, root first, each Event with its policy (not read for the route alone).
        "chain": event_chain_routes(seq) if "event-chain" in partials else [],
    }


@permission_needed(VIEW_EVENT)
@require_GET
def event_detail(request: HttpRequest, seq: int) -> HttpResponse:
    """One Event: its envelope, its targets and ancestry, its route state and RouteRecord,
    updated live while it is open."""
    partial = htmx_partial(request, DETAIL_PARTIALS)
    try:
        context = event_detail_context(seq, [partial] if partial else DETAIL_PARTIALS)
    except Event.DoesNotExist:
        raise Http404(f"No Event with seq {seq}.") from None
    if partial is None:
        event = context["event"]
        context.update(
            data_json=pretty_json(event.data),
            extensions_json=pretty_json(event.extensions) if event.extensions else "",
            raw_envelope_json=json.dumps(raw_envelope(event), indent=2, ensure_ascii=False),
            live_url=event_ws_path(seq),
        )
    return render_console(request, DETAIL_TEMPLATE, context, partials=DETAIL_PARTIALS)
