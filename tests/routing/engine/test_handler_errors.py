"""What a route handler raises decides its route error (R10): ``Invalid`` →
handler_invalid; ``Unavailable`` or a transient OS-level error (``OSError`` and its subclasses)
→ handler_failed, retried; any other exception, a programming error → handler_panic with its
stack. Proved end to end through routing: acceptance, the router, the failure entry, the route
record, and a retry that routes once the upstream is back."""

from __future__ import annotations

import socket

import pytest

from causal.models import KV, RouteState
from routing.engine.failures import FAILURES_NAMESPACE, backoff_for
from routing.errors import RouteErrorCode
from routing.extension import RouteDecision
from routing.models import RouteRecord
from routing.setup.trace import trace
from tests.routing.routerkit import accept, apply, router, state

pytestmark = pytest.mark.django_db

# What the handler raises, by name: ``data.raise`` picks one while ``UPSTREAM_DOWN`` holds.
RAISED: dict[str, BaseException] = {
    "OSError": OSError(5, "Input/output error"),
    "ConnectionError": ConnectionError("upstream closed the connection"),
    "ConnectionRefusedError": ConnectionRefusedError(111, "Connection refused"),
    "ConnectionResetError": ConnectionResetError(104, "Connection reset by peer"),
    "BrokenPipeError": BrokenPipeError(32, "Broken pipe"),
    "TimeoutError": TimeoutError("read timed out"),
    "socket.gaierror": socket.gaierror(-3, "Temporary failure in name resolution"),
    "KeyError": KeyError("author"),
    "TypeError": TypeError("unsupported operand type(s)"),
    "AttributeError": AttributeError("'NoneType' object has no attribute 'get'"),
    "ZeroDivisionError": ZeroDivisionError("division by zero"),
    "RuntimeError": RuntimeError("handler bug"),
}
TRANSIENT = [
    "OSError",
    "ConnectionError",
    "ConnectionRefusedError",
    "ConnectionResetError",
    "BrokenPipeError",
    "TimeoutError",
    "socket.gaierror",
]
PROGRAMMING = ["KeyError", "TypeError", "AttributeError", "ZeroDivisionError", "RuntimeError"]
UPSTREAM_DOWN: set[str] = set()


class Raising:
    """Raises ``RAISED[data.raise]`` while the upstream is down, then matches."""

    def match(self, event, route):
        name = event.data.get("raise", "")
        if name in UPSTREAM_DOWN:
            raise RAISED[name]
        return RouteDecision(matched=True, reason="upstream answered")


DOCUMENT = """
version: 1
scopes:
  - path: acme
    bindings:
      inbox: {}
    routes:
      - slot: upstream
        handler: raising
        binding: inbox
        policy: queue
"""


@pytest.fixture(autouse=True)
def raising_handler(settings):
    settings.CONDUIT_ROUTE_HANDLERS = {"raising": f"{__name__}.Raising"}
    UPSTREAM_DOWN.clear()
    yield
    UPSTREAM_DOWN.clear()


def failure(event) -> dict | None:
    return (
        KV.objects.filter(namespace=FAILURES_NAMESPACE, key=str(event.seq))
        .values_list("value", flat=True)
        .first()
    )


@pytest.mark.parametrize("raised", TRANSIENT)
def test_a_transient_os_error_is_handler_failed_and_retried_until_the_upstream_is_back(clock, raised):
    apply(clock, DOCUMENT)
    UPSTREAM_DOWN.add(raised)
    event = accept(clock, "x.ping", {"raise": raised})
    r = router(clock)
    try:
        outcome = r.route(event.seq)
        # Retried, not dead-lettered: the Event stays unrouted with a backoff.
        assert not outcome.settled and outcome.error.code == RouteErrorCode.HANDLER_FAILED
        assert outcome.error.retried
        assert state(event) == RouteState.UNROUTED
        entry = failure(event)
        assert (entry["code"], entry["count"]) == ("handler_failed", 1)
        assert entry["error"].startswith(f"route upstream: {type(RAISED[raised]).__name__}: ")
        event.refresh_from_db()
        assert event.retry_at == clock() + backoff_for(1)
        assert not RouteRecord.objects.filter(event=event).exists()

        # The upstream restarts: the retry routes the Event, nothing lost.
        UPSTREAM_DOWN.clear()
        clock.set(event.retry_at)
        outcome = r.route(event.seq)
        assert outcome.settled and outcome.error is None
        assert state(event) == RouteState.ROUTED and failure(event) is None
        record = RouteRecord.objects.get(event=event)
        assert (record.route, record.disposition) == ("upstream", "routed")
        assert record.work_id is not None  # it started Work: the input was not lost
    finally:
        r.close()


@pytest.mark.parametrize("raised", PROGRAMMING)
def test_a_programming_error_is_handler_panic_dead_lettered_at_once_with_its_stack(clock, raised):
    apply(clock, DOCUMENT)
    UPSTREAM_DOWN.add(raised)
    event = accept(clock, "x.ping", {"raise": raised})
    r = router(clock)
    try:
        outcome = r.route(event.seq)
    finally:
        r.close()
    assert outcome.settled and outcome.error.code == RouteErrorCode.HANDLER_PANIC
    assert not outcome.error.retried
    assert state(event) == RouteState.FAILED
    record = RouteRecord.objects.get(event=event)
    assert (record.disposition, record.reason, record.attempts) == ("failed", "handler_panic", 1)
    assert record.error.startswith(f"route upstream: {raised}: ")
    assert "Traceback (most recent call last)" in record.error and "raise RAISED[name]" in record.error


def test_trace_classifies_handler_errors_as_routing_does(clock):
    """Trace asks the routes through the same code path: the same error for each exception,
    and the same settlement: a transient one is counted and retried (the Event stays unrouted),
    a programming error is given up on at once (the record says ``failed``)."""
    apply(clock, DOCUMENT)
    UPSTREAM_DOWN.update(RAISED)
    reasons = {}
    for name in RAISED:
        payload = {
            "specversion": "1.0",
            "id": f"t-{name}",
            "source": "tests",
            "type": "x.ping",
            "scope": "acme",
        }
        result = trace(payload={**payload, "data": {"raise": name}}, clock=clock)
        reasons[name] = (result.effect, result.reason)
    assert reasons == {
        **dict.fromkeys(TRANSIENT, ("error", "handler_failed")),
        **dict.fromkeys(PROGRAMMING, ("failed", "handler_panic")),
    }
