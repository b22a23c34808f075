"""R12 and R16: each handler call has a deadline of its own, and a timeout names its route (in
the route record, the counted failure, the log lines and ``events get``)."""

from __future__ import annotations

import io
import logging
import time
from datetime import timedelta

import pytest
from django.core.management import call_command

from causal.models import KV, RouteState
from routing.engine.failures import FAILURES_NAMESPACE
from routing.engine.handler_pool import HandlerPool
from routing.engine.options import RouterOptions
from routing.engine.router import build_router
from routing.errors import RouteErrorCode
from routing.models import RouteRecord
from tests.routing import sample_handlers
from tests.routing.factories import UserFactory, api_token_with_secret
from tests.routing.routerkit import HANDLERS, accept, apply, state

DEADLINE = 0.5

THREE_SLOW = f"""
version: 1
scopes:
  - path: acme
    bindings:
      inbox: {{}}
    routes:
      - slot: first
        handler: slow
        params: {{seconds: {DEADLINE * 0.6}}}
        binding: inbox
        policy: queue
      - slot: second
        handler: slow
        params: {{seconds: {DEADLINE * 0.6}}}
        binding: inbox
        policy: queue
      - slot: third
        handler: slow
        params: {{seconds: {DEADLINE * 0.6}, match: true}}
        binding: inbox
        policy: queue
"""

ONE_STUCK = """
version: 1
scopes:
  - path: acme
    bindings:
      inbox: {}
    routes:
      - slot: quick
        handler: slow
        params: {seconds: 0}
        binding: inbox
        policy: queue
      - slot: stuck
        handler: slow
        params: {hang: true}
        binding: inbox
        policy: queue
      - slot: after
        handler: slow
        params: {seconds: 0, match: true}
        binding: inbox
        policy: queue
"""


@pytest.fixture(autouse=True)
def handlers(test_handlers, settings):
    settings.CONDUIT_ROUTE_HANDLERS = {**HANDLERS, "slow": "tests.routing.sample_handlers.Slow"}


def record(event) -> RouteRecord:
    return RouteRecord.objects.get(event=event)


@pytest.mark.django_db
def test_r12_each_handler_gets_its_own_deadline(clock):
    """Three handlers each taking 60% of the deadline: together they run past it, each within
    its own, and the Event routes on the third."""
    apply(clock, THREE_SLOW)
    event = accept(clock, "x", {})
    r = build_router(clock=clock, options=RouterOptions(route_timeout=DEADLINE))
    try:
        started = time.monotonic()
        outcome = r.route(event.seq)
        elapsed = time.monotonic() - started
    finally:
        r.close()
    assert elapsed >= 3 * DEADLINE * 0.6 > DEADLINE
    assert outcome.error is None and outcome.settled
    rec = record(event)
    assert (rec.route, rec.disposition) == ("third", "routed")


def test_r12_each_step_of_a_stepped_call_has_the_whole_deadline():
    """The pool's part: a call in three steps, each under the deadline, answers; a step that
    overruns is named in the outcome."""

    def steps(marked, seconds):
        for name in ("a", "b", "c"):
            marked.running = (time.monotonic(), name)
            time.sleep(seconds[name])
        return "done"

    pool = HandlerPool(workers=1, max_abandoned=2)
    try:
        quick, stuck = pool.run_all(
            [
                lambda marked: steps(marked, {"a": 0.12, "b": 0.12, "c": 0.12}),
                lambda marked: steps(marked, {"a": 0, "b": 0.6, "c": 0}),
            ],
            timeout=0.2,
            stepped=True,
        )
    finally:
        pool.close()
    assert quick.result == "done" and not quick.timed_out and quick.elapsed >= 0.36
    assert stuck.timed_out and stuck.step == "b" and 0.2 <= stuck.elapsed < 0.6


@pytest.mark.django_db
def test_r12_a_timeout_names_its_route(clock, caplog, client):
    apply(clock, ONE_STUCK)
    event = accept(clock, "x", {})
    caplog.set_level(logging.INFO, logger="conduit.routing")
    deadline = 0.3
    try:
        # Retried: the counted failure names the route, and so does events get.
        r = build_router(clock=clock, options=RouterOptions(route_timeout=deadline))
        try:
            outcome = r.route(event.seq)
        finally:
            r.close()
        assert not outcome.settled and outcome.error.code == RouteErrorCode.HANDLER_TIMEOUT
        assert outcome.error.route == "stuck"
        counted = KV.objects.get(namespace=FAILURES_NAMESPACE, key=str(event.seq)).value
        assert counted["route"] == "stuck" and counted["error"] == "route stuck: no decision within 0.3s"
        out = io.StringIO()
        call_command("events", "get", str(event.seq), stdout=out)
        assert "failures: 1 (handler_timeout on route stuck)" in out.getvalue()
        _, secret = api_token_with_secret()
        auth = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
        api = client.get(f"/api/events/{event.seq}/route", **auth).json()
        assert (api["failure"]["code"], api["failure"]["route"]) == ("handler_timeout", "stuck")
        client.force_login(UserFactory())
        assert "(handler_timeout on route stuck)" in client.get(f"/events/{event.seq}/").text

        # Given up on: the record keeps the route (R16), the log lines name it.
        clock.advance(3)
        r = build_router(
            clock=clock,
            options=RouterOptions(
                route_timeout=deadline, max_route_failures=1, route_failure_window=timedelta(0)
            ),
        )
        try:
            outcome = r.route(event.seq)
        finally:
            r.close()
    finally:
        sample_handlers.RELEASE.set()
    assert outcome.settled and state(event) == RouteState.FAILED
    rec = record(event)
    assert (rec.disposition, rec.reason, rec.route, rec.attempts) == ("failed", "handler_timeout", "stuck", 2)
    assert rec.error == "route stuck: no decision within 0.3s"
    assert [refusal["route"] for refusal in rec.refusals] == ["quick"]  # said before the deadline
    abandoned = [r for r in caplog.records if r.getMessage() == "route.handler_abandoned"]
    assert [r.route for r in abandoned] == ["stuck", "stuck"]
    gave_up = [r for r in caplog.records if r.getMessage() == "route.gave_up"]
    assert [(r.event, r.code, r.route) for r in gave_up] == [(event.seq, "handler_timeout", "stuck")]
    decided = [r for r in caplog.records if r.getMessage() == "route.decided" and r.event == event.seq]
    assert decided[-1].route == "stuck"
    out = io.StringIO()
    call_command("events", "get", str(event.seq), stdout=out)
    text = out.getvalue()
    assert (
        "route: failed (handler_timeout) via stuck/" in text
        and "error: route stuck: no decision within 0.3s" in text
    )
