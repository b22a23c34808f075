"""What an Event's indexes cost the route commit on PostgreSQL, in one run.

    python bench/event_indexes.py [--n 20000] [--repeat 6]

Accepts N Events (the workload of ``bench/route_throughput.py``) into two scratch databases
migrated to this revision. In the second, the indexes this revision made partial or folded
are put back as they were before it (Event's ``scope`` with PostgreSQL's LIKE index beside
it, ``work_id``, ``parent`` and ``root`` indexed on every row). Then, in each database, times
the two updates the router makes to each Event, for windows of 500 Events spread over the
table, each in a transaction rolled back: the claim (``claimed_by``, ``claimed_until``) and the
routed state (the route commit's update, inside its lock). PostgreSQL writes a new row version
for each, and every index whose rows include it gets an entry (SQLite changes only the indexes
holding a changed column: nothing to measure there). Prints µs per Event (minimum and median
of the windows) for both databases and their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
WINDOW = 500

# The indexes as they were before revision 0006_index_entries of causal, on PostgreSQL.
BEFORE = [
    'DROP INDEX "event_work_idx"',
    'DROP INDEX "event_parent_idx"',
    'DROP INDEX "event_root_seq_idx"',
    'ALTER TABLE "causal_event" ALTER COLUMN "scope" TYPE varchar(255) COLLATE "default"',
    'CREATE INDEX "causal_event_scope_bbf71274" ON "causal_event" ("scope")',
    'CREATE INDEX "causal_event_scope_bbf71274_like" ON "causal_event" ("scope" varchar_pattern_ops)',
    'CREATE INDEX "causal_event_work_id_ad941ec7" ON "causal_event" ("work_id")',
    'CREATE INDEX "causal_event_parent_id_960ffbff" ON "causal_event" ("parent_id")',
    'CREATE INDEX "event_root_seq_idx" ON "causal_event" ("root_id", "seq")',
]

UPDATES = {
    "claim": (
        "UPDATE causal_event SET claimed_by = 'bench:1:loop', claimed_until = now() + interval '30 seconds'"
        " WHERE seq = ANY(%s)"
    ),
    "routed": (
        "UPDATE causal_event SET route_state = 'routed', routed_at = now(), claimed_by = '',"
        " claimed_until = NULL, unrouted_reason = '', waiting_on_id = NULL WHERE seq = ANY(%s)"
    ),
}


def prepared(server: str, name: str, n: int) -> str:
    """A scratch database ``name`` on ``server``, migrated, with N Events accepted."""
    subprocess.run(["psql", f"{server}/postgres", "-qc", f"DROP DATABASE IF EXISTS {name}"], check=True)
    subprocess.run(["psql", f"{server}/postgres", "-qc", f"CREATE DATABASE {name}"], check=True)
    url = f"{server}/{name}"
    env = {**os.environ, "DATABASE_URL": url, "LOG_LEVEL": "WARNING", "DEBUG": "false"}
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "route_throughput.py"), "--_prepare", str(n)],
        env=env,
        check=True,
    )
    return url


def timed(url: str, n: int, repeat: int) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {kind: [] for kind in UPDATES}
    with psycopg.connect(url) as db:
        for _ in range(repeat):
            for start in range(1, n - WINDOW + 2, max(WINDOW, n // 10)):
                seqs = list(range(start, start + WINDOW))
                for kind, sql in UPDATES.items():
                    started = time.perf_counter()
                    with db.transaction(force_rollback=True):
                        db.execute(sql, [seqs])
                    found[kind].append((time.perf_counter() - started) * 1e6 / WINDOW)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=20_000, help="Events to accept (default 20,000).")
    parser.add_argument("--repeat", type=int, default=6, help="Rounds over the table's windows (default 6).")
    args = parser.parse_args()
    if args.n < WINDOW:
        parser.error(f"--n must be at least {WINDOW}")
    base = os.environ.get("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test")
    server = base.rsplit("/", 1)[0]
    urls = {"this revision": prepared(server, "conduit_indexes_now", args.n)}
    urls["indexes as before"] = prepared(server, "conduit_indexes_before", args.n)
    with psycopg.connect(urls["indexes as before"], autocommit=True) as db:
        for statement in BEFORE:
            db.execute(statement)
    try:
        # Taking turns, so a slower moment of the machine falls on both.
        results: dict[str, dict[str, list[float]]] = {name: {kind: [] for kind in UPDATES} for name in urls}
        for _ in range(2):
            for name, url in urls.items():
                for kind, values in timed(url, args.n, max(1, args.repeat // 2)).items():
                    results[name][kind].extend(values)
    finally:
        for url in urls.values():
            subprocess.run(
                ["psql", f"{server}/postgres", "-qc", f"DROP DATABASE IF EXISTS {url.rsplit('/', 1)[1]}"],
                check=True,
            )
    print(f"events                 {args.n} (windows of {WINDOW}, each update rolled back)")
    for kind in UPDATES:
        line = []
        for name in urls:
            values = results[name][kind]
            line.append(f"{name}: min {min(values):.1f}, median {statistics.median(values):.1f} µs/Event")
        ratio = statistics.median(results["this revision"][kind]) / statistics.median(
            results["indexes as before"][kind]
        )
        print(f"{kind:<8} update        " + "; ".join(line) + f"; ratio of medians {ratio:.2f}")


if __name__ == "__main__":
    main()
