"""The Work list and the Work page."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.urls import reverse
from django.views.decorators.http import require_GET

from causal.clock import Clock, system_clock
from causal.models import RouteState
from conduit_site.console.forms import INPUT_NEWEST, WorkDetailForm, WorkFilterForm
from conduit_site.console.views.access import permission_needed
from conduit_site.console.views.common import htmx_partial, list_paging_urls, query_string, render_console
from controls.events import reroute_copies
from controls.work import retry_outlook
from infra.live import work_ws_list_path, work_ws_path
from routing.access.roles import VIEW_EVENT
from routing.records.selectors import event_routes, work_route_history_page, work_route_history_total
from worklife.models import Work
from worklife.pauses import active_pauses, hold_line
from worklife.selectors import (
    ENGINE_LIST_LIMIT,
    NotRunning,
    WorkFilter,
    presented_text,
    work_attempts,
    work_children,
    work_get,
    work_input_presentations,
    work_inputs_page,
    work_inputs_total,
    work_intents,
    work_keys,
    work_page,
    work_pauses,
    work_timers,
    work_total,
    work_unrouted_events,
    work_waits,
    work_why_not_running,
)

LIST_TEMPLATE = "worklife/work_list.html"
LIST_PARTIALS = ("work-list",)
# What a live update of the list re-renders (inside #work-list, which holds the connection).
LIST_LIVE_PARTIAL = "work-rows"
DETAIL_TEMPLATE = "worklife/work_detail.html"

# The trusted clock "backing off until" is read against (tests inject a fake one).
clock: Clock = system_clock


def work_filter_params(filters: WorkFilter) -> dict[str, str]:
    """The query parameters that reproduce ``filters``."""
    return {"scope": filters.scope, "status": filters.status, "binding": filters.binding, "key": filters.key}


def work_page_params(filters: WorkFilter, *, cursor: int | None, oldest: bool) -> dict[str, str]:
    """The query parameters that reproduce ``filters`` with their page (the live updates'
    address: a paged list stays on its page)."""
    paging = {"oldest": "1", "after": cursor} if oldest else {"before": cursor}
    return {**work_filter_params(filters), **{k: "" if v is None else str(v) for k, v in paging.items()}}


def work_rows_context(
    filters: WorkFilter, *, cursor: int | None = None, oldest: bool = False
) -> dict[str, Any]:
    """What the ``work-list`` partial needs: one page of Work, the total, the paging links
    and now (a backoff shows only while it lasts)."""
    now = clock()
    # The pauses in force, read once: ``ready`` leaves out the Work they hold; the rows they hold
    # read "paused".
    pauses = active_pauses(now)
    page = work_page(filters, before=cursor, oldest=oldest, now=now, pauses=pauses)
    paused = work_pauses(page, now=now, pauses=pauses)
    for work in page:
        if work.pk in paused:
            work.pause_line = hold_line(paused[work.pk])
    paging = list_paging_urls(
        "work-list", work_filter_params(filters), oldest=oldest, cursor=cursor, next_cursor=page.next_cursor
    )
    return {
        "filters": filters,
        "filter_params": work_filter_params(filters),
        "page": page,
        "paged": cursor is not None,
        "total": work_total(filters, now=now, pauses=pauses),
        "total_noun": "Work",
        "now": now,
        **paging,
    }


@permission_needed(VIEW_EVENT)
@require_GET
def work_list(request: HttpRequest) -> HttpResponse:
    """Work newest (or oldest) first, filtered by scope, status, binding and owned key, 50 a
    page by id, with its total."""
    form = WorkFilterForm(request.GET)
    context: dict[str, Any] = {"section": "work", "form": form}
    if not form.is_valid():
        context["page"] = None
        return render_console(request, LIST_TEMPLATE, context, partials=LIST_PARTIALS, status=400)
    filters, cursor, oldest = form.filters(), form.cursor(), form.oldest_first()
    context.update(work_rows_context(filters, cursor=cursor, oldest=oldest))
    context["live_url"] = work_ws_list_path(work_page_params(filters, cursor=cursor, oldest=oldest))
    return render_console(request, LIST_TEMPLATE, context, partials=LIST_PARTIALS)


# --- the Work page, partial by partial --------------------------------------------------------
# Each partial of the Work page has a context builder, so an htmx request (or a websocket
# update) for one partial reads only what that partial shows.


def _summary(work: Work, cursors: dict[str, Any]) -> dict[str, Any]:
    now = clock()
    why = work_why_not_running(work, now=now)
    if why.reason is NotRunning.PAUSED:
        work.pause_line = why.text  # its status reads "paused", as in the Work list
    return {
        "now": now,
        "why": why,
        "keys": work_keys(work.pk),
        "children": work_children(work.pk),
    }


def _engine(work: Work, cursors: dict[str, Any]) -> dict[str, Any]:
    # What work_loop did with the Work: newest first, the newest ENGINE_LIST_LIMIT of each.
    return {
        "attempts": work_attempts(work.pk, limit=ENGINE_LIST_LIMIT),
        "waits": work_waits(work.pk),
        "timers": work_timers(work.pk),
        "intents": work_intents(work.pk),
    }


def _unrouted(work: Work, cursors: dict[str, Any]) -> dict[str, Any]:
    unrouted = work_unrouted_events(work)
    # Each with the failure counted on it (count, next retry): one query for the page.
    return {"unrouted": unrouted, "unrouted_routes": event_routes(unrouted.items)}


def _input(work: Work, cursors: dict[str, Any]) -> dict[str, Any]:
    newest = cursors.get("input_order") == INPUT_NEWEST
    cursor = cursors.get("input_before" if newest else "input_after")
    page = work_inputs_page(work.pk, after=cursor, newest=newest)
    # Which attempts each input was presented to: a failed attempt's input goes to the retries.
    spans = work_input_presentations(work.pk, list(page.items))
    for row in page.items:
        row.presented_to = presented_text(spans.get(row.seq))
    base = reverse("work-detail", args=[work.pk])
    order = {"input_order": INPUT_NEWEST} if newest else {}
    next_url = ""
    if page.has_next:
        next_url = base + query_string(
            {**order, "input_before" if newest else "input_after": page.next_cursor}
        )
    return {
        "inputs": page,
        "inputs_total": work_inputs_total(work.pk),
        "inputs_newest": newest,
        # The first page of this order (empty on it) and of the other one.
        "inputs_first_url": base + query_string(order) if cursor is not None else "",
        "inputs_flip_url": base + ("" if newest else query_string({"input_order": INPUT_NEWEST})),
        "inputs_next_url": next_url,
    }


def _history(work: Work, cursors: dict[str, Any]) -> dict[str, Any]:
    before = cursors.get("history_before")
    page = work_route_history_page(work.pk, before=before)
    base = reverse("work-detail", args=[work.pk])
    # Failed and skipped Events rerouted already link to their copy instead of offering Reroute
    # (one query, only when the page has such Events).
    dead = [r.event for r in page if r.event.route_state in (RouteState.FAILED, RouteState.SKIPPED)]
    copies = reroute_copies(dead)
    return {
        "history": page,
        "history_rows": [(record, copies.get(record.event_id)) for record in page],
        "history_total": work_route_history_total(work.pk),
        "history_first_url": base if before is not None else "",
        "history_next_url": (
            base + query_string({"history_before": page.next_cursor}) if page.has_next else ""
        ),
    }


WORK_PARTIALS: dict[str, Callable[[Work, dict[str, Any]], dict[str, Any]]] = {
    "work-summary": _summary,
    "work-engine": _engine,
    "work-unrouted": _unrouted,
    "work-input": _input,
    "work-history": _history,
}
# What a websocket update re-renders: the Work's state, its engine and its lists, first pages.
LIVE_PARTIALS = ("work-summary", "work-engine", "work-unrouted", "work-input", "work-history")
# ... and the operator control buttons (cancel, retry) as the Work's state allows them.
LIVE_CONTROLS = "worklife/work_controls.html#work-control-buttons"
# ... and, once the Work has ended, its forms (Send input, Rebind) go.
LIVE_FORMS = "worklife/work_controls.html#work-control-forms"


def work_detail_context(
    work: Work, partials: Iterable[str] = WORK_PARTIALS, cursors: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The context of the Work page's ``partials`` (all of them by default)."""
    cursors = cursors or {}
    context: dict[str, Any] = {"section": "work", "work": work}
    for name in partials:
        context.update(WORK_PARTIALS[name](work, cursors))
    if "work-summary" in partials:
        # The controls beside the summary: what Retry leads to (queries only when it shows).
        context["retry_outlook"] = retry_outlook(work.pk) if work.is_retryable else ""
    return context


@permission_needed(VIEW_EVENT)
@require_GET
def work_detail(request: HttpRequest, work_id: int) -> HttpResponse:
    """One Work: status and why it is not running, links, keys and children, its attempts,
    waits, timers and intents, unrouted input holding it, its input in acceptance order and
    its route history."""
    form = WorkDetailForm(request.GET)
    if not form.is_valid():
        return render_console(
            request, DETAIL_TEMPLATE, {"section": "work", "form": form, "work": None}, status=400
        )
    try:
        work = work_get(work_id)
    except Work.DoesNotExist:
        raise Http404(f"No Work with id {work_id}.") from None
    cursors = form.cursors()
    partial = htmx_partial(request, WORK_PARTIALS)
    context = work_detail_context(work, [partial] if partial else WORK_PARTIALS, cursors)
    # Live updates re-render the lists on the pages this view shows: a paged view stays live.
    context["live_url"] = work_ws_path(work.pk) + query_string(cursors)
    return render_console(request, DETAIL_TEMPLATE, context, partials=WORK_PARTIALS)
