"""``{% heartbeat_banner %}``: the banner every console page shows while the route loop or
the work loop has no fresh heartbeat, or after ``serve`` restarted a child, linking to Doctor,
and while anything is paused, linking to Flow. Two light queries (:func:`conduit_site.doctor.loops_alive`
and the pauses in force), and one more to name the restarted children when there are some."""

from __future__ import annotations

from typing import Any

from django import template

from causal.clock import Clock, system_clock
from conduit_site.doctor import HEARTBEAT_STALE, duration, loops_alive
from conduit_site.supervision.restarts import RESTARTS_RECENT, restarts_recent
from worklife.pauses import active_pauses, pause_line, target_of

register = template.Library()

# The trusted clock "fresh" is measured from (tests inject a fake one).
clock: Clock = system_clock


@register.inclusion_tag("console/heartbeat_banner.html")
def heartbeat_banner() -> dict[str, Any]:
    """The loops without a fresh heartbeat and the children serve restarted lately (none of
    either: no banner)."""
    now = clock()
    alive = loops_alive(now=now)
    return {
        "missing": alive.missing,
        "stale_after": duration(HEARTBEAT_STALE.total_seconds()),
        "restarts": restarts_recent(now=now) if alive.restarted else [],
        "restarts_within": duration(RESTARTS_RECENT.total_seconds()),
        # Operators' pauses in force: what they hold shows on every page until resumed.
        "pauses": [(target_of(p), pause_line(p)) for p in active_pauses(now)],
    }
