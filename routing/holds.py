"""The Events a paused route holds (``worklife.pauses``): released when it resumes.

While a route is paused the router leaves the Events it selects unrouted, each saying which
pause holds it, and looks at them again every ``PAUSE_RECHECK``; a resume makes them routable at
once, and the route loop routes them in acceptance order, as every unrouted Event is.
"""

from __future__ import annotations

from django.db import transaction

from causal.models import Event, RouteState
from infra.wakeup import ACCEPTED, notify_on_commit
from worklife.pauses import route_hold_prefix


def route_held_release(*, scope: str, slot: str) -> int:
    """Make the Events the route ``slot`` of ``scope`` held routable now (the route loop is woken);
    returns how many."""
    with transaction.atomic():
        released = Event.objects.filter(
            route_state=RouteState.UNROUTED, unrouted_reason__startswith=route_hold_prefix(scope, slot)
        ).update(retry_at=None)
        if released:
            notify_on_commit(ACCEPTED)
    return released
