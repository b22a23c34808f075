"""Retry policies per binding (worklife.retry): the rule, the configuration's ``retry`` key, and
the engine backing off or parking as a binding's policy says, for Python targets and commands."""

from __future__ import annotations

import json
import sys
from datetime import timedelta

import pytest

from routing.config.problems import ConfigInvalid
from routing.config.validate import parse_document
from tests.routing.routerkit import accept, apply, router
from tests.worklife.enginekit import runner, step_until
from worklife.models import Attempt, AttemptState, Work
from worklife.retry import DEFAULT_POLICY, FailureHint, RetryPolicy, retry_decision, retry_policy_from
from worklife.scheduling import backoff_for, max_attempts

# --- the rule ------------------------------------------------------------------------------------


def test_the_default_policy_is_the_engines_own_backoff_and_attempt_budget(settings):
    settings.CONDUIT_MAX_ATTEMPTS = 4
    for failures in range(1, 4):
        decision = retry_decision(None, failures=failures, hint=FailureHint())
        assert (decision.park, decision.delay) == (False, backoff_for(failures))
    assert retry_decision(DEFAULT_POLICY, failures=max_attempts(), hint=FailureHint()).park
    assert backoff_for(20) == timedelta(seconds=300)


def test_a_policy_backs_off_by_its_own_factor_up_to_its_cap_and_parks_after_its_own_budget():
    policy = RetryPolicy(max_attempts=4, initial=10, factor=3, max_interval=60)
    delays = [retry_decision(policy, failures=n, hint=FailureHint()).delay.total_seconds() for n in (1, 2, 3)]
    assert delays == [10, 30, 60]
    assert retry_decision(policy, failures=4, hint=FailureHint()).park


def test_jitter_spreads_the_wait_within_its_fraction_either_way():
    policy = RetryPolicy(initial=100, jitter=0.2)
    assert policy.backoff(1, draw=0.0) == timedelta(seconds=80)
    assert policy.backoff(1, draw=0.5) == timedelta(seconds=100)
    assert policy.backoff(1, draw=0.999999) < timedelta(seconds=120.001)


def test_a_non_retryable_type_matches_the_raised_class_or_any_of_its_bases():
    policy = retry_policy_from({"non_retryable": ["ValueError", 3]})
    hint = FailureHint(types=("UnicodeDecodeError", "UnicodeError", "ValueError", "Exception"))
    decision = retry_decision(policy, failures=1, hint=hint)
    assert decision.park and "ValueError" in decision.why
    assert not retry_decision(policy, failures=1, hint=FailureHint(types=("KeyError",))).park
    assert retry_decision(policy, failures=1, hint=FailureHint(exit_status=3)).park


def test_a_target_asking_for_a_wait_gets_it_until_the_budget_runs_out():
    policy = RetryPolicy(max_attempts=2)
    asked = retry_decision(policy, failures=1, hint=FailureHint(retry_after=42))
    assert (asked.park, asked.delay) == (False, timedelta(seconds=42))
    assert retry_decision(policy, failures=2, hint=FailureHint(retry_after=42)).park


def test_an_exit_code_mapped_to_seconds_waits_that_long():
    policy = retry_policy_from({"retry_after_exit": {"75": 60}})  # JSON keys come back as text
    assert retry_decision(policy, failures=1, hint=FailureHint(exit_status=75)).delay == timedelta(seconds=60)


# --- the configuration -----------------------------------------------------------------------------


def _doc(retry) -> str:
    binding = {"executor": "python", "settings": {"target": "tests.worklife.targets:boom"}, "retry": retry}
    return json.dumps({"version": 1, "scopes": [{"path": "r", "bindings": {"b": binding}}]})


@pytest.mark.parametrize(
    ("retry", "place"),
    [
        ({"max_attempts": 0}, "retry.max_attempts"),
        ({"factor": 0.5}, "retry.factor"),
        ({"jitter": 2}, "retry.jitter"),
        ({"non_retryable": ["not a name"]}, "retry.non_retryable"),
        ({"retry_after_exit": {75: "soon"}}, "retry.retry_after_exit"),
        ({"backoff": 3}, "retry.backoff"),
        ([1, 2], "retry"),
    ],
)
def test_a_bad_retry_policy_is_refused_naming_its_place(retry, place):
    with pytest.raises(ConfigInvalid) as caught:
        parse_document(_doc(retry))
    assert any(p.place == f"scopes[0].bindings.b.{place}" for p in caught.value.problems), caught.value


def test_a_valid_retry_policy_is_kept_with_its_binding():
    parsed = parse_document(_doc({"max_attempts": 2, "initial": 1, "non_retryable": ["ValueError"]}))
    assert parsed.scopes[0].bindings[0].retry == {
        "max_attempts": 2,
        "initial": 1,
        "non_retryable": ["ValueError"],
    }


# --- the engine ------------------------------------------------------------------------------------

EXIT_WITH = "import sys, json; sys.stdin.readline(); sys.exit(int(sys.argv[1]))"


def _engine_doc() -> str:
    def py(target: str, **retry) -> dict:
        return {
            "executor": "python",
            "settings": {"target": f"tests.worklife.targets:{target}"},
            "retry": retry,
        }

    def cmd(code: int) -> dict:
        return {
            "executor": "command",
            "settings": {"argv": [sys.executable, "-c", EXIT_WITH, str(code)]},
            "retry": {"non_retryable": [3], "retry_after_exit": {75: 60}},
        }

    bindings = {
        "twice": py("boom", max_attempts=2, initial=10, factor=1),
        "for_good": py("refuses_for_good"),
        "later": py("asks_later"),
        "by_type": py("bad_value", non_retryable=["ValueError"]),
        "exit3": cmd(3),
        "exit75": cmd(75),
    }
    routes = [
        {"slot": name, "handler": "match", "params": {"type": f"r.{name}"}, "binding": name}
        for name in bindings
    ]
    return json.dumps({"version": 1, "scopes": [{"path": "r", "bindings": bindings, "routes": routes}]})


def _fail_once(clock, binding: str) -> Work:
    apply(clock, _engine_doc())
    accept(clock, f"r.{binding}", {}, scope="r")
    r = router(clock)
    while r.route_pending():
        pass
    loop = runner(clock)
    try:
        step_until(loop, lambda: Attempt.objects.filter(state=AttemptState.FAILED).exists())
    finally:
        loop.shutdown(grace=0)
    return Work.objects.get()


@pytest.mark.django_db(transaction=True)
def test_a_bindings_policy_sets_the_wait_and_parks_after_its_budget(clock):
    work = _fail_once(clock, "twice")
    assert work.parked_at is None and work.retry_at == clock() + timedelta(seconds=10)
    clock.advance(11)
    loop = runner(clock)
    try:
        step_until(loop, lambda: Attempt.objects.filter(state=AttemptState.FAILED).count() == 2)
    finally:
        loop.shutdown(grace=0)
    work.refresh_from_db()
    assert work.parked_at is not None and work.failures == 2


@pytest.mark.django_db(transaction=True)
def test_a_target_raising_non_retryable_parks_its_work_after_one_attempt(clock):
    work = _fail_once(clock, "for_good")
    assert work.parked_at is not None and work.failures == 1
    assert "non-retryable" in work.last_error


@pytest.mark.django_db(transaction=True)
def test_a_target_asking_to_be_retried_later_backs_off_that_long(clock):
    work = _fail_once(clock, "later")
    assert work.parked_at is None and work.retry_at == clock() + timedelta(seconds=42)


@pytest.mark.django_db(transaction=True)
def test_an_exception_whose_base_is_non_retryable_parks_its_work(clock):
    work = _fail_once(clock, "by_type")
    assert work.parked_at is not None and "ValueError is non-retryable" in work.last_error


@pytest.mark.django_db(transaction=True)
def test_a_command_exiting_with_a_non_retryable_code_parks_its_work(clock):
    work = _fail_once(clock, "exit3")
    assert work.parked_at is not None and "exit status 3" in work.last_error


@pytest.mark.django_db(transaction=True)
def test_a_command_exiting_with_a_retry_later_code_waits_its_seconds(clock):
    work = _fail_once(clock, "exit75")
    assert work.parked_at is None and work.retry_at == clock() + timedelta(seconds=60)
