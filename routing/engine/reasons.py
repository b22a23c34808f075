"""How a RouteRecord's ``reason`` begins when routing writes a sentence rather than a code: the
routing decision writes these and the Event page's wording (``routing.records.explain``) reads them, one
definition for both. Light on purpose: reading an Event imports this, not the router."""

from __future__ import annotations

# A fallback taken because the running attempt could not take the input: "fallback queue: why".
FALLBACK_QUEUE = "fallback queue: "
FALLBACK_DROP = "fallback drop: "
# Input held for the running attempt until it ends (R11): "held until the attempt ends: why".
HELD = "held until the attempt ends: "
# The Event a waiting Work was waiting for: "wins wait <name or id>".
WINS_WAIT = "wins wait "
# An Event a route with a rate limit would have taken, dropped because the route took its limit
# within the period before it: "rate limited: route 'chat' in acme is over its rate limit …".
RATE_LIMITED = "rate limited: "
