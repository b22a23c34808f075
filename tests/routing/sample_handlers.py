"""Route handlers for tests, registered with ``settings.CONDUIT_ROUTE_HANDLERS``.

``Scripted`` decides from the Event's data: ``data.behaviour`` picks a failure, otherwise it
matches with ``data.keys`` as correlation keys (and ``data.work`` as the Work it names). Tests flip ``BROKEN`` (Event ids that fail
transiently) and release ``RELEASE`` (what a hanging call waits for).
"""

from __future__ import annotations

import threading

from routing.extension import Invalid, RouteDecision, Unavailable, skip

BROKEN: set[str] = set()
RELEASE = threading.Event()
CALLS: list[str] = []


class Scripted:
    def match(self, event, route):
        CALLS.append(event.id)
        prefix = route.params.get("prefix", "") if route.params else ""
        if not event.type.startswith(prefix):
            return skip(f"type {event.type} does not start with {prefix}")
        data = event.data or {}
        behaviour = data.get("behaviour", "") if hasattr(data, "get") else ""
        if event.id in BROKEN or behaviour == "fail":
            raise Unavailable(
                data.get("why", "upstream is restarting") if behaviour else "upstream is restarting"
            )
        if behaviour == "invalid":
            raise Invalid("payload has no author")
        if behaviour == "panic":
            raise RuntimeError("handler bug: boom")
        if behaviour == "refused":  # an upstream's connection refused: retried like Unavailable
            raise ConnectionRefusedError("upstream refused the connection")
        if behaviour == "no-decision":
            return "yes"
        if behaviour == "hang":
            RELEASE.wait(30)
            return skip("released")
        if behaviour == "slow-fail":  # fails transiently, once RELEASE is set
            RELEASE.wait(30)
            raise Unavailable("upstream is restarting")
        if behaviour == "skip":
            return skip(data.get("why", "not for me"))
        return RouteDecision(
            True, reason="scripted", keys=tuple(data.get("keys", ())), work_id=data.get("work")
        )


class Mutating:
    """Tries to change its snapshot; the router must not let it (R5)."""

    seen: list[str] = []

    def match(self, event, route):
        try:
            event.data["changed"] = True  # type: ignore[index]
        except TypeError as exc:
            Mutating.seen.append(f"data: {type(exc).__name__}")
        try:
            event.type = "changed"  # type: ignore[misc]
        except AttributeError as exc:
            Mutating.seen.append(f"type: {type(exc).__name__}")
        return skip("looked only")


def noop(*args, **kwargs):
    """A Python executor target that does nothing."""
    return None


class Slow:
    """Takes ``params.seconds`` to decide (``params.hang``: until ``RELEASE``), then matches
    when ``params.match`` is true, else skips."""

    def match(self, event, route):
        params = route.params or {}
        if params.get("hang"):
            RELEASE.wait(30)
        else:
            threading.Event().wait(float(params.get("seconds", 0)))
        if params.get("match"):
            return RouteDecision(True, reason="slow")
        return skip(f"took {params.get('seconds', 0)}s to say no")
