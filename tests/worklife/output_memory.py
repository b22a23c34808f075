"""How much memory reading a flood of output costs the loop.

Run as ``python -m tests.worklife.output_memory BYTES [SCENARIO ...]`` from the project's
directory: each scenario starts an attempt whose child writes about BYTES bytes, waits for it,
and reports the rise of this process's peak resident set (``VmHWM`` in ``/proc/self/status``,
reset before each scenario through ``/proc/self/clear_refs``) with what the attempt kept. One
JSON object a line on standard output, per scenario.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "conduit_site.settings")

import django  # noqa: E402

django.setup()

from worklife.executors import CommandExecutor, PythonExecutor  # noqa: E402


def status(field: str) -> int:
    """A ``/proc/self/status`` figure in KiB."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise LookupError(field)


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")


def scenarios(size: int) -> dict[str, tuple[str, dict]]:
    flood = f"head -c {size} /dev/zero | tr '\\0' x"
    return {
        "command_stdout": ("command", {"argv": ["sh", "-c", flood]}),
        "command_stderr": ("command", {"argv": ["sh", "-c", f"{flood} >&2"]}),
        "command_stdout_lines": ("command", {"argv": ["sh", "-c", f"yes {'x' * 99} | head -c {size}"]}),
        "command_call_fd": ("command", {"argv": ["sh", "-c", f'{flood} >&"$CONDUIT_CALL_FD"']}),
        "command_call_on_stdout": ("command", {"argv": ["sh", "-c", f"printf '@conduit '; {flood}"]}),
        "python_fd1": (
            "python",
            {"target": "tests.worklife.targets:floods_stdout", "params": {"bytes": size}},
        ),
        "python_print": (
            "python",
            {"target": "tests.worklife.targets:prints_once", "params": {"bytes": size}},
        ),
        "python_result": (
            "python",
            {"target": "tests.worklife.targets:huge_result", "params": {"bytes": size}},
        ),
    }


def main(argv: list[str]) -> int:
    size = int(argv[0])
    table = scenarios(size)
    chosen = argv[1:] or list(table)
    executors = {"command": CommandExecutor(), "python": PythonExecutor()}
    # Warm up: threads, imports and a worker exist before the first measure.
    for name, settings in (
        ("command", {"argv": ["true"]}),
        ("python", {"target": "tests.worklife.targets:environment"}),
    ):
        warm = executors[name].start(work_id=1, attempt_id=1, binding_settings=settings, inputs=[])
        warm.wait(60)
        warm.release()
    for number, scenario in enumerate(chosen, start=2):
        executor_name, settings = table[scenario]
        reset_peak()
        before = status("VmRSS")
        execution = executors[executor_name].start(
            work_id=number, attempt_id=number, binding_settings=settings, inputs=[]
        )
        outcome = execution.wait(300)
        peak = status("VmHWM")
        stdout, stderr = execution.output()
        execution.release()
        report = {
            "scenario": scenario,
            "peak_rise_kib": peak - before,
            "rss_before_kib": before,
            "ok": outcome is not None and outcome.ok,
            "error": outcome.error if outcome is not None else "no outcome",
            "stdout_bytes": len(stdout.encode()),
            "stderr_bytes": len(stderr.encode()),
            "stdout_end": stdout[-80:],
            "stderr_end": stderr[-80:],
        }
        print(json.dumps(report), flush=True)
    for executor in executors.values():
        executor.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
