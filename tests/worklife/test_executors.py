"""Executors, their registry and binding validation (R2)."""

from __future__ import annotations

import logging
import sys
import threading

import pytest

from worklife.executors import (
    BindingInvalid,
    CommandExecutor,
    Executor,
    ExecutorMissing,
    Outcome,
    PythonExecutor,
    executor_catalog,
    executor_class,
    find_executor_class,
    implements,
    supported_controls,
    validate_binding,
)

from .ext_executors import FlagOnly, InheritsPython, InjectOnly

TEST_EXECUTORS = {
    "python": "worklife.executors.PythonExecutor",
    "command": "worklife.executors:CommandExecutor",
    "flag": "tests.worklife.ext_executors:FlagOnly",
    "inherits": "tests.worklife.ext_executors.InheritsPython",
    "inject-only": "tests.worklife.ext_executors:InjectOnly",
    "gone": "tests.worklife.no_such_module:Executor",
}


# --- the base class and the built-ins ---------------------------------------------------


def test_r2_base_class_defines_no_optional_control():
    assert not hasattr(Executor, "inject")
    assert not hasattr(Executor, "interrupt")
    assert supported_controls(Executor) == frozenset()


def test_r2_builtins_implement_what_they_say():
    assert supported_controls(PythonExecutor) == {"inject", "interrupt"}
    assert supported_controls(CommandExecutor) == {"inject", "interrupt"}


def test_r2_flag_is_not_an_implementation():
    assert implements(FlagOnly, "inject") is False
    assert implements(FlagOnly, "interrupt") is False
    assert supported_controls(FlagOnly) == frozenset()


def test_r2_inherited_method_is_an_implementation():
    assert supported_controls(InheritsPython) == {"inject", "interrupt"}
    assert supported_controls(InjectOnly) == {"inject"}


# --- validate_binding --------------------------------------------------------------------


def test_r2_validate_binding_refuses_flag_only_claim():
    with pytest.raises(BindingInvalid) as caught:
        validate_binding("triage", "flag", FlagOnly, {}, ["inject"])
    assert caught.value.problems == [
        ("controls", "executor 'flag' (tests.worklife.ext_executors.FlagOnly) does not implement inject")
    ]


def test_r2_validate_binding_refuses_queue_only_claiming_a_control():
    with pytest.raises(BindingInvalid) as caught:
        validate_binding("inbox", "", None, {}, ["interrupt"])
    assert caught.value.problems[0][0] == "controls"
    assert "queue-only" in caught.value.problems[0][1]


def test_r2_validate_binding_accepts_real_method():
    settings = {"target": "demo.agents:triage"}
    assert validate_binding("triage", "python", PythonExecutor, settings, ["inject", "interrupt"]) == {
        "inject",
        "interrupt",
    }


def test_r2_validate_binding_accepts_inherited_method():
    settings = {"target": "demo.agents:triage"}
    assert validate_binding("triage", "inherits", InheritsPython, settings, ["interrupt"]) == {"interrupt"}


def test_r2_capabilities_are_the_claimed_controls_only():
    settings = {"target": "demo.agents:triage"}
    assert validate_binding("triage", "python", PythonExecutor, settings, []) == frozenset()
    assert validate_binding("triage", "python", PythonExecutor, settings, ["inject"]) == {"inject"}


def test_r2_validate_binding_refuses_one_of_two_controls():
    with pytest.raises(BindingInvalid, match="does not implement interrupt"):
        validate_binding("x", "inject-only", InjectOnly, {}, ["inject", "interrupt"])


def test_r2_validate_binding_refuses_unknown_and_repeated_controls():
    with pytest.raises(BindingInvalid) as caught:
        validate_binding("x", "python", PythonExecutor, {"target": "a.b:c"}, ["inject", "teleport", "inject"])
    assert [place for place, _ in caught.value.problems] == ["controls[1]", "controls[2]"]


def test_r2_validate_binding_names_an_unregistered_executor():
    with pytest.raises(BindingInvalid, match="executor 'nope' is not registered"):
        validate_binding("x", "nope", None, {}, [])


def test_r2_validate_binding_checks_settings_with_places():
    with pytest.raises(BindingInvalid) as caught:
        validate_binding("x", "python", PythonExecutor, {"target": "no colon", "extra": 1}, [])
    places = [place for place, _ in caught.value.problems]
    assert places == ["settings.extra", "settings.target"]
    with pytest.raises(BindingInvalid) as caught:
        validate_binding("x", "command", CommandExecutor, {"argv": ["ok", 3]}, [])
    assert caught.value.problems == [("settings.argv[1]", "expected a string, got int")]
    with pytest.raises(BindingInvalid, match="settings.argv: required"):
        validate_binding("x", "command", CommandExecutor, {}, [])


def test_r2_queue_only_binding_takes_no_settings():
    with pytest.raises(BindingInvalid, match="takes no settings"):
        validate_binding("x", "", None, {"target": "a:b"}, [])
    assert validate_binding("x", "", None, {}, []) == frozenset()


def test_r2_executor_without_start_is_refused():
    from .ext_executors import NotAnExecutor

    with pytest.raises(BindingInvalid, match="has no start method"):
        validate_binding("x", "odd", NotAnExecutor, {}, [])


# --- the registry --------------------------------------------------------------------------


def test_r1_registry_accepts_both_dotted_forms(settings):
    settings.CONDUIT_EXECUTORS = TEST_EXECUTORS
    assert executor_class("python") is PythonExecutor
    assert executor_class("command") is CommandExecutor
    assert executor_class("flag") is FlagOnly
    assert executor_class("inherits") is InheritsPython


def test_r1_registry_unregistered_name_is_missing(settings):
    settings.CONDUIT_EXECUTORS = TEST_EXECUTORS
    assert find_executor_class("nope") is None
    with pytest.raises(ExecutorMissing, match="executor 'nope' is not registered"):
        executor_class("nope")


def test_r1_registry_unimportable_registration_is_missing(settings):
    settings.CONDUIT_EXECUTORS = TEST_EXECUTORS
    assert find_executor_class("gone") is None
    with pytest.raises(ExecutorMissing, match="registered as 'tests.worklife.no_such_module:Executor'"):
        executor_class("gone")


def test_r1_registry_follows_settings(settings):
    settings.CONDUIT_EXECUTORS = {"mine": "tests.worklife.ext_executors:InjectOnly"}
    assert executor_class("mine") is InjectOnly
    assert find_executor_class("python") is None  # a deployment removed the built-in
    catalog = {info.name: info for info in executor_catalog()}
    assert catalog["mine"].controls == {"inject"}
    execution = executor_class("mine")().start(
        work_id=1, attempt_id=7, binding_settings={}, inputs=["a", "b"]
    )
    assert (execution.attempt_id, execution.poll()) == (7, Outcome(ok=True, result=["a", "b"]))


# --- running attempts ------------------------------------------------------------------------


def test_r2_python_executor_runs_injects_and_interrupts():
    executor = PythonExecutor()
    execution = executor.start(
        work_id=7,
        attempt_id=70,
        binding_settings={"target": "tests.worklife.ext_executors:echo"},
        inputs=[{"id": "e1"}],
    )
    executor.inject(attempt_id=70, inputs=[{"id": "e2"}, {"id": "e3"}])
    executor.interrupt(attempt_id=70, reason="resolved")
    outcome = execution.wait(timeout=10)
    assert outcome is not None and outcome.ok
    assert outcome.result == {
        "seen": [{"id": "e1"}, {"id": "e2"}, {"id": "e3"}],
        "reason": "resolved",
        "work_id": 7,
    }
    with pytest.raises(LookupError, match="attempt 70 is not running"):
        executor.inject(attempt_id=70, inputs=[{"id": "late"}])


def test_r2_python_executor_reports_a_failing_target():
    executor = PythonExecutor()
    execution = executor.start(
        work_id=1, attempt_id=1, binding_settings={"target": "tests.worklife.ext_executors:boom"}, inputs=[]
    )
    outcome = execution.wait(timeout=10)
    assert outcome is not None and not outcome.ok
    assert outcome.error == "RuntimeError: agent crashed"


@pytest.mark.parametrize("executor", [CommandExecutor, PythonExecutor])
def test_an_execution_wakes_its_loop_when_its_outcome_arrives_and_at_once_when_it_is_in(executor):
    settings = (
        {"argv": [sys.executable, "-c", "import time; time.sleep(0.5)"]}
        if executor is CommandExecutor
        else {"target": "tests.worklife.targets:brief"}
    )
    execution = executor().start(work_id=4, attempt_id=40, binding_settings=settings, inputs=[])
    woken, late = threading.Event(), threading.Event()
    execution.wake_with(woken.set)
    assert woken.wait(30) and execution.poll() is not None and execution.poll().ok
    execution.wake_with(late.set)  # the loop that looks after its outcome is in
    assert late.is_set()
    execution.release()


def test_r2_command_executor_feeds_inputs_on_stdin():
    script = (
        "import json, os, sys\n"
        "items = []\n"
        "for line in sys.stdin:\n"
        "    message = json.loads(line)\n"
        "    if message['kind'] == 'started': break\n"
        "    items.append(message['event']['id'])\n"
        "print(os.environ['CONDUIT_WORK_ID'], os.environ['CONDUIT_ATTEMPT_ID'], items, os.environ['GREETING'])\n"
        "print('@conduit ' + json.dumps({'op': 'complete', 'result': {'seen': items}}))\n"
    )
    execution = CommandExecutor().start(
        work_id=3,
        attempt_id=30,
        binding_settings={"argv": [sys.executable, "-c", script], "env": {"GREETING": "hi"}},
        inputs=[{"id": "a"}, {"id": "b"}],
    )
    outcome = execution.wait(timeout=30)
    assert outcome is not None and outcome.ok, outcome
    assert outcome.result == {"seen": ["a", "b"]}
    assert outcome.exit_status == 0
    # The protocol line is a call, not output; everything else printed is kept.
    assert execution.output()[0] == "3 30 ['a', 'b'] hi\n"


def test_r2_command_executor_reports_exit_status():
    execution = CommandExecutor().start(
        work_id=3,
        attempt_id=31,
        binding_settings={"argv": [sys.executable, "-c", "import sys; sys.stderr.write('bad'); sys.exit(4)"]},
        inputs=[],
    )
    outcome = execution.wait(timeout=30)
    assert outcome is not None and not outcome.ok
    assert outcome.error == "exit status 4: bad"


def test_r2_an_executor_without_start_cannot_be_built():
    """``start`` is the one method every executor must have; the controls stay optional."""
    from worklife.executors import Executor

    class Incomplete(Executor):
        def inject(self, **kwargs):
            return None

    with pytest.raises(TypeError, match="start"):
        Incomplete()


@pytest.mark.parametrize("executor", [CommandExecutor, PythonExecutor])
def test_the_emit_sources_setting_is_a_list_of_sources_none_reserved(executor):
    base = {"argv": ["true"]} if executor is CommandExecutor else {"target": "a.b:c"}
    assert (
        list(executor.validate_settings({**base, "emit_sources": ["acme.bot", "github.com/acme/web"]})) == []
    )
    assert list(executor.validate_settings({**base, "emit_sources": "acme.bot"})) == [
        ("emit_sources", "expected a list of sources the binding's Work may emit as, got a string")
    ]
    problems = list(
        executor.validate_settings(
            {**base, "emit_sources": ["conduit.work/1", "Core.Manual", "", "s" * 513, 7]}
        )
    )
    assert [place for place, _ in problems] == [f"emit_sources[{i}]" for i in range(5)]
    assert "sources starting with 'conduit.work/' are reserved" in problems[0][1]
    assert "reserved for core Events" in problems[1][1]
    assert problems[2][1] == "source must be a non-empty string"
    assert problems[3][1] == "source is 513 characters long; the limit is 512"
    assert problems[4][1] == "source must be a string, not a number"


# --- one attempt cannot reach the next through a reused worker -----------------------------------


def run_target(executor, attempt_id: int, settings: dict, inputs=()):
    execution = executor.start(
        work_id=attempt_id, attempt_id=attempt_id, binding_settings=settings, inputs=list(inputs)
    )
    outcome = execution.wait(timeout=30)
    assert outcome is not None, f"attempt {attempt_id} did not end"
    execution.release()  # as the loop gives the worker back once the outcome is in
    return execution, outcome


def test_a_target_that_patches_json_dumps_does_not_reach_the_next_work_of_another_binding():
    executor = PythonExecutor()
    patching = {"target": "tests.worklife.targets:patches_json"}
    try:
        patched, outcome = run_target(executor, 801, patching)
        assert outcome.ok and outcome.result == "patched"
        other, outcome = run_target(executor, 802, {"target": "tests.worklife.targets:reports_patches"})
        assert outcome.result == {"json.dumps": "json.dumps", "spy": False}
        assert other.pid != patched.pid
    finally:
        executor.close()


@pytest.mark.parametrize("reuse", [True, False], ids=["forked", "new-interpreter"])
def test_a_spy_target_cannot_touch_the_next_attempt_of_its_own_binding(caplog, reuse):
    """A target that wraps json.dumps (which its process writes every line with) to rewrite any
    other attempt's result and keep its secret: the next attempt of the same binding runs in a
    fresh process, completes with its own result, and sees json.dumps as it was."""
    executor = PythonExecutor()
    settings = {"target": "tests.worklife.targets:spy_or_victim", "reuse": reuse}
    try:
        with caplog.at_level(logging.WARNING, logger="conduit.worklife.executors"):
            spy, outcome = run_target(executor, 951, settings, [{"role": "spy"}])
            assert (outcome.ok, outcome.result) == (True, "spying")
            victims = [run_target(executor, 952 + n, settings, [{"role": "victim"}]) for n in range(3)]
        for n, (_, outcome) in enumerate(victims):
            assert outcome.ok
            assert outcome.result == {"attempt": 952 + n, "json.dumps": "json.dumps", "spy": False}
        assert len({spy.pid, *(victim.pid for victim, _ in victims)}) == 4
        assert [r for r in caplog.records if r.msg == "python.line_refused"] == []
    finally:
        executor.close()


# What the loop's log says of the lines each forger wrote: (attempt claimed, attempt running).
FORGERIES = {
    "unsigned": [(901, 901, "bad token")] * 3,
    # The line for the next attempt died with the forger's process (it exits after its result)
    # before it was written.
    "next_only": [],
    # Signed with its own secret, the forger completed its own attempt (its own to complete);
    # its process was ended before it wrote for the next one, which it never shared anyway.
    "own_then_next": [],
}


@pytest.mark.parametrize("mode", list(FORGERIES))
def test_a_forged_result_completes_neither_its_attempt_nor_the_next(caplog, mode):
    executor = PythonExecutor()
    settings = {"target": "tests.worklife.targets:forger_or_victim"}
    try:
        with caplog.at_level(logging.WARNING, logger="conduit.worklife.executors"):
            forger = executor.start(
                work_id=1,
                attempt_id=901,
                binding_settings=settings,
                inputs=[{"role": "forger", "mode": mode}],
            )
            outcome = forger.wait(timeout=30)
            assert outcome is not None and (outcome.ok, outcome.result) == (True, "own")
            assert forger.take_calls() == []  # the forged emit was never a call
            forger.release()
            victim = executor.start(
                work_id=2, attempt_id=902, binding_settings=settings, inputs=[{"role": "victim"}]
            )
            outcome = victim.wait(timeout=30)
            assert outcome is not None and (outcome.ok, outcome.result) == (True, "victim's own")
            assert victim.pid != forger.pid
            victim.release()
        refused = [r for r in caplog.records if r.msg == "python.line_refused"]
        assert [(r.claimed_attempt, r.current_attempt, r.reason) for r in refused] == FORGERIES[mode]
        after = executor.start(
            work_id=3, attempt_id=903, binding_settings=settings, inputs=[{"role": "victim"}]
        )
        assert after.pid != forger.pid
        after.wait(timeout=30)
    finally:
        executor.close()


def test_every_attempt_runs_in_a_process_of_its_own_whatever_the_last_one_did():
    executor = PythonExecutor()
    try:
        failed, outcome = run_target(executor, 811, {"target": "tests.worklife.ext_executors:boom"})
        assert not outcome.ok
        after, _ = run_target(executor, 812, {"target": "tests.worklife.ext_executors:boom"})
        threads = {"target": "tests.worklife.targets:leaves_a_thread"}
        left, outcome = run_target(executor, 813, threads)
        assert outcome.ok
        next_one, _ = run_target(executor, 814, threads)
        plain = {"target": "tests.worklife.targets:noop"}
        first, _ = run_target(executor, 815, plain)
        second, _ = run_target(executor, 816, plain)
        never = {**plain, "reuse": False}
        third, _ = run_target(executor, 817, never)
        fourth, _ = run_target(executor, 818, never)
        runs = [failed, after, left, next_one, first, second, third, fourth]
        assert len({run.pid for run in runs}) == len(runs)
        assert list(PythonExecutor.validate_settings({**plain, "reuse": "no"})) == [
            ("reuse", "expected true or false, got 'no'")
        ]
    finally:
        executor.close()
