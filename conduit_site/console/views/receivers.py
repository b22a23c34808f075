"""The Receivers page: each receiver of the live configuration, the URL to give its sender,
whether its secret can be read (where it lives, to the roles that may change the configuration;
never the secret), its last delivery and its refusals."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from conduit_site.console.views.access import permission_needed
from conduit_site.console.views.common import render_console
from routing.access.roles import APPLY_CONFIGURATION, VIEW_EVENT
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
        # A secret's variable or file (and why it cannot be read) tells a viewer where to look
        # for it on the host: only who may change the configuration sees it.
        "show_secret_places": request.user.has_perm(APPLY_CONFIGURATION),
    }
    return render_console(request, TEMPLATE, context, partials=PARTIALS)
