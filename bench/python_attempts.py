"""What a Python attempt's process costs, without the database: the executor alone.

    python bench/python_attempts.py [--n 500] [--concurrency 16] [--reuse true|false] [--root DIR]

Starts ``--n`` attempts of a no-op target (``bench.targets:noop``) through ``PythonExecutor``,
``--concurrency`` at a time, each started, waited for and released as the work loop does, and
prints attempts per second and the p50/p99 from start to outcome. ``--root`` names the project
whose ``worklife`` is measured (this one by default), to compare two versions in turns on the
same machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500, help="Attempts to run (default 500).")
    parser.add_argument("--concurrency", type=int, default=16, help="Attempts at a time (default 16).")
    parser.add_argument(
        "--reuse", choices=["true", "false"], default="true", help="The binding's reuse setting."
    )
    parser.add_argument(
        "--root", default=str(Path(__file__).resolve().parent.parent), help="The project to measure."
    )
    args = parser.parse_args()
    if args.n < 1 or args.concurrency < 1:
        parser.error("--n and --concurrency must be at least 1")
    sys.path.insert(0, args.root)
    os.chdir(args.root)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "conduit_site.settings")
    os.environ.setdefault("SECRET_KEY", "bench-only")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()
    from worklife.executors import PythonExecutor

    executor = PythonExecutor()
    settings = {"target": "bench.targets:noop", "reuse": args.reuse == "true"}
    counter = iter(range(1, args.n + 1))
    lock = threading.Lock()
    latencies: list[float] = []
    failures = [0]

    def one(attempt_id: int) -> None:
        started = time.perf_counter()
        execution = executor.start(
            work_id=attempt_id, attempt_id=attempt_id, binding_settings=settings, inputs=[]
        )
        outcome = execution.wait(timeout=60)
        execution.release()
        with lock:
            latencies.append(time.perf_counter() - started)
            failures[0] += outcome is None or not outcome.ok

    def worker() -> None:
        while True:
            with lock:
                attempt_id = next(counter, None)
            if attempt_id is None:
                return
            one(attempt_id)

    one(0)  # the binding's first attempt starts what it reuses (a fork server)
    latencies.clear()
    began = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(args.concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    executor.close()
    ordered = sorted(latencies)
    print(f"project        {args.root}")
    print(
        f"attempts       {args.n} no-op (reuse: {args.reuse}, {args.concurrency} at a time), {failures[0]} failed"
    )
    print(f"throughput     {args.n / elapsed:,.0f} attempts/s")
    print(
        f"start->outcome p50 {statistics.median(ordered) * 1000:.1f} ms, "
        f"p99 {ordered[int(len(ordered) * 0.99) - 1] * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
