"""An attempt's output is read in bounded lines and kept in a bounded tail, and its calls wait
while the loop is behind. Real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from django.conf import settings

from worklife.executors import CommandExecutor, output

FLOOD = 50_000_000
OUTPUT_TAIL = LINE_LIMIT = 64 * 1024  # the README's figures
CALL_LIMIT = 4 * 1024 * 1024


def test_a_flood_of_output_keeps_the_loops_memory_flat_and_its_tail_bounded_and_marked():
    """Real children write 50 MB each (on standard output or error without a newline, as lines,
    as one over-long call, one print, one result) to executors in a process of their own, which
    reports how far its peak resident set rose for each."""
    run = subprocess.run(
        [sys.executable, "-m", "tests.worklife.output_memory", str(FLOOD)],
        cwd=settings.BASE_DIR,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "conduit_site.settings"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    reports = {r["scenario"]: r for r in map(json.loads, run.stdout.splitlines())}
    assert len(reports) == 8
    for report in reports.values():
        # Unbounded, reading 50 MB without a newline took 97 MiB or more (two copies).
        assert report["peak_rise_kib"] < 24 * 1024, report
        assert report["stdout_bytes"] <= OUTPUT_TAIL and report["stderr_bytes"] <= OUTPUT_TAIL, report
    mark = f" … [cut {FLOOD - LINE_LIMIT} bytes]"
    assert reports["command_stdout"]["ok"] and reports["command_stdout"]["stdout_end"].endswith(mark)
    assert reports["command_stderr"]["ok"] and reports["command_stderr"]["stderr_end"].endswith(mark)
    assert reports["command_stdout_lines"]["stdout_bytes"] == OUTPUT_TAIL
    assert reports["python_fd1"]["ok"] and reports["python_fd1"]["stdout_end"].endswith(mark + "\n")
    assert reports["python_print"]["ok"] and reports["python_print"]["stdout_end"].endswith("z\nthe end\n")
    refused = f"a call line longer than {CALL_LIMIT} bytes (the limit) was refused"
    for name in ("command_call_fd", "command_call_on_stdout", "python_result"):
        assert not reports[name]["ok"] and reports[name]["error"] == refused, reports[name]
    assert (output.OUTPUT_TAIL, output.OUTPUT_LINE_LIMIT) == (OUTPUT_TAIL, LINE_LIMIT)
    assert output.call_line_limit() == CALL_LIMIT


def test_a_call_line_under_its_limit_is_read_whole():
    script = "import json; print('@conduit ' + json.dumps({'op': 'complete', 'result': 'r' * 3_000_000}))"
    execution = CommandExecutor().start(
        work_id=9, attempt_id=90, binding_settings={"argv": [sys.executable, "-c", script]}, inputs=[]
    )
    outcome = execution.wait(timeout=30)
    assert outcome is not None and outcome.ok, outcome
    assert outcome.result == "r" * 3_000_000


def test_calls_past_the_pending_bound_wait_until_the_loop_takes_them():
    count = output.PENDING_CALLS * 3
    script = (
        "import json, os\n"
        "out = os.fdopen(int(os.environ['CONDUIT_CALL_FD']), 'w')\n"
        f"for n in range({count}):\n"
        "    out.write(json.dumps({'op': 'received', 'seq': n}) + '\\n')\n"
        "out.flush()\n"
    )
    execution = CommandExecutor().start(
        work_id=9, attempt_id=91, binding_settings={"argv": [sys.executable, "-c", script]}, inputs=[]
    )
    assert execution.wait(timeout=1) is None  # it waits for the loop, holding no more than the bound
    taken = []
    deadline = time.monotonic() + 30
    while execution.poll() is None and time.monotonic() < deadline:
        calls = execution.take_calls()
        assert len(calls) <= output.PENDING_CALLS
        taken += calls
        time.sleep(0.05)
    taken += execution.take_calls()
    assert execution.poll() is not None and execution.poll().ok
    assert [call["seq"] for call in taken] == list(range(count))
