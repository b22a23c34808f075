"""``manage.py work_loop`` with timers around its stages, for ``bench/work_throughput.py --profile``.

    python bench/work_stages.py OUT.json [work_loop arguments...]

Runs the work loop as ``manage.py work_loop`` does, with the loop's stages wrapped in timers
(nothing of the product changes), and writes what it measured to ``OUT.json`` when the loop
stops: for each stage the durations (seconds), and for each attempt the wall-clock times it
was started, its result reached the loop, and its completion was committed. The bench pairs
those with the time the target was called (``bench.targets:stamp`` returns it) to split an
attempt's life into stages.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

_lock = threading.Lock()
durations: dict[str, list[float]] = defaultdict(list)
moments: dict[str, dict[int, float]] = defaultdict(dict)
"""Per attempt id: ``start`` (the loop begins starting it), ``started`` (its process runs and
has its run line), ``result`` (its result line reached the loop), ``committed``."""


def _record(stage: str, seconds: float) -> None:
    with _lock:
        durations[stage].append(seconds)


def _timed(owner: object, name: str, stage: str) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        began = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            _record(stage, time.perf_counter() - began)

    setattr(owner, name, wrapper)


def install() -> None:
    from worklife import runner
    from worklife.executors import containment, forked, process, python

    _timed(runner.WorkRunner, "_pass", "pass (whole)")
    _timed(runner.WorkRunner, "_claim", "complete + claim (pass: one tx + starts)")
    _timed(runner, "claimable_work_in_tx", "claim: ready Work query")
    _timed(runner, "dispatch_many_in_tx", "claim: dispatch (attempts made)")
    _timed(runner, "presented_events_many_in_tx", "claim: inputs read")
    _timed(runner, "attempts_pid", "pids recorded (in the next tx)")
    _timed(runner.WorkRunner, "_finish", "finish (pass: outcomes)")
    _timed(runner, "works_complete", "complete: statements (in the claim tx)")
    _timed(runner.WorkRunner, "_forget", "release (per attempt)")
    _timed(runner.WorkRunner, "_sync", "sync (pass)")
    _timed(runner.AttemptCalls, "answer_all", "calls (pass)")
    _timed(containment.Containment, "__init__", "start: cgroup made")
    _timed(containment.Containment, "end", "release: cgroup ended")
    _timed(process.ChildProcess, "__init__", "start: process + readers")
    _timed(forked.ForkServer, "fork", "start: fork round trip")
    _timed(python._Worker, "__init__", "start: worker")

    original_start = runner.WorkRunner._start

    def start(self, attempt, *args, **kwargs):
        began = time.perf_counter()
        moments["start"][attempt.pk] = time.time()
        try:
            return original_start(self, attempt, *args, **kwargs)
        finally:
            moments["started"][attempt.pk] = time.time()
            _record("start (per attempt)", time.perf_counter() - began)

    runner.WorkRunner._start = start

    original_finish = python.PythonExecution._finish

    def finish(self, outcome):
        moments["result"].setdefault(self.attempt_id, time.time())
        return original_finish(self, outcome)

    python.PythonExecution._finish = finish

    original_completed = runner.WorkRunner._completed

    def completed(self, completing, results, mono):
        now = time.time()  # called once the claim's transaction committed them
        for running in completing:
            moments["committed"][running.attempt_id] = now
        if completing:
            _record("complete: attempts per commit", float(len(completing)))
        return original_completed(self, completing, results, mono)

    runner.WorkRunner._completed = completed


def main() -> None:
    out, argv = sys.argv[1], sys.argv[2:]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "conduit_site.settings")
    import django

    django.setup()
    install()
    from django.core.management import call_command

    try:
        call_command("work_loop", *argv)
    finally:
        with _lock:
            Path(out).write_text(
                json.dumps(
                    {
                        "durations": durations,
                        "moments": {k: {str(a): t for a, t in v.items()} for k, v in moments.items()},
                    }
                )
            )


if __name__ == "__main__":
    main()
