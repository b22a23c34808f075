"""The scheduler pins attempt configuration and validates dispatch against it (R36)."""

from __future__ import annotations

import pytest
from django.db import transaction

from routing.engine.configurations import LiveConfigurations
from routing.models import RouteRecord
from tests.routing.routerkit import DOCUMENT, accept, apply, attempt_dispatch, router
from worklife.dispatch import DispatchRefused, dispatch_check

pytestmark = pytest.mark.django_db


class OtherPython:
    """Another implementation registered later under the same name, without controls."""

    def start(self, **kwargs):
        return None


@pytest.fixture(autouse=True)
def handlers(test_handlers):
    """Every test here routes with the test handlers registered (tests/conftest.py)."""


@pytest.fixture
def work_id(clock):
    apply(clock)
    start = accept(clock, "github.pull_request.opened", {"repo": "acme/api", "number": 1})
    router(clock).route(start.seq)
    return RouteRecord.objects.get(event=start).work_id


def test_r36_an_attempt_pins_generation_binding_executor_and_capabilities(clock, work_id):
    attempt = attempt_dispatch(work_id=work_id, clock=clock)
    assert (attempt.binding, attempt.executor, attempt.generation) == ("triage", "python", 1)
    assert attempt.executor_path == "worklife.executors.PythonExecutor"
    assert sorted(attempt.capabilities) == ["inject", "interrupt"]
    assert dispatch_check(attempt, LiveConfigurations()).ok


def test_r36_dispatch_is_checked_against_the_pinned_generation(clock, work_id):
    attempt = attempt_dispatch(work_id=work_id, clock=clock)
    # A newer generation moves "triage" to another executor: the attempt keeps generation 1.
    moved = (
        DOCUMENT.replace("executor: python", "executor: command")
        .replace('settings: {target: "tests.routing.sample_handlers:noop"}', 'settings: {argv: ["true"]}')
        .replace("controls: [inject, interrupt]", "controls: []")
        .replace("policy: interrupt\n", "policy: interrupt\n        fallback: queue\n")
    )
    apply(clock, moved)
    assert dispatch_check(attempt, LiveConfigurations()).ok


def test_r36_a_changed_executor_behind_the_same_binding_name_is_refused(clock, work_id, settings):
    attempt = attempt_dispatch(work_id=work_id, clock=clock)
    settings.CONDUIT_EXECUTORS = {
        **settings.CONDUIT_EXECUTORS,
        "python": "tests.worklife.test_dispatch.OtherPython",
    }
    check = dispatch_check(attempt, LiveConfigurations())
    assert not check.ok and "tests.worklife.test_dispatch.OtherPython" in check.reason


def test_r36_dispatch_on_a_binding_not_in_the_scope_is_refused(clock, work_id):
    apply(clock, DOCUMENT.replace("triage", "triaged"))  # the Work's binding left the scope
    with pytest.raises(DispatchRefused, match="binding 'triage' is not in scope acme"):
        attempt_dispatch(work_id=work_id, clock=clock)


def test_the_loops_configuration_reader_declares_what_it_is_asked_and_routing_implements(clock, work_id):
    """``worklife.dispatch.Configurations`` is true: it declares the reads the work loop asks of
    the configuration and no other, ``LiveConfigurations`` implements each with the same
    parameters, and what it returns has what dispatch reads (the number and the configuration)."""
    import ast
    import dataclasses
    import inspect

    from routing.engine import configurations
    from worklife import calls, dispatch, runner

    declared = {
        name
        for protocol in dispatch.Configurations.__mro__
        if protocol.__module__.startswith("worklife.")
        for name, value in vars(protocol).items()
        if callable(value) and not name.startswith("_")
    }
    called = {
        node.attr
        for module in (dispatch, runner, calls)
        for node in ast.walk(ast.parse(inspect.getsource(module)))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute | ast.Name)
        and getattr(node.value, "attr", getattr(node.value, "id", "")) in ("configurations", "scopes")
    }
    assert declared == called == {"live", "applied", "scope_problem"}
    for name in declared:
        protocol = inspect.signature(getattr(dispatch.Configurations, name)).parameters
        implemented = inspect.signature(getattr(configurations.LiveConfigurations, name)).parameters
        assert [(p.name, p.kind) for p in protocol.values()] == [
            (p.name, p.kind) for p in implemented.values()
        ]
    live = configurations.LiveConfigurations().live()
    assert {field.name for field in dataclasses.fields(live)} == {"number", "configuration"}
    assert live.number == 1 and live.configuration.scope("acme").bindings["triage"].executor == "python"
    started = attempt_dispatch(work_id=work_id, clock=clock)
    assert started.work_id == work_id
    assert isinstance(dispatch.binding_settings(started, configurations.LiveConfigurations()), dict)


# --- a refused dispatch leaves no attempt running ---------------------------------------------


def test_a_dispatch_refused_after_its_attempt_started_ends_it_and_holds_the_work(clock, work_id, monkeypatch):
    """The pinned check refuses an attempt that exists already: it ends (failed, with the
    reason) and the Work is ready, held until the recheck, not ``running`` with no process."""
    from worklife import dispatch
    from worklife.models import Attempt, Work
    from worklife.runner import WorkRunner
    from worklife.scheduling import DISPATCH_RECHECK, claimable_work_in_tx

    monkeypatch.setattr(
        dispatch,
        "dispatch_check",
        lambda attempt, configurations, pinned=None: dispatch.DispatchCheck(False, "pinned away"),
    )
    loop = WorkRunner(clock=clock, configurations=LiveConfigurations(), slots=1)
    loop.step()
    assert not loop.running and loop.counters.refused == 1
    (attempt,) = Attempt.objects.filter(work_id=work_id)
    assert attempt.state == "failed" and attempt.ended_at == clock()
    assert attempt.error == "dispatch refused: pinned away"
    work = Work.objects.get(pk=work_id)
    assert work.status == "ready" and work.failures == 0
    assert work.last_error == "dispatch refused: pinned away"
    assert work.retry_at == clock() + DISPATCH_RECHECK
    with transaction.atomic():
        assert claimable_work_in_tx(now=clock(), limit=5) == []
    clock.advance(DISPATCH_RECHECK.total_seconds())
    with transaction.atomic():
        assert claimable_work_in_tx(now=clock(), limit=5) == [work_id]  # looked at again


def test_an_executor_that_cannot_be_loaded_is_refused_before_any_attempt(clock, work_id, settings):
    from worklife.models import Attempt, Work
    from worklife.runner import WorkRunner

    settings.CONDUIT_EXECUTORS = {**settings.CONDUIT_EXECUTORS, "python": "tests.no_such_module.Executor"}
    loop = WorkRunner(clock=clock, configurations=LiveConfigurations(), slots=1)
    loop.step()
    assert not loop.running and loop.counters.refused == 1
    assert not Attempt.objects.filter(work_id=work_id).exists()
    work = Work.objects.get(pk=work_id)
    assert work.status == "ready" and work.retry_at is not None
    assert work.last_error == "dispatch refused: binding 'triage': executor 'python' cannot be loaded"
