"""The console's home page."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from causal.clock import Clock, system_clock
from conduit_site.console.charts import trend_charts, trend_table
from conduit_site.console.selectors import console_summary
from conduit_site.console.trends import dead_letters_count, trends
from conduit_site.console.views.access import permission_needed
from conduit_site.console.views.common import render_console
from conduit_site.doctor import doctor
from infra.live import HOME_WS_PATH
from routing.access.roles import VIEW_EVENT

# The trusted clock the trends and checks read "now" from (tests inject a fake one).
clock: Clock = system_clock

HOME_TEMPLATE = "routing/home.html"
# What a live update of the home page re-renders: the cards of counts.
HOME_LIVE_PARTIAL = "console-summary"
# Doctor's checks that "Needs attention" shows on lines of their own.
ATTENTION_OWN_LINES = frozenset({"parked_work"})


def home_summary_context(now) -> dict[str, Any]:
    """What the ``console-summary`` cards need: the counts, doctor's warnings and the dead
    letters. The websocket consumer renders the same partial with it."""
    dead, dead_more = dead_letters_count()
    report = doctor(clock=lambda: now)
    return {
        "summary": console_summary(now=now),
        "report": report,
        # "Needs attention" lists parked Work on a line of its own: not again among the warnings.
        "attention_warnings": [check for check in report.warnings if check.name not in ATTENTION_OWN_LINES],
        "dead_letters": dead,
        "dead_letters_more": dead_more,
    }


@permission_needed(VIEW_EVENT)
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """Counts of unrouted Events, of Work by status and of running and parked Work, dead
    letters and doctor warnings, the live generation, and the trends of the last hour and day
    as charts."""
    now = clock()
    cards = home_summary_context(now)
    result = trends(now=now, unrouted=cards["summary"].unrouted_events)
    context = {
        "section": "home",
        **cards,
        "live_url": HOME_WS_PATH,
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
    return render_console(request, HOME_TEMPLATE, context)
