"""Route failures (R10–R19) and the evidence the specification promises (R59): an always-failing
route given up on after its limit, a removed handler given up on at once, a handler that never
returns abandoned at the deadline, a panicking handler recovered with its stack, a failing earlier
input in a later Event's batch, and skip and reroute with doctor's check through the CLI."""

from __future__ import annotations

import io
import json
import logging
import socket
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.db import transaction
from django.urls import reverse

from causal.models import KV, Event, RouteState
from controls.events import event_reroute
from routing.engine.evaluate import snapshots_isolated
from routing.engine.failures import (
    FAILURES_NAMESPACE,
    RouteFailure,
    backoff_for,
    failure_put_in_tx,
    failures_forget_in_tx,
    failures_keep_failing,
    failures_read,
    gives_up,
)
from routing.engine.handler_pool import HandlerPool, PoolExhausted
from routing.engine.loop import RouteLoop
from routing.engine.options import RouterOptions
from routing.engine.router import build_router
from routing.errors import RouteError, RouteErrorCode
from routing.extension import RouteDecision
from routing.models import RouteRecord
from routing.setup.trace import trace, trace_event
from tests.causal.factories import EventFactory, KVFactory
from tests.conftest import FakeClock
from tests.routing import sample_handlers
from tests.routing.factories import UserFactory
from tests.routing.routerkit import SCRIPTED_ONLY, accept, apply, drain, router, state
from tests.support import run_manage
from tests.worklife.attemptkit import attempt_start, work_complete
from tests.worklife.factories import AttemptFactory, WorkFactory
from worklife.lifecycle import UnroutedInput
from worklife.models import Work, WorkInput

DEFAULTS = RouterOptions()


@pytest.fixture
def handlers(test_handlers):
    """The test handlers registered (tests/conftest.py), for the tests here that route."""


def record(event) -> RouteRecord:
    return RouteRecord.objects.get(event=event)


def failure(event) -> dict | None:
    return (
        KV.objects.filter(namespace=FAILURES_NAMESPACE, key=str(event.seq))
        .values_list("value", flat=True)
        .first()
    )


def pr(clock, number=1, action="opened", **kw):
    return accept(clock, f"github.pull_request.{action}", {"repo": "acme/api", "number": number}, **kw)


def inputs(work_id):
    return list(WorkInput.objects.filter(work_id=work_id).order_by("seq").values_list("seq", flat=True))


# --- the rules, table-driven (R14, R15) -------------------------------------------------------------


@pytest.mark.usefixtures("handlers")
@pytest.mark.parametrize(
    "failures,seconds",
    [
        (0, 0),
        (1, 2),
        (2, 4),
        (3, 8),
        (4, 16),
        (5, 32),
        (6, 64),
        (7, 128),
        (8, 256),
        (9, 300),
        (10, 300),
        (40, 300),
    ],
)
def test_r14_backoff_starts_at_two_seconds_doubles_and_is_capped_at_five_minutes(failures, seconds):
    assert backoff_for(failures) == timedelta(seconds=seconds)


T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
RETRIED = RouteError(RouteErrorCode.HANDLER_FAILED, "down")


@pytest.mark.usefixtures("handlers")
@pytest.mark.parametrize(
    "code,failures,elapsed,expected",
    [
        # Retried codes: the count AND the window (defaults 5 and 15 min).
        (RouteErrorCode.HANDLER_FAILED, 1, timedelta(0), False),
        (RouteErrorCode.HANDLER_FAILED, 4, timedelta(hours=1), False),  # the window alone is not enough
        (RouteErrorCode.HANDLER_FAILED, 5, timedelta(minutes=14, seconds=59), False),  # nor the count alone
        (RouteErrorCode.HANDLER_FAILED, 5, timedelta(minutes=15), True),
        (RouteErrorCode.HANDLER_TIMEOUT, 9, timedelta(minutes=20), True),
        (RouteErrorCode.HANDLER_TIMEOUT, 4, timedelta(minutes=20), False),
        # Not retried: the first failure gives up.
        (RouteErrorCode.HANDLER_MISSING, 1, timedelta(0), True),
        (RouteErrorCode.BINDING_INVALID, 1, timedelta(0), True),
        (RouteErrorCode.POLICY_INVALID, 1, timedelta(0), True),
        (RouteErrorCode.HANDLER_INVALID, 1, timedelta(0), True),
        (RouteErrorCode.HANDLER_PANIC, 1, timedelta(0), True),
    ],
)
def test_r15_gives_up_only_after_count_and_window_or_at_once_when_not_retried(
    code, failures, elapsed, expected
):
    error = RouteError(code, "boom")
    assert (
        gives_up(error=error, failures=failures, first_failed_at=T0, now=T0 + elapsed, options=DEFAULTS)
        is expected
    )


@pytest.mark.usefixtures("handlers")
def test_r15_the_limits_come_from_the_options():
    options = RouterOptions(max_route_failures=2, route_failure_window=timedelta(seconds=10))
    assert not gives_up(
        error=RETRIED, failures=2, first_failed_at=T0, now=T0 + timedelta(seconds=9), options=options
    )
    assert gives_up(
        error=RETRIED, failures=2, first_failed_at=T0, now=T0 + timedelta(seconds=10), options=options
    )


def _running_work_and_failing_input(clock):
    """A Work (pull request 1) with a running attempt, and an Event for it whose route fails
    until ``sample_handlers.BROKEN`` is cleared: (router, its first input, its id, the attempt,
    the failing Event)."""
    apply(clock)
    r = router(clock)
    opened = pr(clock, 1)
    r.route(opened.seq)
    work_id = record(opened).work_id
    attempt = attempt_start(
        work_id=work_id, binding="triage", executor="python", generation=1, capabilities=[], clock=clock
    )
    sample_handlers.BROKEN.add("flaky")
    flaky = accept(clock, "x.note", {}, correlation=["pr:acme/api#1"], id="flaky")
    return r, opened, work_id, attempt, flaky


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_r19_unrouted_input_blocks_its_works_later_input_and_complete(clock):
    r, opened, work_id, attempt, flaky = _running_work_and_failing_input(clock)
    later = pr(clock, 1, action="edited")
    other = pr(clock, 2)
    drain(r)
    later.refresh_from_db()
    assert (state(flaky), later.route_state, later.waiting_on_id) == (
        RouteState.UNROUTED,
        RouteState.UNROUTED,
        flaky.seq,
    )
    assert state(other) == RouteState.ROUTED  # another Work's input is not held
    assert inputs(work_id) == [opened.seq]
    with pytest.raises(UnroutedInput, match=f"#{flaky.seq}"):
        work_complete(attempt_id=attempt.pk, lease_epoch=1, clock=clock)
    # Once it routes, the later input follows in acceptance order and the attempt may complete;
    # the Work, with queued input left, is ready for its next attempt (R47).
    sample_handlers.BROKEN.clear()
    clock.advance(3)
    drain(r)
    assert inputs(work_id) == [opened.seq, flaky.seq, later.seq]
    work_complete(attempt_id=attempt.pk, lease_epoch=1, clock=clock)
    assert Work.objects.get(pk=work_id).status == "ready"


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_r19_unrouted_input_blocks_the_events_its_work_emitted_or_a_route_sends_to_it(clock):
    """Later input reaches a Work through its running attempt (an Event its execution emitted) or
    through the Work its route names, without a key: both wait behind its unrouted input."""
    r, opened, work_id, attempt, flaky = _running_work_and_failing_input(clock)
    emitted = accept(clock, "x.note", {}, execution_id=attempt.pk)
    named = accept(clock, "x.note", {"work": work_id})
    unknown = accept(clock, "x.note", {}, execution_id=attempt.pk + 1000)  # no such attempt: no Work
    drain(r)
    for later in (emitted, named):
        later.refresh_from_db()
        assert (later.route_state, later.waiting_on_id) == (RouteState.UNROUTED, flaky.seq)
    unknown.refresh_from_db()
    assert (unknown.waiting_on_id, unknown.unrouted_reason) == (
        None,
        f"conflicting identity (failure 1): execution_id {attempt.pk + 1000} names no attempt",
    )
    sample_handlers.BROKEN.clear()
    clock.advance(3)
    drain(r)
    assert [record(e).work_id for e in (flaky, emitted, named)] == [work_id] * 3
    assert inputs(work_id) == [opened.seq, flaky.seq, emitted.seq, named.seq]


# --- R59: an always-failing route ---------------------------------------------------------------------


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_r59_always_failing_route_is_given_up_after_its_limit_holding_its_work_until_then(clock, caplog):
    apply(clock)
    r = router(clock)
    opened = pr(clock, 1)
    r.route(opened.seq)
    work_id = record(opened).work_id
    attempt = attempt_start(
        work_id=work_id, binding="triage", executor="python", generation=1, capabilities=[], clock=clock
    )
    sample_handlers.BROKEN.add("always")
    failing = accept(clock, "x.note", {}, correlation=["pr:acme/api#1"], id="always")
    later = pr(clock, 1, action="edited")
    first_failed = clock()
    caplog.set_level(logging.INFO, logger="conduit.routing")

    passes = 0
    while True:
        passes += 1
        outcome = r.route(later.seq)  # the earlier failing input routes first, in the same call
        if outcome.settled:
            break
        # Before the give-up the failing Event holds its Work: the later input waits behind it,
        # and the Work cannot complete over it (R19).
        assert state(failing) == RouteState.UNROUTED and state(later) == RouteState.UNROUTED
        later.refresh_from_db()
        assert later.waiting_on_id == failing.seq
        assert inputs(work_id) == [opened.seq]
        with pytest.raises(UnroutedInput, match=f"#{failing.seq}"):
            work_complete(attempt_id=attempt.pk, lease_epoch=1, clock=clock)
        entry = failure(failing)
        assert entry["count"] == passes and entry["code"] == "handler_failed"
        failing.refresh_from_db()
        assert failing.retry_at == clock() + backoff_for(passes)
        clock.set(failing.retry_at)
        assert passes < 20, "never given up"

    # Given up only once both the count (5) and the window (15 min) were reached.
    count = record(failing).attempts
    assert count >= DEFAULTS.max_route_failures
    assert clock() - first_failed >= DEFAULTS.route_failure_window
    failing_record = record(failing)
    assert (failing_record.disposition, failing_record.policy, failing_record.reason) == (
        "failed",
        "failed",
        "handler_failed",
    )
    assert (failing_record.route, failing_record.work_id) == ("scripted", work_id)  # R16: on its Work
    assert "upstream is restarting" in failing_record.error
    assert state(failing) == RouteState.FAILED and failure(failing) is None
    # The Work takes its later input in the same call (R16, R17) and can complete again.
    assert record(later).work_id == work_id and inputs(work_id) == [opened.seq, later.seq]
    assert work_complete(attempt_id=attempt.pk, lease_epoch=1, clock=clock).status == "ready"
    # route.decided carries the error and the attempts (R16); the give-up is a warning (R18).
    decided = [r for r in caplog.records if r.getMessage() == "route.decided" and r.event == failing.seq]
    # The log line keeps the route and the words; the record keeps the whole error.
    assert decided and decided[0].__dict__["route.error"].startswith("route scripted: ")
    assert decided[0].__dict__["route.attempts"] == count and decided[0].policy == "failed"
    r.close()


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_r18_each_give_up_is_logged_as_a_warning(clock, caplog):
    apply(clock, SCRIPTED_ONLY)
    events = [accept(clock, "x", {"behaviour": behaviour}) for behaviour in ("invalid", "panic")]
    caplog.set_level(logging.INFO, logger="conduit.routing")
    drain(router(clock))
    gave_up = [r for r in caplog.records if r.name == "conduit.routing" and r.getMessage() == "route.gave_up"]
    assert [(r.levelname, r.event, r.code, r.attempts) for r in gave_up] == [
        ("WARNING", events[0].seq, "handler_invalid", 1),
        ("WARNING", events[1].seq, "handler_panic", 1),
    ]


# --- R59: a removed handler -----------------------------------------------------------------------------


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_r59_a_removed_handler_is_given_up_on_at_once(clock, settings):
    apply(clock, SCRIPTED_ONLY)
    settings.CONDUIT_ROUTE_HANDLERS = {"match": "routing.handlers.Match"}  # the extension is removed
    event = accept(clock, "x", {})
    r = build_router(clock=clock, options=RouterOptions(route_timeout=2.0))
    outcome = r.route(event.seq)
    r.close()
    assert outcome.settled and outcome.error.code == RouteErrorCode.HANDLER_MISSING
    rec = record(event)
    assert (rec.disposition, rec.reason, rec.attempts, rec.route) == (
        "failed",
        "handler_missing",
        1,
        "scripted",
    )
    assert "handler 'scripted' is not registered" in rec.error
    assert state(event) == RouteState.FAILED and failure(event) is None
    assert sample_handlers.CALLS == []
    predicted = trace(payload={"source": "tests", "type": "x", "scope": "acme", "data": {}}, clock=clock)
    assert [(v.route, v.scope, v.verdict, v.reason) for v in predicted.verdicts] == [
        ("scripted", "acme", "error", "handler not registered")
    ]
    assert (predicted.effect, predicted.error) == ("failed", rec.error)


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_r10_a_route_whose_executor_was_unregistered_is_binding_invalid_and_starts_no_work(clock, settings):
    apply(clock)
    settings.CONDUIT_EXECUTORS = {"command": "worklife.executors.CommandExecutor"}  # python is removed
    event = pr(clock)
    r = build_router(clock=clock, options=RouterOptions(route_timeout=2.0))
    outcome = r.route(event.seq)
    r.close()
    assert outcome.settled and outcome.error.code == RouteErrorCode.BINDING_INVALID
    rec = record(event)
    assert (rec.disposition, rec.reason, rec.route, rec.work_id) == ("failed", "binding_invalid", "pr", None)
    assert "binding triage: executor 'python' is not registered" in rec.error
    assert state(event) == RouteState.FAILED
    assert not Work.objects.exists() and not WorkInput.objects.exists()


# --- R59: a handler that never returns --------------------------------------------------------------------


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_r59_a_handler_that_never_returns_is_abandoned_at_the_deadline(clock):
    apply(clock, SCRIPTED_ONLY)
    event = accept(clock, "x", {"behaviour": "hang"})
    deadline = 1.0
    r = build_router(clock=clock, options=RouterOptions(route_timeout=deadline))
    try:
        started = time.monotonic()
        outcome = r.route(event.seq)
        elapsed = time.monotonic() - started
        abandoned = r.pool.abandoned
    finally:
        sample_handlers.RELEASE.set()
        r.close()
    assert deadline <= elapsed < 2 * deadline, elapsed
    assert not outcome.settled and outcome.error.code == RouteErrorCode.HANDLER_TIMEOUT
    assert outcome.error.backoff_until == clock() + timedelta(seconds=2)
    assert abandoned == 1
    assert failure(event)["code"] == "handler_timeout" and failure(event)["count"] == 1
    event.refresh_from_db()
    assert event.retry_at == clock() + timedelta(seconds=2)
    assert "handler_timeout (failure 1)" in event.unrouted_reason


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_r12_abandoned_calls_are_bounded_then_refused_until_one_returns():
    release = threading.Event()
    pool = HandlerPool(workers=1, max_abandoned=1)
    try:
        hung = pool.run(lambda: release.wait(30), timeout=0.1)
        assert hung.timed_out and pool.abandoned == 1
        with pytest.raises(PoolExhausted, match="1 handler calls are abandoned"):
            pool.run(lambda: "never started", timeout=0.1)
        release.set()
        for _ in range(200):
            if pool.abandoned == 0:
                break
            time.sleep(0.01)
        assert pool.abandoned == 0 and pool.abandoned_total == 1
        assert pool.run(lambda: "again", timeout=1).result == "again"
    finally:
        release.set()
        pool.close()


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_r12_an_exhausted_pool_is_a_retried_failure_not_a_crash(clock):
    apply(clock, SCRIPTED_ONLY)
    hung = accept(clock, "x", {"behaviour": "hang"})
    other = accept(clock, "x", {})
    pool = HandlerPool(workers=2, max_abandoned=1)
    r = build_router(clock=clock, options=RouterOptions(route_timeout=0.2), pool=pool)
    try:
        r.route(hung.seq)
        outcome = r.route(other.seq)
    finally:
        sample_handlers.RELEASE.set()
        r.close()
        pool.close()
    assert outcome.error.code == RouteErrorCode.HANDLER_FAILED and "abandoned" in outcome.error.message
    assert failure(other)["count"] == 1 and state(other) == RouteState.UNROUTED


# --- R59: a panicking handler ------------------------------------------------------------------------------


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_r59_a_panicking_handler_is_recovered_with_its_stack(clock):
    apply(clock, SCRIPTED_ONLY)
    event = accept(clock, "x", {"behaviour": "panic"})
    r = router(clock)
    outcome = r.route(event.seq)
    r.close()
    assert outcome.settled and outcome.error.code == RouteErrorCode.HANDLER_PANIC
    rec = record(event)
    assert (rec.disposition, rec.reason, rec.attempts) == ("failed", "handler_panic", 1)
    assert (rec.route, rec.error.split("\n")[0]) == (
        "scripted",
        "route scripted: RuntimeError: handler bug: boom",
    )
    assert "Traceback (most recent call last)" in rec.error
    assert 'raise RuntimeError("handler bug: boom")' in rec.error


@pytest.mark.parametrize(
    ("behaviour", "code", "message"),
    [
        ("fail", RouteErrorCode.HANDLER_FAILED, "route scripted: upstream is restarting"),
        (
            "refused",
            RouteErrorCode.HANDLER_FAILED,
            "route scripted: ConnectionRefusedError: upstream refused the connection",
        ),
        ("invalid", RouteErrorCode.HANDLER_INVALID, "route scripted: payload has no author"),
        ("panic", RouteErrorCode.HANDLER_PANIC, "route scripted: RuntimeError: handler bug: boom"),
        (
            "no-decision",
            RouteErrorCode.HANDLER_PANIC,
            "route scripted: handler returned str, not a RouteDecision",
        ),
    ],
)
@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_r10_what_a_handler_raises_or_returns_maps_to_a_code_naming_its_route(
    clock, behaviour, code, message
):
    """Unavailable and an OS-level error are handler_failed (retried), Invalid is
    handler_invalid, any other exception or an answer that is no RouteDecision is
    handler_panic: each names the route, and trace shows that route's verdict as the error."""
    apply(clock, SCRIPTED_ONLY)
    payload = {"source": "tests", "type": "x", "scope": "acme", "data": {"behaviour": behaviour}}
    predicted = trace(payload=payload, clock=clock)
    assert [(v.route, v.scope, v.verdict, v.reason) for v in predicted.verdicts] == [
        ("scripted", "acme", "error", message)
    ]
    event = accept(clock, "x", {"behaviour": behaviour})
    r = router(clock)
    outcome = r.route(event.seq)
    r.close()
    assert (outcome.error.code, outcome.error.route, outcome.error.message.split("\n")[0]) == (
        code,
        "scripted",
        message,
    )


# --- R59: a failing earlier input in a later Event's batch (R17) ------------------------------------------------


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_r59_a_failing_earlier_input_in_a_later_events_batch_is_given_up_and_the_later_routes(clock):
    apply(clock)
    # The earlier Event names key K explicitly and keeps failing; the later one's route decides
    # K: routing the later Event brings the earlier one into its batch.
    sample_handlers.BROKEN.add("earlier")
    earlier = accept(clock, "x.early", {}, correlation=["pr:acme/api#9"], id="earlier")
    later = pr(clock, 9)
    r = router(clock, max_route_failures=2, route_failure_window=timedelta(seconds=10))
    first = r.route(later.seq)
    assert not first.settled and first.waiting_on == earlier.seq
    assert failure(earlier)["count"] == 1 and sample_handlers.CALLS.count("earlier") == 1

    clock.advance(11)  # past the backoff and the window: the second failure gives up
    outcome = r.route(later.seq)
    r.close()
    assert outcome.settled, outcome
    assert state(earlier) == RouteState.FAILED and record(earlier).attempts == 2
    assert state(later) == RouteState.ROUTED and record(later).policy == "start"
    assert sample_handlers.CALLS.count("earlier") == 2


# --- R14: backoff and new generations --------------------------------------------------------------------


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_r14_within_the_backoff_route_returns_the_failure_without_calling_the_handler(clock):
    apply(clock, SCRIPTED_ONLY)
    sample_handlers.BROKEN.add("flaky")
    event = accept(clock, "x", {}, id="flaky")
    r = router(clock)
    first = r.route(event.seq)
    assert first.error.code == RouteErrorCode.HANDLER_FAILED and sample_handlers.CALLS == ["flaky"]
    clock.advance(1.5)
    again = r.route(event.seq)
    assert again.error.code == RouteErrorCode.HANDLER_FAILED
    assert again.error.backoff_until == first.error.backoff_until == clock() + timedelta(seconds=0.5)
    assert again.error.attempts == 1
    assert sample_handlers.CALLS == ["flaky"], "the handler must not be called within the backoff"
    assert r.route_pending() == []  # the loop's window passes over it too
    clock.advance(0.5)
    third = r.route(event.seq)
    assert sample_handlers.CALLS == ["flaky", "flaky"]
    assert third.error.backoff_until == clock() + timedelta(seconds=4)  # the second failure: 4 s
    r.close()


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_r14_a_newly_applied_generation_is_tried_at_once(clock):
    apply(clock, SCRIPTED_ONLY)
    sample_handlers.BROKEN.add("flaky")
    event = accept(clock, "x", {}, id="flaky")
    loop = RouteLoop(clock=clock, options=RouterOptions(route_timeout=2.0))
    try:
        loop.step()
        assert sample_handlers.CALLS == ["flaky"]
        loop.step()  # within the backoff: not tried
        assert sample_handlers.CALLS == ["flaky"]
        sample_handlers.BROKEN.clear()
        apply(clock, SCRIPTED_ONLY)  # generation 2, no time has passed
        result = loop.step()
    finally:
        loop.close()
    assert result.generation_changed and sample_handlers.CALLS == ["flaky", "flaky"]
    assert state(event) == RouteState.ROUTED and record(event).generation == "2"
    # Route(seq) with the new generation's router does the same, without the loop.
    sample_handlers.BROKEN.add("flaky2")
    again = accept(clock, "x", {}, id="flaky2")
    r = router(clock)
    r.route(again.seq)
    sample_handlers.BROKEN.clear()
    apply(clock, SCRIPTED_ONLY)
    fresh = router(clock)
    assert fresh.route(again.seq).settled
    r.close()
    fresh.close()


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
@pytest.mark.parametrize("restart", ["loop", "once"])
def test_r14_a_generation_applied_while_no_loop_runs_is_tried_at_once_after_a_restart(clock, restart):
    """A new generation applied while the route loop is stopped: the restarted loop, or one
    pass of ``route_loop --once``, tries the Events backing off at once. An Event that failed
    under the live generation keeps its backoff. ``--once`` reads the system clock: the fake
    one is set a day ahead of it, so that no backoff has ended by then."""
    clock.set(datetime.now(UTC) + timedelta(days=1))
    apply(clock, SCRIPTED_ONLY)
    sample_handlers.BROKEN.update({"flaky", "steady"})
    event = accept(clock, "x", {}, id="flaky")
    first = RouteLoop(clock=clock, options=RouterOptions(route_timeout=2.0))
    try:
        first.step()
    finally:
        first.close()
    assert state(event) == RouteState.UNROUTED and sample_handlers.CALLS == ["flaky"]
    sample_handlers.BROKEN.discard("flaky")
    apply(clock, SCRIPTED_ONLY)  # generation 2, no time has passed, no loop running
    steady = accept(clock, "x", {}, id="steady")
    r = router(clock)
    r.route(steady.seq)  # fails under generation 2: it backs off
    r.close()
    assert sample_handlers.CALLS == ["flaky", "steady"]
    if restart == "once":
        out = io.StringIO()
        call_command("route_loop", "--once", stdout=out)
    else:
        again = RouteLoop(clock=clock, options=RouterOptions(route_timeout=2.0))
        try:
            again.step()
        finally:
            again.close()
    assert state(event) == RouteState.ROUTED and record(event).generation == "2"
    assert sample_handlers.CALLS == ["flaky", "steady", "flaky"]
    steady.refresh_from_db()
    assert steady.route_state == RouteState.UNROUTED and steady.retry_at > clock()


# --- R59: skip and reroute with doctor's check through the CLI --------------------------------------------------


@pytest.mark.usefixtures("handlers")
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_r59_skip_and_reroute_with_doctors_check_through_the_cli():
    # The child processes read the machine's clock: these Events were accepted 20 minutes ago.
    clock = FakeClock(datetime.now(UTC) - timedelta(minutes=20))
    apply(clock)
    r = router(clock)
    opened = pr(clock, 1)
    r.route(opened.seq)
    work_id = record(opened).work_id
    sample_handlers.BROKEN.update({"stuck-1", "stuck-2"})
    held = accept(clock, "x.note", {}, correlation=["pr:acme/api#1"], id="stuck-1")
    lonely = accept(clock, "x.other", {}, id="stuck-2")
    later = pr(clock, 1, action="edited")
    drain(r)
    r.close()
    assert [state(e) for e in (held, lonely, later)] == ["unrouted"] * 3

    # Doctor warns about the three, with their failure counts, and exits non-zero.
    checked = run_manage("doctor", "--json")
    assert checked.returncode == 1, checked.stderr
    report = json.loads(checked.stdout)
    routing = next(c for c in report["checks"] if c["name"] == "routing")
    assert report["ok"] is False and routing["status"] == "warn"
    items = {item["seq"]: item for item in routing["items"]}
    assert set(items) == {held.seq, lonely.seq, later.seq}
    assert (items[held.seq]["failures"], items[held.seq]["last_code"]) == (1, "handler_failed")
    assert items[held.seq]["retry_at"] is not None
    assert (items[later.seq]["failures"], items[later.seq]["waiting_on"]) == (0, held.seq)
    assert "doctor: " in checked.stderr and "routing" in checked.stderr

    # Skip the Event holding the Work (as a named operator); forget the other one's failures.
    UserFactory(username="alice")
    skipped = run_manage("events", "skip", str(held.seq), "--as", "alice")
    assert skipped.returncode == 0, skipped.stderr
    assert skipped.stdout.startswith(
        f"Event #{held.seq} skipped by alice on Work {work_id} (1 failure counted)"
    )
    forgotten = run_manage("events", "reroute", str(lonely.seq), "--json")
    assert forgotten.returncode == 0, forgotten.stderr
    body = json.loads(forgotten.stdout)
    assert (body["outcome"], body["by"], body["failures"]) == ("failures_forgotten", "cli", 1)
    refused = run_manage("events", "skip", str(held.seq))
    assert refused.returncode == 1
    assert f"SEQ: Event #{held.seq} is already skipped" in refused.stderr
    assert record(held).reason == "skipped by alice"
    assert [e.data["by"] for e in Event.objects.filter(source="core.manual").order_by("seq")] == [
        "alice",
        "cli",
    ]

    # The next pass: the Work takes its later input, the forgotten one is tried at once.
    sample_handlers.BROKEN.clear()
    r = router(clock)
    drain(r)
    assert state(later) == RouteState.ROUTED and record(later).work_id == work_id
    assert state(lonely) == RouteState.ROUTED

    # Reroute the skipped Event: a copy, which routes like new input onto the Work.
    copied = run_manage("events", "reroute", str(held.seq), "--json")
    assert copied.returncode == 0, copied.stderr
    copy_seq = json.loads(copied.stdout)["copy_seq"]
    copy = Event.objects.get(seq=copy_seq)
    assert (copy.envelope_id, copy.source) == ("reroute/stuck-1", "tests")
    drain(r)
    r.close()
    assert record(copy).work_id == work_id and inputs(work_id)[-1] == copy_seq

    # The Work engine runs the Work its input made ready; then nothing is left to warn about.
    ran = run_manage("work_loop", "--drain")
    assert ran.returncode == 0, ran.stderr
    healthy = run_manage("doctor")
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert healthy.stdout.startswith("[ok] routing: no Event is unrouted 10 min after acceptance")


# --- a failed Event keeps its refusals (R28) ------------------------------------------------------------

DECLINE_THEN_FAIL = """
version: 1
scopes:
  - path: acme
    bindings:
      inbox: {}
    routes:
      - slot: pulls
        handler: match
        params: {type: "github.pull_request.*"}
        binding: inbox
        policy: queue
      - slot: chats
        handler: match
        params: {type: "chat.*"}
        binding: inbox
        policy: queue
      - slot: scripted
        handler: scripted
        params: {}
        binding: inbox
        policy: queue
"""


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_r28_a_dead_lettered_event_keeps_the_routes_that_declined_before_the_failing_one(
    clock, caplog, client
):
    apply(clock, DECLINE_THEN_FAIL)
    event = accept(clock, "x.note", {"behaviour": "invalid"})  # handler_invalid: given up at once
    caplog.set_level(logging.INFO, logger="conduit.routing")
    drain(router(clock))

    rec = record(event)
    assert (rec.disposition, rec.route, rec.reason) == ("failed", "scripted", "handler_invalid")
    assert [r["route"] for r in rec.refusals] == ["pulls", "chats"]  # in route order
    assert all(r["reason"] for r in rec.refusals)
    decided = [r for r in caplog.records if r.getMessage() == "route.decided" and r.event == event.seq]
    assert [r["route"] for r in getattr(decided[0], "route.refusals")] == ["pulls", "chats"]

    client.force_login(UserFactory())
    page = client.get(reverse("event-detail", args=[event.seq])).content.decode()
    assert "No route declined this Event" not in page
    assert "<strong>pulls</strong>" in page and "<strong>chats</strong>" in page


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_r28_an_event_whose_decision_panics_keeps_the_routes_that_declined(clock, monkeypatch):
    from routing.engine import settle as settle_module

    apply(clock, DECLINE_THEN_FAIL)
    event = accept(clock, "x.note", {})  # pulls and chats decline, scripted matches

    def broken_decide(**kwargs):
        raise RuntimeError("a bug in deciding")

    monkeypatch.setattr(settle_module, "decide", broken_decide)
    # The trace shows what the routes answered, and the panic, given up on at once.
    predicted = trace_event(seq=event.seq, clock=clock)
    assert [(v.route, v.verdict) for v in predicted.verdicts] == [
        ("pulls", "skip"),
        ("chats", "skip"),
        ("scripted", "match"),
    ]
    assert (predicted.effect, predicted.reason, predicted.attempts) == ("failed", "handler_panic", 1)
    drain(router(clock))
    rec = record(event)
    assert (rec.disposition, rec.reason, rec.attempts) == ("failed", "handler_panic", 1)
    assert (
        rec.error.split("\n")[0] == "deciding this Event failed unexpectedly: RuntimeError: a bug in deciding"
    )
    assert "Traceback (most recent call last)" in rec.error
    assert [r["route"] for r in rec.refusals] == ["pulls", "chats"]


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_r22_failures_forgotten_between_asking_and_committing_leave_the_event_for_the_next_pass(clock):
    """R22, R14: an Event backing off when a pass began, whose failures an operator forgot
    before the pass commits, is left unrouted for the next pass (its routes asked then), not
    given up on as a routing panic; a later Event of its Work still waits behind it (I4)."""
    apply(clock, SCRIPTED_ONLY)
    sample_handlers.BROKEN.add("flaky")
    flaky = accept(clock, "x", {"keys": ["k1"]}, correlation=["k1"], id="flaky")
    r = router(clock, batch_size=10)
    drain(r)
    assert state(flaky) == RouteState.UNROUTED
    later = accept(clock, "x", {"keys": ["k1"]}, correlation=["k1"], id="later")
    window = snapshots_isolated(Event.objects.filter(seq__in=[flaky.seq, later.seq]).order_by("seq"))
    evaluations, backing_off = r.asker.ask(window).result()
    assert backing_off == {flaky.seq}
    event_reroute(seq=flaky.seq, user="ops", clock=clock)
    outcomes = r._commit(window, evaluations, backing_off, honour_claims=False)
    assert [(o.seq, o.state, o.reason) for o in outcomes] == [
        (flaky.seq, RouteState.UNROUTED, "retry"),
        (later.seq, RouteState.UNROUTED, f"waiting behind earlier input #{flaky.seq}"),
    ]
    assert not RouteRecord.objects.filter(event_id=flaky.seq).exists()
    sample_handlers.BROKEN.clear()
    drain(r)
    r.close()
    assert [state(flaky), state(later)] == [RouteState.ROUTED, RouteState.ROUTED]


# --- a conflicting identity is given up on like a failing Event ------------------------------------


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_r8_r15_a_conflicting_identity_backs_off_then_is_dead_lettered_with_its_reason(clock):
    """An Event naming a Work of another scope stays unrouted, saying why (R8), holding that
    Work's later input (I4), and backs off as a retried failure does (R14); once the count
    and the window are reached (R15) it is dead-lettered without a Work, its reason kept, and
    the Work takes its later input. Before, it was looked at again every minute for ever."""
    from django.core.management import call_command

    from routing.engine.selectors import DeadLetterFilter, dead_letters_page

    apply(clock)
    r = router(clock)
    opened = pr(clock, 1)
    r.route(opened.seq)
    work_id = record(opened).work_id
    why = f"Work {work_id} is in scope acme, not acme/web"
    conflicting = accept(clock, "chat.message", {"thread": "t9"}, scope="acme/web", work_id=work_id)
    later = pr(clock, 1, action="edited")
    first_failed = clock()
    passes = 0
    while True:
        passes += 1
        assert passes < 20, "never given up"
        drain(r)
        if state(conflicting) != RouteState.UNROUTED:
            break
        conflicting.refresh_from_db()
        assert conflicting.unrouted_reason == f"conflicting identity (failure {passes}): {why}"
        entry = failure(conflicting)
        assert (entry["code"], entry["count"]) == ("conflicting_identity", passes)
        assert conflicting.retry_at == clock() + backoff_for(passes)
        # The Work's later input waits behind it.
        later.refresh_from_db()
        assert state(later) == RouteState.UNROUTED and later.waiting_on_id == conflicting.seq
        assert inputs(work_id) == [opened.seq]
        clock.set(conflicting.retry_at)

    dead = record(conflicting)
    assert dead.attempts >= DEFAULTS.max_route_failures
    assert clock() - first_failed >= DEFAULTS.route_failure_window
    assert (dead.disposition, dead.reason, dead.work_id) == ("failed", "conflicting_identity", None)
    assert dead.error == f"conflicting identity: {why}"
    assert state(conflicting) == RouteState.FAILED and failure(conflicting) is None
    assert record(later).work_id == work_id and inputs(work_id) == [opened.seq, later.seq]
    listed = dead_letters_page(DeadLetterFilter(code="conflicting_identity"))
    assert [item.event_id for item in listed] == [conflicting.seq]
    out = io.StringIO()
    call_command("events", "get", str(conflicting.seq), stdout=out)
    assert "conflicting_identity" in out.getvalue() and why in out.getvalue()
    r.close()


# What a route handler raises decides its route error (R10): ``Invalid`` →
# handler_invalid; ``Unavailable`` or a transient OS-level error (``OSError`` and its subclasses)
# → handler_failed, retried; any other exception, a programming error → handler_panic with its
# stack. Proved end to end through routing: acceptance, the router, the failure entry, the route
# record, and a retry that routes once the upstream is back.
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


@pytest.fixture
def raising_handler(settings):
    settings.CONDUIT_ROUTE_HANDLERS = {"raising": f"{__name__}.Raising"}
    UPSTREAM_DOWN.clear()
    yield
    UPSTREAM_DOWN.clear()


@pytest.mark.django_db
@pytest.mark.usefixtures("raising_handler")
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


@pytest.mark.django_db
@pytest.mark.usefixtures("raising_handler")
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


@pytest.mark.django_db
@pytest.mark.usefixtures("raising_handler")
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


# --- the stored failure, read back (R13, R14) ----------------------------------------------------------


FAILURE = RouteFailure(
    code="handler_failed",
    route="pr",
    error="boom",
    count=3,
    first_failed_at=datetime(2026, 1, 5, 12, 0, tzinfo=UTC),
    last_failed_at=datetime(2026, 1, 5, 12, 1, tzinfo=UTC),
    backoff_until=datetime(2026, 1, 5, 12, 1, 8, tzinfo=UTC),
    generation="4",
)


def test_r14_a_stored_failure_reads_back_as_it_was_counted():
    assert RouteFailure.from_entry(FAILURE.as_entry()) == FAILURE
    error = FAILURE.as_error()
    assert (error.code, error.message, error.route, error.attempts, error.backoff_until) == (
        RouteErrorCode.HANDLER_FAILED,
        "boom",
        "pr",
        3,
        FAILURE.backoff_until,
    )


@pytest.mark.parametrize(
    "entry",
    [{}, {"route": None, "error": None, "count": None, "generation": None, "last_failed_at": ""}],
)
def test_r14_a_stored_failure_missing_its_fields_reads_as_empty(entry):
    assert RouteFailure.from_entry(entry) == RouteFailure(
        code="",
        route="",
        error="",
        count=0,
        first_failed_at=None,
        last_failed_at=None,
        backoff_until=None,
        generation="",
    )


@pytest.mark.django_db
def test_r23_the_events_whose_route_keeps_failing_are_those_with_as_many_failures(clock):
    for seq, count in ((11, 1), (12, 3), (13, 5)):
        with transaction.atomic():
            failure_put_in_tx(seq, replace(FAILURE, count=count), clock())
    KVFactory(namespace="elsewhere", key="14", value={"count": 9})
    assert sorted(row["seq"] for row in failures_keep_failing(3)) == [12, 13]


def test_r14_a_stored_failure_keeps_its_error_short_and_its_missing_times_missing():
    unset = replace(FAILURE, error="e" * 5000, last_failed_at=None, backoff_until=None)
    entry = unset.as_entry()
    assert entry["error"] == "e" * 4000 and entry["last_failed_at"] is None
    assert RouteFailure.from_entry(entry) == replace(unset, error="e" * 4000)


@pytest.mark.django_db
@pytest.mark.parametrize("stored", [3, 70], ids=["few", "many"])
def test_r13_failures_are_read_for_the_events_asked_alone(clock, stored):
    """However many failures are stored (a few are read at once, many looked up one by one)."""
    with transaction.atomic():
        for seq in range(1, stored + 1):
            failure_put_in_tx(seq, replace(FAILURE, count=seq), clock())
    read = failures_read([2, 3, 999])
    assert {seq: failure.count for seq, failure in read.items()} == {2: 2, 3: 3}


@pytest.mark.django_db
def test_r13_a_failure_counted_again_replaces_the_entry_and_forgetting_it_leaves_the_others(clock):
    elsewhere = KVFactory(namespace="elsewhere", key="5", value={"count": 9}, version=1)
    with transaction.atomic():
        failure_put_in_tx(5, FAILURE, clock())
        failure_put_in_tx(6, FAILURE, clock())
    entry = KV.objects.get(namespace=FAILURES_NAMESPACE, key="5")
    assert (entry.version, entry.updated_at) == (1, clock())
    clock.advance(10)
    with transaction.atomic():
        failure_put_in_tx(5, replace(FAILURE, count=4), clock())
    entry.refresh_from_db()
    assert (entry.version, entry.updated_at, entry.value["count"]) == (2, clock(), 4)
    with transaction.atomic():
        failures_forget_in_tx([5])
    assert list(KV.objects.filter(namespace=FAILURES_NAMESPACE).values_list("key", flat=True)) == ["6"]
    elsewhere.refresh_from_db()
    assert (elsewhere.value, elsewhere.version) == ({"count": 9}, 1)


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_r28_an_event_backing_off_is_traced_with_the_routes_that_declined_before_the_failing_one(clock):
    from routing.setup.trace import trace_event

    apply(clock, DECLINE_THEN_FAIL)
    event = accept(clock, "x.note", {"behaviour": "fail"})  # retried: it backs off
    clock.advance(5)
    drain(router(clock))
    assert state(event) == RouteState.UNROUTED
    counted = RouteFailure.from_entry(failure(event))
    assert (counted.count, counted.first_failed_at, counted.last_failed_at) == (1, clock(), clock())

    clock.advance(3600)  # past its backoff: tracing it asks its routes again
    traced = trace_event(seq=event.seq, clock=clock)

    assert (traced.state, traced.effect) == (RouteState.UNROUTED, "error")
    assert [r["route"] for r in traced.refusals] == ["pulls", "chats"]


# --- an Event whose stored data cannot be read ---------------------------------------------------


def _store_unreadable_data(event) -> None:
    """Store data nested deeper than the interpreter's stack under ``event`` (valid JSON the
    database accepts, as one written by something else could hold): reading it for routing
    raises RecursionError."""
    from django.db import connection

    deep = "[" * 990 + "]" * 990
    cast = "::jsonb" if connection.vendor == "postgresql" else ""
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE causal_event SET data = %s{cast} WHERE seq = %s", [deep, event.seq])


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_r10_an_event_whose_data_cannot_be_read_comes_back_alone_with_its_fields_and_the_error(clock, caplog):
    """The Events read for a window beside one whose stored data cannot be decoded are read
    as they are; that one comes back with every field but its data, and a handler_panic
    saying why, with its stack (R10): one Event's content never fails the read of others."""
    apply(clock, SCRIPTED_ONLY)
    before = accept(clock, "x", {"keys": ["k1"]}, correlation=["k1"])
    # Every field set, a derived Event's included (its time, parent, depth, Work and attempt).
    work = WorkFactory()
    broken = EventFactory(
        envelope_id="b2",
        type="x.broken",
        subject="s/2",
        time=datetime(2026, 1, 5, 11, 59, tzinfo=UTC),
        correlation=["k2", "k3"],
        work_id=work.pk,
        execution_id=AttemptFactory(work=work).pk,
        parent=before,
        root=before,
        depth=1,
    )
    after = accept(clock, "x", {"keys": ["k4"]}, correlation=["k4"])
    _store_unreadable_data(broken)
    caplog.set_level(logging.INFO, logger="conduit.routing")
    readable = Event.objects.filter(seq__in=[before.seq, after.seq]).order_by("seq")
    assert [s.seq for s in snapshots_isolated(readable)] == [before.seq, after.seq]
    assert not caplog.records, "a window of readable Events is read whole, once"

    window = snapshots_isolated(
        Event.objects.filter(seq__in=[before.seq, broken.seq, after.seq]).order_by("seq")
    )

    assert [type(s).__name__ for s in window] == ["EventSnapshot", "UnreadableSnapshot", "EventSnapshot"]
    assert window[0].data == {"keys": ("k1",)} and window[2].data == {"keys": ("k4",)}
    unreadable = window[1]
    stored = Event.objects.defer("data").get(seq=broken.seq)
    assert (
        unreadable.seq,
        unreadable.id,
        unreadable.source,
        unreadable.type,
        unreadable.subject,
        unreadable.scope,
        unreadable.time,
        unreadable.data,
        unreadable.correlation,
        unreadable.work_id,
        unreadable.execution_id,
        unreadable.causation_id,
        unreadable.depth,
    ) == (
        broken.seq,
        "b2",
        "tests",
        "x.broken",
        "s/2",
        "acme",
        datetime(2026, 1, 5, 11, 59, tzinfo=UTC),
        None,
        ("k2", "k3"),
        work.pk,
        stored.execution_id,
        before.seq,
        1,
    )
    assert stored.execution_id is not None
    error = unreadable.error
    assert (error.code, error.route) == (RouteErrorCode.HANDLER_PANIC, "")
    assert error.message.startswith("the Event's data cannot be read for routing: RecursionError: ")
    lines = error.stack.splitlines()
    assert lines[0] == "Traceback (most recent call last):" and lines[1].startswith("  File ")
    assert lines[-1] == "RecursionError: maximum recursion depth exceeded"
    assert [(r.getMessage(), r.fallback) for r in caplog.records if r.name == "conduit.routing"] == [
        ("route.snapshot_read_failed", "row by row")
    ]


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_r10_routing_records_an_event_whose_data_cannot_be_read_as_a_panic_and_routes_the_rest(clock, caplog):
    """The route loop's claimed window holds an Event whose data cannot be read: it is
    recorded failed with handler_panic (its routes never asked), the Events beside it route."""
    apply(clock, SCRIPTED_ONLY)
    before = accept(clock, "x", {"keys": ["k1"]}, correlation=["k1"])
    broken = accept(clock, "x", {"keys": ["k2"]}, correlation=["k2"])
    after = accept(clock, "x", {"keys": ["k4"]}, correlation=["k4"])
    _store_unreadable_data(broken)
    calls = len(sample_handlers.CALLS)
    caplog.set_level(logging.INFO, logger="conduit.routing")
    r = router(clock, batch_size=10)
    drain(r)
    r.close()
    # The claimed window is read once whole, then once row by row.
    failed = [r for r in caplog.records if r.getMessage() == "route.snapshot_read_failed"]
    assert [(r.name, r.fallback) for r in failed] == [("conduit.routing", "row by row")]
    assert [state(before), state(after)] == [RouteState.ROUTED, RouteState.ROUTED]
    rec = record(broken)
    assert (rec.disposition, rec.reason) == ("failed", "handler_panic")
    assert rec.error.startswith("the Event's data cannot be read for routing: RecursionError: ")
    assert len(sample_handlers.CALLS) - calls == 2  # only the two readable Events were asked about


def test_r10_a_panic_keeps_the_last_8000_characters_of_its_stack():
    from routing.engine.evaluate import panic

    try:
        raise RuntimeError("x" * 10_000 + " the end")
    except RuntimeError as exc:
        error = panic(exc, "deciding this Event failed unexpectedly", route="chat")
    assert (error.code, error.route) == (RouteErrorCode.HANDLER_PANIC, "chat")
    assert len(error.stack) == 8000 and error.stack.endswith("x the end\n")


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_r14_a_retried_failures_stored_reason_is_cut_at_a_thousand_characters(clock):
    """However long the message a failing handler gives, the reason stored on the Event backing
    off is its first 1,000 characters: the code, the failure's count, the route and the message."""
    apply(clock, SCRIPTED_ONLY)
    event = accept(clock, "x", {"behaviour": "fail", "why": "upstream says: " + "z" * 3000})
    r = router(clock)
    outcome = r.route(event.seq)
    r.close()
    assert not outcome.settled and outcome.error.code == RouteErrorCode.HANDLER_FAILED
    event.refresh_from_db()
    assert state(event) == RouteState.UNROUTED
    expected = "handler_failed (failure 1): route scripted: upstream says: " + "z" * 3000
    assert event.unrouted_reason == expected[:1000]


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_r26_a_conflicting_event_holds_later_input_for_the_keys_its_route_decided(clock):
    """A conflict backs off like a route failure and, like every Event left unrouted, keeps the
    keys its route decided: an Event with one of them waits behind it, in the same window and in a
    later pass. Its trace says it is a conflict, and why."""
    apply(clock, SCRIPTED_ONLY)
    payload = {
        "source": "tests",
        "type": "x",
        "scope": "acme",
        "data": {"keys": ["k:new"]},
        "work_id": 999999,
    }
    predicted = trace(payload=payload, clock=clock)
    assert (predicted.effect, predicted.reason, predicted.state) == (
        "conflict",
        "conflicting_identity",
        RouteState.UNROUTED,
    )
    assert predicted.unrouted_reason == "conflicting identity (failure 1): work_id 999999 names no Work"
    conflicting = accept(clock, "x", {"keys": ["k:new"]}, work_id=999999)
    same_window = accept(clock, "x", {"keys": ["k:new"]})
    r = router(clock)
    drain(r)
    assert state(conflicting) == RouteState.UNROUTED
    later = accept(clock, "x", {"keys": ["k:new"]})
    drain(r)
    r.close()
    for behind in (same_window, later):
        behind.refresh_from_db()
        assert (behind.route_state, behind.waiting_on_id) == (RouteState.UNROUTED, conflicting.seq)
    assert not Work.objects.exists()


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_r26_a_conflicts_stored_reason_is_cut_at_a_thousand_characters(clock):
    """Two Works owning keys of 502 characters each, and an Event carrying both: the conflict's
    reason names both keys; the reason stored on the Event is its first 1,000 characters."""
    apply(clock, SCRIPTED_ONLY)
    first, second = "k:" + "a" * 500, "k:" + "b" * 500
    r = router(clock)
    for key in (first, second):
        accept(clock, "x", {"keys": [key]})
        drain(r)
    both = accept(clock, "x", {"keys": [first, second]})
    drain(r)
    r.close()
    works = sorted(Work.objects.values_list("pk", flat=True))
    why = f"conflicting targets: Work {works[0]} by key {first}, Work {works[1]} by key {second}"
    both.refresh_from_db()
    assert both.unrouted_reason == f"conflicting identity (failure 1): {why}"[:1000]
