"""The traceparent a sender put on an Event reaches the attempts it triggers —
TRACEPARENT in a command's environment, run.traceparent (and TRACEPARENT) in a Python target —
and only a well-formed one."""

from __future__ import annotations

import json
import sys

import pytest

from routing.config.services import config_apply
from tests.routing.routerkit import accept
from tests.worklife.enginekit import route_all, runner, status, step_until, work_of
from worklife.models import Attempt
from worklife.tracing import valid_traceparent

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
# Prints its TRACEPARENT (or "none") and completes with it.
PRINT_TRACEPARENT = (
    "import json, os; value = os.environ.get('TRACEPARENT', 'none'); print('TRACEPARENT=' + value); "
    "print('@conduit ' + json.dumps({'op': 'complete', 'result': value}))"
)
DOCUMENT = json.dumps(
    {
        "version": 1,
        "scopes": [
            {
                "path": "tr",
                "bindings": {
                    "cmd": {
                        "executor": "command",
                        "settings": {"argv": [sys.executable, "-c", PRINT_TRACEPARENT]},
                    },
                    "py": {"executor": "python", "settings": {"target": "tests.worklife.targets:traced"}},
                    "fails": {"executor": "command", "settings": {"argv": [sys.executable, "-c", "exit(3)"]}},
                },
                "routes": [
                    {
                        "slot": b,
                        "handler": "match",
                        "params": {"type": f"tr.{b}", "keys": ["k:{data.key}"]},
                        "binding": b,
                    }
                    for b in ("cmd", "py", "fails")
                ],
            }
        ],
    }
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def loop(clock):
    config_apply(document=DOCUMENT, clock=clock)
    r = runner(clock)
    yield r
    r.shutdown(grace=0)


def run_one(clock, loop, binding: str, key: str, **extensions: str) -> Attempt:
    seq = accept(clock, f"tr.{binding}", {"key": key}, scope="tr", **extensions).seq
    route_all(clock)
    work = work_of(seq)
    step_until(loop, lambda: status(work) == "completed")
    return Attempt.objects.get(work=work)


def test_a_command_child_prints_the_traceparent_of_its_triggering_event(clock, loop):
    attempt = run_one(clock, loop, "cmd", "a", traceparent=TRACEPARENT)

    assert f"TRACEPARENT={TRACEPARENT}" in attempt.stdout_tail
    assert attempt.result == TRACEPARENT


def test_a_python_target_reads_run_traceparent_and_its_environment(clock, loop):
    attempt = run_one(clock, loop, "py", "b", traceparent=TRACEPARENT)

    assert attempt.result == {"run": TRACEPARENT, "env": TRACEPARENT}


@pytest.mark.parametrize(
    "extensions", [{}, {"traceparent": "00-abc"}, {"traceparent": "x\nTRACEPARENT=forged"}]
)
def test_without_a_well_formed_traceparent_the_attempt_gets_none(clock, loop, extensions):
    command = run_one(clock, loop, "cmd", "c", **extensions)
    python = run_one(clock, loop, "py", "d", **extensions)

    assert command.result == "none"
    assert python.result == {"run": "", "env": None}


def test_a_reused_python_worker_does_not_keep_the_last_attempts_traceparent(clock, loop):
    first = run_one(clock, loop, "py", "e", traceparent=TRACEPARENT)
    second = run_one(clock, loop, "py", "f")

    assert first.result["env"] == TRACEPARENT
    assert second.result == {"run": "", "env": None}


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        (TRACEPARENT, True),
        ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-ab12", True),
        ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", False),  # version ff is invalid
        ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", False),  # zero trace id
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", False),  # zero parent id
        ("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", False),  # upper case
        ("00-abc", False),
        (7, False),
        (None, False),
    ],
)
def test_only_a_well_formed_traceparent_is_carried(value, kept):
    assert valid_traceparent(value) == (value if kept else "")


def test_the_work_loops_line_about_a_failed_attempt_carries_its_triggers_trace_ids(clock, loop, caplog):
    seq = accept(clock, "tr.fails", {"key": "f"}, scope="tr", traceparent=TRACEPARENT).seq
    route_all(clock)
    work = work_of(seq)
    with caplog.at_level("WARNING", logger="conduit.worklife.runner"):
        step_until(loop, lambda: any(r.msg == "attempt.failed" for r in caplog.records))
    (line,) = [r for r in caplog.records if r.msg == "attempt.failed"]
    assert line.work == work.pk
    assert (line.trace_id, line.span_id) == ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")
