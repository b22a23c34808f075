"""Trace equals routing, as a property (R37–R45, R39).

Hypothesis generates a configuration (a root scope and perhaps a child that overrides its
routes, with policies, fallbacks, starts and handlers that match, skip, fail, refuse, hang or
panic), then a stream of Events and lifecycle steps (waits, runs, cancels, completions, the
clock moving on). Before each Event is accepted and routed, its trace is taken; after routing,
the trace's state, effect, route, binding, Work and reason equal what routing recorded.
"""

from __future__ import annotations

import os
from datetime import timedelta

from django.test import override_settings
from hypothesis import HealthCheck, Phase, event, given, reject
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from hypothesis.extra.django import TestCase as HypothesisTestCase

from causal.models import Event, RouteState
from routing.acceptance.envelopes import EnvelopeInvalid
from routing.acceptance.services import event_accept
from routing.config.problems import ConfigInvalid
from routing.config.services import config_apply
from routing.engine.options import RouterOptions
from routing.engine.router import build_router
from routing.models import RouteRecord
from routing.setup.trace import TraceRefused, trace
from tests.conftest import FakeClock
from tests.routing import sample_handlers
from tests.routing.routerkit import HANDLERS
from tests.worklife.attemptkit import attempt_start, work_complete
from worklife.errors import WorkError
from worklife.lifecycle import work_cancel_in_tx
from worklife.models import Attempt, Work
from worklife.waits import attempt_wait

# At least 300 examples per CI run; CONDUIT_DIFFERENTIAL_EXAMPLES raises it locally.
EXAMPLES = int(os.environ.get("CONDUIT_DIFFERENTIAL_EXAMPLES", "300"))
# Shrinking a failure re-runs routing many times: CONDUIT_DIFFERENTIAL_SHRINK=0 skips it.
PHASES = [p for p in Phase if p != Phase.shrink or os.environ.get("CONDUIT_DIFFERENTIAL_SHRINK", "1") == "1"]
# Long enough that no ordinary handler call misses it on a loaded machine; a hang always does.
OPTIONS = RouterOptions(
    route_timeout=0.25,
    max_route_failures=2,
    route_failure_window=timedelta(seconds=30),
    workers=2,
    max_abandoned=64,
)

BINDINGS = """
    bindings:
      inbox: {}
      triage:
        executor: python
        settings: {target: "tests.routing.sample_handlers:noop"}
        controls: [inject, interrupt]
      plain:
        executor: command
        settings: {argv: ["true"]}
"""

route_st = st.fixed_dictionaries(
    {
        "handler": st.sampled_from(["match", "match", "scripted"]),
        "type": st.sampled_from(["a.*", "b.*", "*"]),
        "keyed": st.sampled_from([True, True, True, False]),
        "binding": st.sampled_from(["inbox", "triage", "plain"]),
        "policy": st.sampled_from(["queue", "inject", "interrupt", "drop"]),
        "fallback": st.sampled_from(["", "queue", "drop"]),
        "start": st.sampled_from([True, True, True, False]),
    }
)

event_st = st.fixed_dictionaries(
    {
        "scope": st.sampled_from(["acme", "acme", "acme/web"]),
        "type": st.sampled_from(["a.x", "a.x", "b.y", "c.z"]),
        "k": st.integers(0, 1),
        "explicit": st.sampled_from([False, False, True]),
        # A hang costs a deadline each time it is asked: rarer than the rest.
        "behaviour": st.sampled_from([""] * 8 + ["skip"] * 2 + ["fail"] * 2 + ["invalid", "panic", "hang"]),
        "repeat": st.sampled_from([False] * 14 + [True]),
        "to_newest_work": st.sampled_from([False, False, True]),  # names it by work_id
    }
)

# Each step: an Event, then perhaps a lifecycle step on one of the newest Works, or the clock
# moving on (so backoffs end and wait timeouts come due).
step_st = st.tuples(
    event_st,
    st.one_of(
        st.none(),
        st.none(),
        st.tuples(
            st.sampled_from(["wait", "wait", "wait-timeout", "run", "cancel", "complete"]),
            st.sampled_from([0, 0, 0, 1]),  # the newest Work, mostly
            st.sampled_from(["a.*", "b.*", "*"]),
        ),
        st.tuples(st.just("advance"), st.sampled_from([1, 5, 40, 400])),
    ),
)

case_st = st.fixed_dictionaries(
    {
        "routes": st.lists(route_st, min_size=1, max_size=4),
        "overrides": st.lists(st.tuples(st.integers(0, 3), route_st), max_size=2),
        "redefine_triage": st.booleans(),
        "steps": st.lists(step_st, min_size=1, max_size=10),
        # The causal limits the wake bridges meet: none derivable, one a minute, plenty.
        "limits": st.sampled_from([(0, 100), (0, 100), (8, 1), (8, 100)]),
    }
)


def _route_yaml(slot: str, route: dict, *, controls: bool) -> str:
    """One route; ``controls``: its binding ``triage`` claims inject and interrupt here (a
    control policy on any other binding gets a fallback, or the document is invalid)."""
    fallback = route["fallback"]
    if route["policy"] in ("inject", "interrupt") and not fallback:
        if route["binding"] != "triage" or not controls:
            fallback = "queue"
    if route["handler"] == "match":
        keys = ', keys: ["k:{data.k}"]' if route["keyed"] else ""
        params = f'{{type: "{route["type"]}"{keys}}}'
    else:
        params = '{prefix: "a"}' if route["type"] == "a.*" else "{}"
    lines = [
        f"      - slot: {slot}",
        f"        handler: {route['handler']}",
        f"        params: {params}",
        f"        binding: {route['binding']}",
        f"        policy: {route['policy']}",
        f"        start: {'true' if route['start'] else 'false'}",
    ]
    if fallback:
        lines.append(f"        fallback: {fallback}")
    return "\n".join(lines)


def document(case: dict) -> str:
    controls = not case["redefine_triage"]  # routes of acme are inherited by acme/web
    routes = "\n".join(_route_yaml(f"r{i}", r, controls=controls) for i, r in enumerate(case["routes"]))
    text = f"version: 1\nscopes:\n  - path: acme\n{BINDINGS}    routes:\n{routes}\n"
    overrides = sorted({i % len(case["routes"]): r for i, r in case["overrides"]}.items())
    if overrides or case["redefine_triage"]:
        text += "  - path: acme/web\n"
        if case["redefine_triage"]:
            text += '    bindings:\n      triage: {executor: command, settings: {argv: ["./bin/triage"]}}\n'
        if overrides:
            text += (
                "    routes:\n"
                + "\n".join(_route_yaml(f"r{i}", r, controls=controls) for i, r in overrides)
                + "\n"
            )
    return text


def payload_for(n: int, spec: dict) -> dict:
    key = f"k:{spec['k']}"
    payload = {
        "specversion": "1.0",
        "id": f"e{n}",
        "source": "prop",
        "type": spec["type"],
        "scope": spec["scope"],
        "data": {"k": spec["k"], "keys": [key], "behaviour": spec["behaviour"]},
    }
    if spec["explicit"]:
        payload["correlation"] = [key]
    if spec["to_newest_work"]:
        newest = Work.objects.order_by("-pk").values_list("pk", flat=True).first()
        if newest is not None:
            payload["work_id"] = newest
    return payload


@override_settings(CONDUIT_ROUTE_HANDLERS=dict(HANDLERS))
class TraceEqualsRouting(HypothesisTestCase):
    @hsettings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        phases=PHASES,
    )
    @given(case=case_st)
    def test_r39_the_trace_taken_before_routing_equals_the_record(self, case):
        clock = FakeClock()
        try:
            config_apply(document=document(case), clock=clock)
        except ConfigInvalid:
            reject()
        depth, rate = case["limits"]
        with override_settings(CONDUIT_CAUSAL_MAX_DEPTH=depth, CONDUIT_CAUSAL_RATE_PER_MINUTE=rate):
            sample_handlers.RELEASE.clear()
            router = build_router(clock=clock, options=OPTIONS)
            try:
                self._run(case["steps"], router, clock)
            finally:
                sample_handlers.RELEASE.set()  # abandoned hanging calls return
                router.close()

    def _run(self, steps, router, clock) -> None:
        last_payload = None
        for n, (spec, then) in enumerate(steps):
            payload = last_payload if spec["repeat"] and last_payload else payload_for(n, spec)
            last_payload = payload
            self._event(payload, router, clock)
            if then is None:
                continue
            if then[0] == "advance":
                clock.advance(then[1])
            else:
                self._lifecycle(*then, clock)

    def _event(self, payload, router, clock) -> None:
        self._drain(router)
        try:
            predicted = trace(payload=payload, clock=clock, options=OPTIONS)
        except TraceRefused as refused:
            # A trace refuses what acceptance refuses (R38), for the same field.
            with self.assertRaises(EnvelopeInvalid) as refusal:
                event_accept(payload=payload, clock=clock, may_address_work=True)
            assert refusal.exception.field == refused.field
            return
        works_before = set(Work.objects.values_list("pk", flat=True))
        events_before = Event.objects.count()
        # A sender that may name Work (work_id, execution_id: the send permission).
        accepted = event_accept(payload=payload, clock=clock, may_address_work=True)
        if not accepted.created:
            assert (predicted.state, predicted.event) == ("duplicate", accepted.event.seq), predicted
            assert Event.objects.count() == events_before
            event("trace: duplicate")
            return
        assert predicted.state != "duplicate", predicted
        event(
            f"trace: {predicted.state} {predicted.effect}"
        )  # the spread shown by --hypothesis-show-statistics
        row = accepted.event
        router.route(row.seq)
        sample_handlers.RELEASE.set()
        sample_handlers.RELEASE.clear()
        row.refresh_from_db()
        context = (payload, predicted, row.unrouted_reason)
        assert predicted.state == row.route_state, context
        if row.route_state == RouteState.UNROUTED:
            assert predicted.waiting_on == row.waiting_on_id, context
            assert predicted.retry_at == row.retry_at, context
            assert predicted.unrouted_reason == row.unrouted_reason, context
            assert not RouteRecord.objects.filter(event=row).exists()
            return
        record = RouteRecord.objects.get(event=row)
        assert (predicted.effect, predicted.route, predicted.binding, predicted.reason) == (
            record.policy,
            record.route,
            record.binding,
            record.reason,
        ), context
        assert list(predicted.refusals) == record.refusals, context
        if predicted.effect == "start":
            assert record.work_id not in works_before, context
        else:
            assert predicted.work_id == record.work_id, context

    def _drain(self, router) -> None:
        for _ in range(20):
            if not router.route_pending():
                break
        sample_handlers.RELEASE.set()
        sample_handlers.RELEASE.clear()

    def _lifecycle(self, kind: str, index: int, match: str, clock) -> None:
        works = list(Work.objects.order_by("-pk").values_list("pk", "status", "binding"))
        if not works:
            return
        work_id, status, binding = works[index % len(works)]
        live = Attempt.objects.filter(work_id=work_id, state__in=["running", "waiting"]).first()
        try:
            if kind == "cancel":
                work_cancel_in_tx(work_id=work_id, clock=clock, by="prop")
            elif kind == "complete":
                if live is not None:
                    work_complete(attempt_id=live.pk, lease_epoch=live.lease_epoch, clock=clock)
            else:
                if live is None and status == "ready":
                    live = attempt_start(
                        work_id=work_id,
                        binding=binding or "inbox",
                        executor="python",
                        generation=1,
                        capabilities=["inject"],
                        clock=clock,
                    )
                if kind in ("wait", "wait-timeout") and live is not None and live.state == "running":
                    timeout = clock() + timedelta(seconds=10) if kind == "wait-timeout" else None
                    attempt_wait(
                        attempt_id=live.pk,
                        lease_epoch=live.lease_epoch,
                        match={"type": match},
                        clock=clock,
                        name="w",
                        timeout_at=timeout,
                    )
        except WorkError as refused:
            event(f"lifecycle: {kind} refused ({type(refused).__name__})")  # changes nothing
            return
        event(f"lifecycle: {kind} on {status} Work")
