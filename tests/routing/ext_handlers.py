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


class Unbuildable:
    """A handler whose instance cannot be made (its extension misconfigured)."""

    def __init__(self):
        raise RuntimeError("the handler's upstream is not configured")

    def match(self, event, route):
        return RouteDecision(matched=True, reason="never reached")
