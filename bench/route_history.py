"""Several route loops on one PostgreSQL database, checked run after run.

    python bench/route_history.py [--runs 20] [--loops 4] [--n 4000] [--batch-size 100]

Each run accepts a fresh stream whose targets overlap (a few hot keys) and are disjoint (many
cold keys, explicit or decided by the route), routes it with ``--loops`` ``route_loop --drain``
processes on a database of its own, finishes what they left with one more, and checks the
history (``tests/routing/history.py``): no Event lost, none duplicated, each Work's input and
each key's route records in acceptance order. Prints each run's verdict and "K of N" runs
without a violation. The test suite runs two such runs; this runs many.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def psql(url: str, sql: str) -> None:
    subprocess.run(["psql", url, "-qc", sql], check=True, capture_output=True)


def prepare(n: int, seed: int) -> None:
    """In a child process on the run's database: configuration and the accepted stream."""
    from causal.clock import system_clock
    from routing.acceptance.services import events_accept
    from routing.config.services import config_apply
    from tests.routing.history import history_payloads
    from tests.routing.routerkit import MATCH_ONLY

    config_apply(document=MATCH_ONLY, clock=system_clock)
    payloads = history_payloads(n, seed=seed)
    for start in range(0, n, 1000):
        events_accept(payloads=payloads[start : start + 1000], clock=system_clock)


def check(n: int, seed: int) -> None:
    """In a child process on the run's database: the history's violations, as JSON."""
    from tests.routing.history import history_payloads, history_violations

    print(json.dumps(history_violations(history_payloads(n, seed=seed))))


def one_run(args: argparse.Namespace, run: int, base: str, template: str) -> list[str]:
    server = base.rsplit("/", 1)[0]
    database = f"conduit_history{args.database_suffix}"
    psql(f"{server}/postgres", f"DROP DATABASE IF EXISTS {database}")
    psql(f"{server}/postgres", f"CREATE DATABASE {database} TEMPLATE {template}")
    env = {**os.environ, "DATABASE_URL": f"{server}/{database}", "LOG_LEVEL": "WARNING"}
    seed = args.seed + run
    me = [sys.executable, __file__, "--n", str(args.n)]
    subprocess.run([*me, "--_prepare", str(seed)], env=env, check=True)
    loop = [
        sys.executable,
        str(ROOT / "manage.py"),
        "route_loop",
        "--drain",
        "--batch-size",
        str(args.batch_size),
    ]
    procs = [subprocess.Popen(loop, env=env, stdout=subprocess.DEVNULL) for _ in range(args.loops)]
    codes = [proc.wait() for proc in procs]
    if any(codes):
        return [f"a route loop exited with {codes}"]
    # A loop may stop while another still holds claims: one more finishes what is left.
    subprocess.run(loop, env=env, check=True, stdout=subprocess.DEVNULL)
    out = subprocess.run([*me, "--_check", str(seed)], env=env, check=True, capture_output=True, text=True)
    psql(f"{server}/postgres", f"DROP DATABASE IF EXISTS {database}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=20, help="Runs (default 20).")
    parser.add_argument("--loops", type=int, default=4, help="Route loop processes a run (default 4).")
    parser.add_argument("--n", type=int, default=4000, help="Events a run (default 4,000).")
    parser.add_argument("--batch-size", type=int, default=100, help="Events per window (default 100).")
    parser.add_argument("--seed", type=int, default=100, help="The first run's stream seed (default 100).")
    parser.add_argument("--database-suffix", default="", help="Appended to the scratch databases' names.")
    parser.add_argument("--_prepare", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--_check", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._prepare is not None or args._check is not None:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "conduit_site.settings")
        import django

        django.setup()
        if args._prepare is not None:
            prepare(args.n, args._prepare)
        else:
            check(args.n, args._check)
        return
    base = os.environ.get("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test")
    server = base.rsplit("/", 1)[0]
    template = f"conduit_history_template{args.database_suffix}"
    psql(f"{server}/postgres", f"DROP DATABASE IF EXISTS {template}")
    psql(f"{server}/postgres", f"CREATE DATABASE {template}")
    migrate = [sys.executable, str(ROOT / "manage.py"), "migrate", "--verbosity", "0"]
    subprocess.run(migrate, env={**os.environ, "DATABASE_URL": f"{server}/{template}"}, check=True)
    clean = 0
    for run in range(args.runs):
        started = time.perf_counter()
        problems = one_run(args, run, base, template)
        clean += not problems
        verdict = "lost 0, duplicated 0, each Work in order" if not problems else "; ".join(problems[:3])
        print(
            f"run {run + 1:2}: {args.n} Events, {args.loops} loops, {time.perf_counter() - started:5.1f} s: {verdict}"
        )
    psql(f"{server}/postgres", f"DROP DATABASE IF EXISTS {template}")
    print(f"{clean} of {args.runs} runs without a violation")


if __name__ == "__main__":
    main()
