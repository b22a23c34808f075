"""``{% heartbeat_banner %}``: the banner every console page shows while the route loop or
the work loop has no fresh heartbeat, linking to Doctor. One light query
(:func:`conduit_site.doctor.loops_alive`)."""

from __future__ import annotations

from typing import Any

from django import template

from causal.clock import Clock, system_clock
from conduit_site.doctor import HEARTBEAT_STALE, duration, loops_alive

register = template.Library()

# The trusted clock "fresh" is measured from (tests inject a fake one).
clock: Clock = system_clock


@register.inclusion_tag("console/heartbeat_banner.html")
def heartbeat_banner() -> dict[str, Any]:
    """The loops without a fresh heartbeat (none: no banner)."""
    alive = loops_alive(now=clock())
    return {"missing": alive.missing, "stale_after": duration(HEARTBEAT_STALE.total_seconds())}
