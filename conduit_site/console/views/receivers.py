"""The Receivers page: each receiver of the live configuration, the URL to give its sender,
where its secret is (never the secret), its last delivery and its refusals."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from conduit_site.console.views.access import permission_needed
from conduit_site.console.views.common import render_console
from routing.access.roles import VIEW_EVENT
from routing.receivers.selectors import receivers_overview

TEMPLATE = "routing/receivers.html"
PARTIALS = ("receiver-list",)


@permission_needed(VIEW_EVENT)
@require_GET
def receivers_page(request: HttpRequest) -> HttpResponse:
    """The receivers by name, with the full URL this server answers them at."""
    generation, overview = receivers_overview()
    context = {
        "section": "receivers",
        "generation": generation,
        "overview": overview,
        "base_url": request.build_absolute_uri("/").rstrip("/"),
    }
    return render_console(request, TEMPLATE, context, partials=PARTIALS)
