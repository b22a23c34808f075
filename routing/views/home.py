"""The console's home page."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from routing.roles import VIEW_EVENT
from routing.selectors import console_summary
from routing.views.access import permission_needed
from routing.views.common import render_console


@permission_needed(VIEW_EVENT)
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """Counts of unrouted Events, of Work by status and of running and parked Work, the live
    generation, and links."""
    summary = console_summary()
    return render_console(request, "routing/home.html", {"section": "home", "summary": summary})
