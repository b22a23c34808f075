"""The console's home page."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from causal.clock import Clock, system_clock
from conduit_site.console.trends import dead_letters_count, trends
from conduit_site.console.views.access import permission_needed
from conduit_site.console.views.charts import trend_charts, trend_table
from conduit_site.console.views.common import render_console
from conduit_site.doctor import doctor
from routing.access.roles import VIEW_EVENT
from routing.selectors import console_summary

# The trusted clock the trends and checks read "now" from (tests inject a fake one).
clock: Clock = system_clock


@permission_needed(VIEW_EVENT)
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """Counts of unrouted Events, of Work by status and of running and parked Work, dead
    letters and doctor warnings, the live generation, and the trends of the last hour and day
    as charts."""
    now = clock()
    summary = console_summary(now=now)
    report = doctor(clock=lambda: now)
    dead, dead_more = dead_letters_count()
    result = trends(now=now, unrouted=summary.unrouted_events)
    context = {
        "section": "home",
        "summary": summary,
        "report": report,
        "dead_letters": dead,
        "dead_letters_more": dead_more,
        "trends": result,
        "spans": [
            (
                "hour",
                "Last hour",
                trend_charts(result.hour, label="in the last hour"),
                trend_table(result.hour, caption="The last hour, a row a minute"),
            ),
            (
                "day",
                "Last day",
                trend_charts(result.day, label="in the last day"),
                trend_table(result.day, caption="The last day, a row every 20 minutes"),
            ),
        ],
    }
    return render_console(request, "routing/home.html", context)
