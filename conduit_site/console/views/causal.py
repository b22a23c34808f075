"""Causal limits in the console: a root's tree, limits and tokens, and the refusal diagnostics."""

from __future__ import annotations

from typing import Any

from django import forms
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_GET

from causal.clock import Clock, system_clock
from causal.models import DiagnosticKind, Event
from causal.selectors import (
    DiagnosticFilter,
    NotARoot,
    diagnostics_page,
    diagnostics_total,
    root_limits_status,
    root_tree,
)
from conduit_site.console.forms import KeysetOrderForm
from conduit_site.console.views.access import permission_needed
from conduit_site.console.views.common import list_paging_urls, query_string, render_console
from infra.converters import MAX_ID
from routing.access.roles import VIEW_EVENT

ROOT_TEMPLATE = "causal/root.html"
ROOT_PARTIALS = ("causal-limits",)
DIAGNOSTICS_TEMPLATE = "causal/diagnostics.html"
DIAGNOSTICS_PARTIALS = ("diagnostic-list",)
ROOT_RECENT_DIAGNOSTICS = 20

# The trusted clock the pages read "the current minute" from (tests inject a fake one).
clock: Clock = system_clock


class DiagnosticFilterForm(KeysetOrderForm):
    """Filters of the diagnostics list: kind and root; ``before`` pages a newest-first list,
    ``after`` an oldest-first one (``oldest``)."""

    kind = forms.ChoiceField(
        required=False, choices=[("", "any"), *DiagnosticKind.choices], help_text="The kind of refusal."
    )
    root = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_ID,
        label="Root seq",
        help_text="Only refusals under this root.",
    )

    def clean(self):
        data = super().clean()
        self.clean_order(data)
        return data

    def filters(self) -> DiagnosticFilter:
        """The validated filters (call after ``is_valid()``)."""
        return DiagnosticFilter(kind=self.cleaned_data["kind"], root_seq=self.cleaned_data["root"])


@permission_needed(VIEW_EVENT)
@require_GET
def causal_root(request: HttpRequest, seq: int) -> HttpResponse:
    """A root's causal tree with depths, its limits and tokens this minute, its refusals.

    A descendant's seq redirects to its root's page, at that Event.
    """
    try:
        tree = root_tree(seq)
    except Event.DoesNotExist:
        raise Http404(f"No Event with seq {seq}.") from None
    except NotARoot as not_root:
        return redirect(reverse("causal-root", args=[not_root.root_seq]) + f"#event-{seq}")
    recent = diagnostics_page(DiagnosticFilter(root_seq=seq), limit=ROOT_RECENT_DIAGNOSTICS)
    context: dict[str, Any] = {
        "section": "events",
        "tree": tree,
        "status": root_limits_status(seq, now=clock()),
        "diagnostics": recent,
        "diagnostics_url": reverse("causal-diagnostics") + query_string({"root": seq}),
    }
    return render_console(request, ROOT_TEMPLATE, context, partials=ROOT_PARTIALS)


@permission_needed(VIEW_EVENT)
@require_GET
def causal_diagnostics(request: HttpRequest) -> HttpResponse:
    """Refusal diagnostics of the causal limits, newest (or oldest) first, filtered by kind and
    root, with their total."""
    form = DiagnosticFilterForm(request.GET)
    # Its own item in the navigation ("Causal refusals"); a root's page is an Event's ("Events").
    context: dict[str, Any] = {"section": "causal", "form": form}
    if not form.is_valid():
        context["page"] = None
        return render_console(
            request, DIAGNOSTICS_TEMPLATE, context, partials=DIAGNOSTICS_PARTIALS, status=400
        )
    filters = form.filters()
    cursor, oldest = form.cursor(), form.oldest_first()
    page = diagnostics_page(filters, before=cursor, oldest=oldest)
    params = {"kind": filters.kind, "root": filters.root_seq}
    context.update(
        filters=filters,
        page=page,
        total=diagnostics_total(filters),
        total_noun="refusals",
        **list_paging_urls(
            "causal-diagnostics", params, oldest=oldest, cursor=cursor, next_cursor=page.next_cursor
        ),
    )
    return render_console(request, DIAGNOSTICS_TEMPLATE, context, partials=DIAGNOSTICS_PARTIALS)
