"""``{% heartbeat_banner %}``: the banner every console page shows while the route loop or
the work loop has no fresh heartbeat, after ``serve`` restarted a child, or while this web
process's live updates are behind, linking to Doctor, and while anything is paused, linking to
Flow. Two light queries (:func:`conduit_site.doctor.loops_alive` and the pauses in force), one
more to name the restarted children when there are some, and one for the live updates once this
process serves a websocket."""

from __future__ import annotations

from typing import Any

from django import template

from causal.clock import Clock, system_clock
from conduit_site.doctor import HEARTBEAT_STALE, duration, loops_alive
from conduit_site.live import reader
from conduit_site.supervision.restarts import RESTARTS_RECENT, restarts_recent
from worklife.pauses import active_pauses, pause_line, target_of

register = template.Library()

# The trusted clock "fresh" is measured from (tests inject a fake one).
clock: Clock = system_clock


@register.inclusion_tag("console/heartbeat_banner.html")
def heartbeat_banner() -> dict[str, Any]:
    """The loops without a fresh heartbeat, the children serve restarted lately, and how far
    behind this web process's live updates are when past the limit (none of these: no banner)."""
    now = clock()
    alive = loops_alive(now=now)
    live = reader.state(now=now)
    return {
        "live_behind": duration(live.behind_seconds) if live.behind else "",
        "missing": alive.missing,
        "stale_after": duration(HEARTBEAT_STALE.total_seconds()),
        "restarts": restarts_recent(now=now) if alive.restarted else [],
        "restarts_within": duration(RESTARTS_RECENT.total_seconds()),
        # Operators' pauses in force: what they hold shows on every page until resumed.
        "pauses": [(target_of(p), pause_line(p)) for p in active_pauses(now)],
    }
