"""The Work list and the Work page."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.urls import reverse
from django.views.decorators.http import require_GET

from causal.clock import Clock, system_clock
from conduit_site.live import work_ws_path
from routing.roles import VIEW_EVENT
from routing.selectors import event_routes, work_route_history_page
from routing.views.access import permission_needed
from routing.views.common import htmx_partial, paging_urls, query_string, render_console
from routing.views.forms import WorkDetailForm, WorkFilterForm
from worklife.models import Work
from worklife.selectors import (
    ENGINE_LIST_LIMIT,
    WorkFilter,
    work_attempts,
    work_children,
    work_get,
    work_inputs_page,
    work_intents,
    work_keys,
    work_page,
    work_timers,
    work_unrouted_events,
    work_waits,
    work_why_not_running,
)

LIST_TEMPLATE = "worklife/work_list.html"
LIST_PARTIALS = ("work-list",)
DETAIL_TEMPLATE = "worklife/work_detail.html"

# The trusted clock "backing off until" is read against (tests inject a fake one).
clock: Clock = system_clock


def work_rows_context(filters: WorkFilter, *, before: int | None = None) -> dict[str, Any]:
    """What the ``work-list`` partial needs: one page of Work, the paging links and now (a
    backoff shows only while it lasts)."""
    page = work_page(filters, before=before)
    params = {"scope": filters.scope, "status": filters.status}
    return {"filters": filters, "page": page, "now": clock(), **paging_urls("work-list", params, page)}


@permission_needed(VIEW_EVENT)
@require_GET
def work_list(request: HttpRequest) -> HttpResponse:
    """Work newest first, filtered by scope and status, 50 a page by id."""
    form = WorkFilterForm(request.GET)
    context: dict[str, Any] = {"section": "work", "form": form}
    if not form.is_valid():
        context["page"] = None
        return render_console(request, LIST_TEMPLATE, context, partials=LIST_PARTIALS, status=400)
    context.update(work_rows_context(form.filters(), before=form.cleaned_data["before"]))
    return render_console(request, LIST_TEMPLATE, context, partials=LIST_PARTIALS)


# --- the Work page, partial by partial --------------------------------------------------------
# Each partial of the Work page has a context builder, so an htmx request (or a websocket
# update) for one partial reads only what that partial shows.


def _summary(work: Work, cursors: dict[str, int | None]) -> dict[str, Any]:
    return {
        "why": work_why_not_running(work, now=clock()),
        "keys": work_keys(work.pk),
        "children": work_children(work.pk),
    }


def _engine(work: Work, cursors: dict[str, int | None]) -> dict[str, Any]:
    # What work_loop did with the Work: newest first, the newest ENGINE_LIST_LIMIT of each.
    return {
        "attempts": work_attempts(work.pk, limit=ENGINE_LIST_LIMIT),
        "waits": work_waits(work.pk),
        "timers": work_timers(work.pk),
        "intents": work_intents(work.pk),
    }


def _unrouted(work: Work, cursors: dict[str, int | None]) -> dict[str, Any]:
    unrouted = work_unrouted_events(work)
    # Each with the failure counted on it (count, next retry): one query for the page.
    return {"unrouted": unrouted, "unrouted_routes": event_routes(unrouted.items)}


def _input(work: Work, cursors: dict[str, int | None]) -> dict[str, Any]:
    after = cursors.get("input_after")
    page = work_inputs_page(work.pk, after=after)
    base = reverse("work-detail", args=[work.pk])
    return {
        "inputs": page,
        "inputs_first_url": base if after is not None else "",
        "inputs_next_url": base + query_string({"input_after": page.next_cursor}) if page.has_next else "",
    }


def _history(work: Work, cursors: dict[str, int | None]) -> dict[str, Any]:
    before = cursors.get("history_before")
    page = work_route_history_page(work.pk, before=before)
    base = reverse("work-detail", args=[work.pk])
    return {
        "history": page,
        "history_first_url": base if before is not None else "",
        "history_next_url": (
            base + query_string({"history_before": page.next_cursor}) if page.has_next else ""
        ),
    }


WORK_PARTIALS: dict[str, Callable[[Work, dict[str, int | None]], dict[str, Any]]] = {
    "work-summary": _summary,
    "work-engine": _engine,
    "work-unrouted": _unrouted,
    "work-input": _input,
    "work-history": _history,
}
# What a websocket update re-renders: the Work's state, its engine and its lists, first pages.
LIVE_PARTIALS = ("work-summary", "work-engine", "work-unrouted", "work-input", "work-history")


def work_detail_context(
    work: Work, partials: Iterable[str] = WORK_PARTIALS, cursors: dict[str, int | None] | None = None
) -> dict[str, Any]:
    """The context of the Work page's ``partials`` (all of them by default)."""
    cursors = cursors or {}
    context: dict[str, Any] = {"section": "work", "work": work}
    for name in partials:
        context.update(WORK_PARTIALS[name](work, cursors))
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
    cursors = {name: form.cleaned_data[name] for name in ("input_after", "history_before")}
    partial = htmx_partial(request, WORK_PARTIALS)
    context = work_detail_context(work, [partial] if partial else WORK_PARTIALS, cursors)
    # Live updates re-render first pages: a paged view keeps still.
    context["live_url"] = work_ws_path(work.pk) if not any(cursors.values()) else ""
    return render_console(request, DETAIL_TEMPLATE, context, partials=WORK_PARTIALS)
