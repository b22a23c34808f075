"""The Doctor page: the health checks ``manage.py doctor`` and ``GET /api/doctor`` run (R23)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from causal.clock import Clock, system_clock
from conduit_site.console.views.access import permission_needed
from conduit_site.console.views.common import render_console
from conduit_site.doctor import doctor
from routing.access.roles import VIEW_EVENT

TEMPLATE = "routing/doctor.html"
PARTIALS = ("doctor-checks",)

# The trusted clock the checks read "now" from (tests inject a fake one).
clock: Clock = system_clock


@permission_needed(VIEW_EVENT)
@require_GET
def doctor_page(request: HttpRequest) -> HttpResponse:
    """Every check with its verdict and findings; ``refresh`` re-runs them (htmx swaps the list)."""
    report = doctor(clock=clock)
    return render_console(request, TEMPLATE, {"section": "doctor", "report": report}, partials=PARTIALS)


@login_required
@require_GET
def console_health(request: HttpRequest) -> HttpResponse:
    """The heartbeat banner alone, which every console page polls to keep it current."""
    return render_console(request, "console/heartbeat_banner_live.html", {})
