"""Route handlers for registry tests, registered through ``settings.CONDUIT_ROUTE_HANDLERS``."""

from __future__ import annotations

from routing.extension import RouteDecision


class Always:
    """Matches every Event; params may only hold ``keys`` (a list of literal keys)."""

    @classmethod
    def validate_params(cls, params):
        for key in params:
            if key != "keys":
                yield key, f"unknown key {key!r}"

    def match(self, event, route):
        return RouteDecision(matched=True, reason="always", keys=tuple(route.params.get("keys", ())))


class NoMatchMethod:
    """Registered by mistake: it has no match method."""


not_a_class = Always()
