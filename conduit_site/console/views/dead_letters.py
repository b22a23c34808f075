"""The dead letters page: failed and skipped Events, rerouted several at a time.

``GET dead-letters/`` lists the RouteRecords of failed and skipped Events, newest first,
filtered by scope, route, code (the record's reason) and disposition, 50 a page by Event seq.
Each shows its error (first line; the whole text on expand), attempts and Work, and whether
it was rerouted already. ``POST dead-letters/reroute/`` reroutes the selected Events, each
with its own control Event in its own transaction (``controls.events.events_reroute``), and
shows what happened to each one above the list. Rerouting needs ``routing.reroute_event``.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET, require_POST

import controls.events
from causal.clock import Clock, system_clock
from conduit_site.console.forms import KeysetOrderForm, form_errors_text
from conduit_site.console.views.access import permission_needed
from conduit_site.console.views.common import list_paging_urls, render_console
from conduit_site.console.views.controls import require_control_permission
from conduit_site.doctor import first_line
from infra.converters import MAX_ID
from routing.access.roles import VIEW_EVENT
from routing.engine.selectors import DeadLetterFilter, dead_letters_page, dead_letters_total
from routing.errors import RouteErrorCode

TEMPLATE = "routing/dead_letters.html"
PARTIALS = ("dead-letter-list",)

# The trusted clock the reroutes use (tests inject a fake one).
clock: Clock = system_clock


class DeadLetterFilterForm(KeysetOrderForm):
    """Filters of the dead letters: exact scope, route and code, disposition; ``before`` pages
    a newest-first list, ``after`` an oldest-first one (``oldest``), by Event seq."""

    scope = forms.CharField(required=False, max_length=255, help_text="Exact scope path, e.g. acme/web.")
    route = forms.CharField(required=False, max_length=128, help_text="Exact route slot.")
    code = forms.CharField(
        required=False,
        max_length=500,
        help_text="Exact reason: a route error code (handler_failed…) or 'skipped by <user>'.",
    )
    disposition = forms.ChoiceField(
        required=False,
        choices=[("", "failed or skipped"), ("failed", "failed"), ("skipped", "skipped")],
        help_text="Failed (given up on) or skipped by an operator.",
    )

    def clean(self):
        data = super().clean()
        self.clean_order(data)
        return data

    def filters(self) -> DeadLetterFilter:
        """The validated filters (call after ``is_valid()``)."""
        data = self.cleaned_data
        return DeadLetterFilter(
            scope=data["scope"], route=data["route"], code=data["code"], disposition=data["disposition"]
        )


class RerouteSelectionForm(forms.Form):
    """The Events selected for a reroute (checkboxes named ``seq``)."""

    seq = forms.TypedMultipleChoiceField(
        coerce=int,
        required=True,
        error_messages={
            "required": "select at least one Event to reroute",
            "invalid_choice": "%(value)s is not an Event seq (a positive integer)",
        },
        help_text="The seqs of the dead letters to reroute.",
    )

    def __init__(self, data: Any) -> None:
        super().__init__(data)
        # Any positive integer is a candidate; the service says what happened to each one.
        values = data.getlist("seq") if hasattr(data, "getlist") else []
        self.fields["seq"].choices = [
            (value, value) for value in values if str(value).isascii() and str(value).isdigit()
        ]

    def clean_seq(self) -> list[int]:
        seqs = self.cleaned_data["seq"]
        if len(seqs) > controls.events.MAX_BATCH:
            raise forms.ValidationError(f"at most {controls.events.MAX_BATCH} Events can be rerouted at once")
        if any(not 1 <= seq <= MAX_ID for seq in seqs):
            raise forms.ValidationError("an Event seq is a positive integer")
        return seqs


def dead_letter_list_context(
    filters: DeadLetterFilter, *, cursor: int | None = None, oldest: bool = False
) -> dict[str, Any]:
    """What the ``dead-letter-list`` partial needs: a page of dead letters, each one's copy
    (when rerouted already), their total and the paging links. Three queries."""
    page = dead_letters_page(filters, before=cursor, oldest=oldest)
    copies = controls.events.reroute_copies([record.event for record in page])
    params = {
        "scope": filters.scope,
        "route": filters.route,
        "code": filters.code,
        "disposition": filters.disposition,
    }
    rows = [
        {
            "record": record,
            "event": record.event,
            "copy_seq": copies.get(record.event_id),
            "error_line": first_line(record.error),
        }
        for record in page
    ]
    return {
        "filters": filters,
        "filter_params": params,
        "page": page,
        "rows": rows,
        "total": dead_letters_total(filters),
        "total_noun": "dead letters",
        **list_paging_urls(
            "dead-letters", params, oldest=oldest, cursor=cursor, next_cursor=page.next_cursor
        ),
    }


@permission_needed(VIEW_EVENT)
@require_GET
def dead_letters(request: HttpRequest) -> HttpResponse:
    """Failed and skipped Events, newest (or oldest) first, filtered by scope, route, code and
    disposition, with their total."""
    form = DeadLetterFilterForm(request.GET)
    context: dict[str, Any] = {"section": "dead-letters", "form": form, "codes": list(RouteErrorCode)}
    if not form.is_valid():
        context.update(page=None, rows=[], errors=form_errors_text(form))
        return render_console(request, TEMPLATE, context, partials=PARTIALS, status=400)
    context.update(dead_letter_list_context(form.filters(), cursor=form.cursor(), oldest=form.oldest_first()))
    return render_console(request, TEMPLATE, context, partials=PARTIALS)


@login_required
@require_POST
def dead_letters_reroute_view(request: HttpRequest) -> HttpResponse:
    """Reroute the selected dead letters, each in its own transaction, and show each outcome."""
    require_control_permission(request, controls.events.REROUTE_EVENT)
    filters_form = DeadLetterFilterForm(request.POST)
    selection = RerouteSelectionForm(request.POST)
    context: dict[str, Any] = {"section": "dead-letters", "form": filters_form, "codes": list(RouteErrorCode)}
    valid = filters_form.is_valid()
    filters = filters_form.filters() if valid else DeadLetterFilter()
    oldest = valid and filters_form.oldest_first()
    if not selection.is_valid():
        context.update(dead_letter_list_context(filters, oldest=oldest), errors=form_errors_text(selection))
        return render_console(request, TEMPLATE, context, partials=PARTIALS, status=400)
    outcomes = controls.events.events_reroute(
        seqs=selection.cleaned_data["seq"], user=request.user, clock=clock
    )
    context.update(dead_letter_list_context(filters, oldest=oldest), outcomes=outcomes)
    return render_console(request, TEMPLATE, context, partials=PARTIALS)
