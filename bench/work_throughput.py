"""The Work engine end to end, beside a raw sqlite3 floor, in one run.

    python bench/work_throughput.py [--n 2000] [--latency-n 200] [--rate 20] [--slots 8] [--no-reuse]
                                    [--limits] [--profile]
    python bench/work_throughput.py --postgres [--loops 1,2] [--n 2000] [--runs N]

With ``manage.py route_loop`` and ``manage.py work_loop`` running as processes (as ``serve``
runs them) on a fresh SQLite database, it

1. accepts N Events at once, each starting its own Work whose binding runs a no-op Python
   target, and times accept -> route -> run -> complete until every Work is completed:
   attempts completed per second end to end;
2. accepts ``--latency-n`` Events one at a time at ``--rate`` per second and reports the
   latency from acceptance to the attempt's start (p50, p99) and to completion;
3. times the floor: a raw ``sqlite3`` script doing, per Work, the commits the engine cannot
   avoid (accept, route, start the attempt, complete it: four transactions) under the same
   journal and synchronous settings.

Each attempt runs in a process of its own, forked from the binding's pre-imported fork server
(``reuse: true``, the default); ``--no-reuse`` sets the binding's ``reuse: false`` (a new
interpreter started for each attempt), to measure what the fork server saves.

``--limits`` puts flow control on the binding (docs/flow-control.md): a concurrency limit of
``--slots`` and a throttle of ``--throttle`` starts per second, so every claim locks and counts
both gates; run it in turns with and without to compare.

``--profile`` runs the work loop with timers around its stages (``bench/work_stages.py``; the
product is unchanged) and a target that returns the time it was called, and prints, beside the
figures, each stage's count, mean, p50 and p99: the loop's passes (claim, dispatch, the pids'
commit, the completions' commit, release) and each attempt's life (the loop starts it, its
target is called, its result reaches the loop, its completion is committed). The timers cost
a little: compare throughput with runs without it.

``--postgres`` runs it on PostgreSQL instead (``BENCH_POSTGRES_URL``; a scratch database
``conduit_bench_work`` made and dropped for each loop count): one route loop and 1, then 2
(``--loops``) work loops of ``--slots`` each on one database, N Events accepted at once, and
attempts completed per second from the first acceptance to the last completion (no latency
phase). While they run it samples ``pg_stat_activity`` ten times a second (what the loops'
backends wait on) and, around the run, the CPU seconds of the loops with their attempts, of
their PostgreSQL backends and of the whole machine, and the load average. The floor is
``pgbench`` in the same run, with as many clients as work loops, running a script of the four
short transactions a Work needs (accept; route: Work and input; start the attempt; complete
it) on tables of its own: its tps are Work/s.

Prints the figures and the ratio engine/floor.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DOCUMENT = """
version: 1
scopes:
  - path: bench
    bindings:
      agent:
        executor: python
        settings: {target: "bench.targets:TARGET", reuse: REUSE}LIMITS
    routes:
      - slot: jobs
        handler: match
        params: {type: "job.*", keys: ["job:{data.n}"]}
        binding: agent
        policy: queue
"""


def stop_all(procs: list[subprocess.Popen]) -> None:
    """SIGTERM each loop, then wait for each (killed after 30 s)."""
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def payload(n: int, prefix: str) -> dict:
    return {
        "specversion": "1.0",
        "id": f"{prefix}-{n}",
        "source": "bench",
        "type": "job.created",
        "scope": "bench",
        "data": {"n": f"{prefix}{n}"},
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def wait_all_completed(total: int, timeout: float, poll: float = 0.01) -> float:
    from worklife.models import Work

    deadline = time.monotonic() + timeout
    while Work.objects.filter(status="completed").count() < total:
        if time.monotonic() > deadline:
            raise SystemExit(
                f"only {Work.objects.filter(status='completed').count()} of {total} Work completed in {timeout:.0f} s"
            )
        time.sleep(poll)
    return time.perf_counter()


def stats(values: list[float]) -> str:
    """count, mean, p50 and p99 of durations in seconds, in milliseconds."""
    if not values:
        return "      0"
    mean = sum(values) / len(values)
    return (
        f"{len(values):7d}  mean {mean * 1000:8.2f}  p50 {percentile(values, 0.5) * 1000:8.2f}"
        f"  p99 {percentile(values, 0.99) * 1000:8.2f} ms"
    )


def print_profile(profile: dict, attempts: list[tuple[int, float | None, float]]) -> None:
    """The loop's stages (per call) and each attempt's life, split where the loop and the
    target saw it: ``attempts`` holds (attempt id, the time its target was called, the time
    its row was made minus its Event's acceptance)."""
    print("stages of the work loop (per call; count, mean, p50, p99)")
    for stage, values in sorted(profile["durations"].items()):
        if stage == "complete: attempts per commit":
            mean = sum(values) / len(values) if values else 0
            print(f"  {stage:44s} {len(values):7d}  mean {mean:8.2f}  max {max(values or [0]):5.0f}")
        else:
            print(f"  {stage:44s} {stats(values)}")
    moments = {k: {int(a): t for a, t in v.items()} for k, v in profile["moments"].items()}
    life: dict[str, list[float]] = {
        "accepted -> attempt made (route, queue)": [],
        "loop starts it -> started (fork, run line)": [],
        "loop starts it -> target called": [],
        "target called -> result reaches the loop": [],
        "result reaches the loop -> committed": [],
    }
    for attempt_id, called, queued in attempts:
        start, started = moments["start"].get(attempt_id), moments["started"].get(attempt_id)
        result, committed = moments["result"].get(attempt_id), moments["committed"].get(attempt_id)
        life["accepted -> attempt made (route, queue)"].append(queued)
        if start is not None and started is not None:
            life["loop starts it -> started (fork, run line)"].append(started - start)
        if start is not None and called is not None:
            life["loop starts it -> target called"].append(called - start)
        if called is not None and result is not None:
            life["target called -> result reaches the loop"].append(result - called)
        if result is not None and committed is not None:
            life["result reaches the loop -> committed"].append(committed - result)
    print("an attempt's life (the throughput phase; count, mean, p50, p99)")
    for stage, values in life.items():
        print(f"  {stage:44s} {stats(values)}")


def raw_floor(n: int, path: str, synchronous: str) -> float:
    """Four single-row commits per Work: accept, route (Work + input), start, complete."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={synchronous}")
    db.executescript(
        "CREATE TABLE event (seq INTEGER PRIMARY KEY, body TEXT, state TEXT);"
        "CREATE TABLE work (id INTEGER PRIMARY KEY, status TEXT);"
        "CREATE TABLE input (id INTEGER PRIMARY KEY, work INTEGER, event INTEGER, state TEXT);"
        "CREATE TABLE attempt (id INTEGER PRIMARY KEY, work INTEGER, state TEXT);"
    )
    started = time.perf_counter()
    for i in range(n):
        db.execute("BEGIN IMMEDIATE")
        seq = db.execute("INSERT INTO event (body, state) VALUES (?, 'unrouted')", (str(i),)).lastrowid
        db.execute("COMMIT")
        db.execute("BEGIN IMMEDIATE")
        work = db.execute("INSERT INTO work (status) VALUES ('ready')").lastrowid
        db.execute("INSERT INTO input (work, event, state) VALUES (?, ?, 'pending')", (work, seq))
        db.execute("UPDATE event SET state = 'routed' WHERE seq = ?", (seq,))
        db.execute("COMMIT")
        db.execute("BEGIN IMMEDIATE")
        attempt = db.execute("INSERT INTO attempt (work, state) VALUES (?, 'running')", (work,)).lastrowid
        db.execute("UPDATE input SET state = 'consumed' WHERE work = ?", (work,))
        db.execute("UPDATE work SET status = 'running' WHERE id = ?", (work,))
        db.execute("COMMIT")
        db.execute("BEGIN IMMEDIATE")
        db.execute("UPDATE attempt SET state = 'succeeded' WHERE id = ?", (attempt,))
        db.execute("UPDATE work SET status = 'completed' WHERE id = ?", (work,))
        db.execute("COMMIT")
    elapsed = time.perf_counter() - started
    db.close()
    return elapsed


# --- PostgreSQL ----------------------------------------------------------------------------------

# The floor's four transactions per Work (raw_floor's, in SQL): pgbench counts one run of the
# script as one transaction, so its tps are Work/s.
PGBENCH_SCHEMA = """
CREATE TABLE event (seq bigserial PRIMARY KEY, body text, state text);
CREATE TABLE work (id bigserial PRIMARY KEY, status text);
CREATE TABLE input (id bigserial PRIMARY KEY, work bigint, event bigint, state text);
CREATE INDEX input_work ON input (work);
CREATE TABLE attempt (id bigserial PRIMARY KEY, work bigint, state text);
"""
PGBENCH_SCRIPT = """
BEGIN;
INSERT INTO event (body, state) VALUES ('{}', 'unrouted') RETURNING seq \\gset
END;
BEGIN;
INSERT INTO work (status) VALUES ('ready') RETURNING id AS work \\gset
INSERT INTO input (work, event, state) VALUES (:work, :seq, 'pending');
UPDATE event SET state = 'routed' WHERE seq = :seq;
END;
BEGIN;
INSERT INTO attempt (work, state) VALUES (:work, 'running') RETURNING id AS attempt \\gset
UPDATE input SET state = 'consumed' WHERE work = :work;
UPDATE work SET status = 'running' WHERE id = :work;
END;
BEGIN;
UPDATE attempt SET state = 'succeeded' WHERE id = :attempt;
UPDATE work SET status = 'completed' WHERE id = :work;
END;
"""


def pgbench_floor(server: str, clients: int, suffix: str, seconds: int = 10) -> float:
    """Work/s of PGBENCH_SCRIPT with ``clients`` clients on a scratch database of its own."""
    db = f"conduit_pgbench_work{suffix}"
    admin = server + "/postgres"
    subprocess.run(["psql", admin, "-qc", f"DROP DATABASE IF EXISTS {db}"], check=True)
    subprocess.run(["psql", admin, "-qc", f"CREATE DATABASE {db}"], check=True)
    try:
        subprocess.run(["psql", f"{server}/{db}", "-qc", PGBENCH_SCHEMA], check=True)
        host = server.split("@", 1)[1].split(":")[0]
        with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:
            script.write(PGBENCH_SCRIPT)
            script.flush()
            out = subprocess.run(
                [
                    "pgbench",
                    "-h",
                    host,
                    "-U",
                    "postgres",
                    "-n",
                    "-f",
                    script.name,
                    "-c",
                    str(clients),
                    "-j",
                    str(clients),
                    "-T",
                    str(seconds),
                    db,
                ],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
    finally:
        subprocess.run(["psql", admin, "-qc", f"DROP DATABASE IF EXISTS {db}"], check=True)
    for line in out.splitlines():
        if line.startswith("tps"):
            return float(line.split("=")[1].split()[0])
    raise RuntimeError(f"pgbench printed no tps:\n{out}")


TICKS = os.sysconf("SC_CLK_TCK")


def _proc_table() -> dict[int, tuple[int, float, float]]:
    """Every process's parent, its own CPU seconds and its waited-for children's."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # after the name: state ppid ... utime stime cutime cstime (fields 14 to 17 of stat)
        own = (int(fields[11]) + int(fields[12])) / TICKS
        table[int(entry)] = (int(fields[1]), own, (int(fields[13]) + int(fields[14])) / TICKS)
    return table


def tree_cpu(roots: list[int]) -> float:
    """CPU seconds of ``roots`` and all their descendants alive (reaped ones count in their
    parents' children's time)."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, list(roots)
    while todo:
        pid = todo.pop()
        if pid in table:
            total += table[pid][1] + table[pid][2]
            todo.extend(children.get(pid, ()))
    return total


def own_cpu(pids: list[int]) -> dict[int, float]:
    """Each process's own CPU seconds (its threads', not its children's)."""
    table = _proc_table()
    return {pid: table[pid][1] for pid in pids if pid in table}


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot."""
    with open("/proc/stat") as stat:
        fields = [int(f) for f in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields) - idle) / TICKS, sum(fields) / TICKS


class WaitSampler(threading.Thread):
    """Samples what the database's client backends are doing, ``interval`` apart."""

    def __init__(self, url: str, interval: float = 0.1):
        super().__init__(daemon=True)
        import psycopg

        self.db = psycopg.connect(url, autocommit=True)
        self.interval = interval
        self.samples: Counter[str] = Counter()
        self.stopping = threading.Event()

    def backends(self) -> list[int]:
        rows = self.db.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        ).fetchall()
        return [pid for (pid,) in rows]

    def run(self) -> None:
        while not self.stopping.wait(self.interval):
            rows = self.db.execute(
                "SELECT state, wait_event_type, wait_event FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                " AND backend_type = 'client backend'"
            ).fetchall()
            for state, kind, event in rows:
                if state == "active":
                    self.samples[f"active: {kind}:{event}" if kind else "active: on CPU"] += 1
                elif state == "idle":
                    self.samples["idle (waiting for its client)"] += 1
                else:
                    self.samples[f"{state} (its client works)"] += 1

    def stop(self) -> None:
        self.stopping.set()
        if self.is_alive():
            self.join()


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f} (5 min {five:.1f})"


def postgres_run(args: argparse.Namespace, document: str) -> dict[int, float]:
    """The engine with each number of work loops in ``args.loops`` (and one route loop) on one
    PostgreSQL database, each beside pgbench's floor; returns attempts/s by loop count."""
    base = os.environ.get("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test")
    server = base.rsplit("/", 1)[0]
    admin = server + "/postgres"
    database = f"conduit_bench_work{args.database_suffix}"
    url = f"{server}/{database}"
    tmp = tempfile.mkdtemp(prefix="conduit-work-bench-")
    os.environ.update(
        {
            "DATABASE_URL": url,
            "CONDUIT_VAR_DIR": tmp,
            "DEBUG": "false",
            "LOG_LEVEL": "WARNING",
            "DJANGO_SETTINGS_MODULE": "conduit_site.settings",
        }
    )
    import django

    django.setup()
    from django.db import connection

    from causal.clock import system_clock
    from routing.acceptance.services import events_accept
    from routing.config.services import config_apply
    from worklife.models import Attempt, Work

    manage = [sys.executable, str(ROOT / "manage.py")]
    results: dict[int, float] = {}
    try:
        for loops in args.loops:
            connection.close()
            subprocess.run(
                ["psql", admin, "-qc", f"DROP DATABASE IF EXISTS {database} WITH (FORCE)"], check=True
            )
            subprocess.run(["psql", admin, "-qc", f"CREATE DATABASE {database}"], check=True)
            subprocess.run([*manage, "migrate", "--noinput", "-v0"], check=True, cwd=ROOT)
            config_apply(document=document, clock=system_clock)
            connection.close()
            procs = [subprocess.Popen([*manage, "route_loop", "--poll-interval", "0.02"], cwd=ROOT)]
            procs += [
                subprocess.Popen(
                    [*manage, "work_loop", "--slots", str(args.slots), "--poll-interval", "0.02"], cwd=ROOT
                )
                for _ in range(loops)
            ]
            sampler = WaitSampler(url)
            try:
                deadline = time.monotonic() + 60
                while len(sampler.backends()) < len(procs) and time.monotonic() < deadline:
                    time.sleep(0.2)
                time.sleep(2)  # every loop past its start-up (not what this measures)
                backends = sampler.backends()
                route_cpu, loops_cpu = tree_cpu([procs[0].pid]), tree_cpu([p.pid for p in procs[1:]])
                pg_cpu = own_cpu(backends)
                work_pids = [p.pid for p in procs[1:]]
                loops_own = sum(own_cpu(work_pids).values())
                busy, total = machine_busy()
                self_cpu = resource.getrusage(resource.RUSAGE_SELF)
                sampler.start()
                started = time.perf_counter()
                payloads = [payload(i, "t") for i in range(args.n)]
                for i in range(0, args.n, 500):
                    events_accept(payloads=payloads[i : i + 500], clock=system_clock)
                accepted = time.perf_counter()
                finished = wait_all_completed(args.n, timeout=600, poll=0.05)
                sampler.stop()
                route_cpu = tree_cpu([procs[0].pid]) - route_cpu
                loops_cpu = tree_cpu([p.pid for p in procs[1:]]) - loops_cpu
                loops_own = sum(own_cpu(work_pids).values()) - loops_own
                pg_after = own_cpu(sampler.backends())
                pg_cpu = sum(cpu - pg_cpu.get(pid, 0.0) for pid, cpu in pg_after.items())
                busy_after, total_after = machine_busy()
                self_after = resource.getrusage(resource.RUSAGE_SELF)
                engine_load = load()
                attempts = Attempt.objects.count() / max(Work.objects.count(), 1)
            finally:
                stop_all(procs)
                sampler.stop()
                sampler.db.close()
            elapsed = finished - started
            results[loops] = args.n / elapsed
            bench_cpu = (self_after.ru_utime + self_after.ru_stime) - (self_cpu.ru_utime + self_cpu.ru_stime)
            cores = os.cpu_count() or 1
            floor = pgbench_floor(server, loops, args.database_suffix)
            floor_load = load()
            print(
                f"{loops} work loop(s)     {results[loops]:,.0f} attempts/s end to end ({args.n} Work in "
                f"{elapsed:.1f} s, accepted in {accepted - started:.1f} s; {attempts:.2f} attempts a Work)   "
                f"[{engine_load}]",
                flush=True,
            )
            print(
                f"  pgbench floor     {floor:,.0f} Work/s (4 transactions a Work, {loops} client(s), 10 s)   "
                f"ratio {results[loops] / floor:.2f}   [{floor_load}]"
            )
            print(
                f"  CPU seconds       work loops and attempts {loops_cpu:.1f}, route loop {route_cpu:.1f}, "
                f"PostgreSQL backends {pg_cpu:.1f}, "
                f"bench {bench_cpu:.1f}; the machine {busy_after - busy:.1f} of "
                f"{(total_after - total):.1f} ({cores} cores: {(busy_after - busy) / (total_after - total):.0%} busy, "
                "others' work included)"
            )
            print(
                f"  CPU per attempt   {loops_cpu / args.n * 1000:.1f} ms work loops and attempts (the loops' own "
                f"{loops_own / args.n * 1000:.1f} ms, their fork servers' and attempts' "
                f"{(loops_cpu - loops_own) / args.n * 1000:.1f} ms), "
                f"{route_cpu / args.n * 1000:.1f} ms route loop, {pg_cpu / args.n * 1000:.1f} ms PostgreSQL; "
                f"{(loops_cpu + route_cpu + pg_cpu) / elapsed:.2f} of {cores} cores while it ran"
            )
            sampled = sum(sampler.samples.values())
            print(
                f"  backends sampled  {sampled} (every {sampler.interval:g} s, all client backends of the database)"
            )
            for what, count in sampler.samples.most_common(8):
                print(f"    {count / max(sampled, 1):5.1%}  {what}")
    finally:
        connection.close()
        subprocess.run(["psql", admin, "-qc", f"DROP DATABASE IF EXISTS {database} WITH (FORCE)"], check=True)
        shutil.rmtree(tmp, ignore_errors=True)
    first = args.loops[0]
    for loops in args.loops[1:]:
        print(f"{loops} work loops / {first}   {results[loops] / results[first]:.2f}x")
    return results


def postgres_main(args: argparse.Namespace, document: str) -> None:
    workers = "a new interpreter per attempt" if args.no_reuse else "a process forked per attempt"
    if args.limits:
        workers += f"; concurrency limit {args.slots} and throttle {args.throttle}/s on the binding"
    print(
        f"work  {args.n} no-op Work on PostgreSQL, one route loop and {' / '.join(map(str, args.loops))} "
        f"work loop(s) of {args.slots} slots ({workers}); {os.cpu_count()} cores"
    )
    runs = []
    for run in range(1, args.runs + 1):
        if args.runs > 1:
            print(f"--- run {run} of {args.runs}", flush=True)
        runs.append(postgres_run(args, document))
    if args.runs > 1:
        first = args.loops[0]
        print(f"--- {args.runs} runs")
        for loops in args.loops:
            rates = [run[loops] for run in runs]
            line = f"{loops} work loop(s)  " + " / ".join(f"{r:,.0f}" for r in rates)
            line += f" attempts/s   median {statistics.median(rates):,.0f}"
            if loops != first:
                ratios = [run[loops] / run[first] for run in runs]
                line += f";  / {first}: " + " / ".join(f"{r:.2f}" for r in ratios)
                line += f"   median {statistics.median(ratios):.2f}"
            print(line)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--n", type=int, default=2000, help="Work to run for the throughput figure (default 2,000)."
    )
    parser.add_argument(
        "--latency-n", type=int, default=200, help="Events for the latency figures (default 200)."
    )
    parser.add_argument(
        "--rate", type=float, default=20.0, help="Events per second while measuring latency (default 20)."
    )
    parser.add_argument("--slots", type=int, default=16, help="work_loop --slots (default 16).")
    parser.add_argument(
        "--synchronous", default="FULL", choices=["FULL", "NORMAL"], help="SQLite synchronous (default FULL)."
    )
    parser.add_argument(
        "--no-reuse", action="store_true", help="A new interpreter started for each attempt (reuse: false)."
    )
    parser.add_argument(
        "--limits",
        action="store_true",
        help="Flow control on the binding: concurrency limit --slots and a throttle (see --throttle).",
    )
    parser.add_argument(
        "--throttle",
        type=int,
        default=10000,
        help="With --limits, attempt starts allowed per second (10,000).",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="Time the work loop's stages and each attempt's life; print them beside the figures.",
    )
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="On PostgreSQL: one route loop and 1, then 2 work loops on one database, beside pgbench.",
    )
    parser.add_argument(
        "--loops",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[1, 2],
        help="With --postgres: the work loop counts to run, comma-separated (default 1,2).",
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=1,
        help="With --postgres: run every loop count N times in turns and print the medians (default 1).",
    )
    parser.add_argument(
        "--database-suffix",
        default="",
        help="With --postgres: appended to the scratch databases' names (several benches at once).",
    )
    args = parser.parse_args()
    if args.postgres and args.profile:
        parser.error("--profile runs on SQLite only")
    if args.runs < 1 or any(loops < 1 for loops in args.loops):
        parser.error("--runs and --loops must be at least 1")
    limits = (
        f"\n        concurrency: {{limit: {args.slots}}}\n        throttle: {{limit: {args.throttle}, period: 1s}}"
        if args.limits
        else ""
    )

    document = (
        DOCUMENT.replace("REUSE", "false" if args.no_reuse else "true")
        .replace("LIMITS", limits)
        .replace("TARGET", "stamp" if args.profile else "noop")
    )
    if args.postgres:
        postgres_main(args, document)
        return
    tmp = tempfile.mkdtemp(prefix="conduit-work-bench-")
    os.environ.update(
        {
            "DATABASE_URL": f"sqlite:///{tmp}/conduit.sqlite3",
            "CONDUIT_VAR_DIR": tmp,
            "SQLITE_SYNCHRONOUS": args.synchronous,
            "DEBUG": "false",
            "LOG_LEVEL": "WARNING",
            "DJANGO_SETTINGS_MODULE": "conduit_site.settings",
        }
    )
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "--noinput", "-v0"], check=True, cwd=ROOT)
    import django

    django.setup()
    from django.db import connection

    from causal.clock import system_clock
    from causal.models import Event
    from routing.acceptance.services import events_accept
    from routing.config.services import config_apply
    from worklife.models import Attempt, Work

    config_apply(document=document, clock=system_clock)
    connection.close()
    profile_path = f"{tmp}/profile.json"
    work_loop = (
        [sys.executable, str(ROOT / "bench" / "work_stages.py"), profile_path]
        if args.profile
        else [*manage, "work_loop"]
    )
    loops = [
        subprocess.Popen([*manage, "route_loop", "--poll-interval", "0.02"], cwd=ROOT),
        subprocess.Popen([*work_loop, "--slots", str(args.slots), "--poll-interval", "0.02"], cwd=ROOT),
    ]
    try:
        time.sleep(3)  # both loops up (Django start-up is not what this measures)
        # 1. Throughput.
        started = time.perf_counter()
        payloads = [payload(i, "t") for i in range(args.n)]
        for i in range(0, args.n, 500):
            events_accept(payloads=payloads[i : i + 500], clock=system_clock)
        accepted = time.perf_counter()
        finished = wait_all_completed(args.n, timeout=600)
        throughput = args.n / (finished - started)
        # 2. Latency at a steady rate.
        first_seq = Event.objects.order_by("-seq").values_list("seq", flat=True).first() or 0
        gap = 1.0 / args.rate
        next_at = time.perf_counter()
        for i in range(args.latency_n):
            events_accept(payloads=[payload(i, "l")], clock=system_clock)
            next_at += gap
            time.sleep(max(0.0, next_at - time.perf_counter()))
        wait_all_completed(args.n + args.latency_n, timeout=600)
        starts, ends = [], []
        rows = Attempt.objects.filter(trigger__seq__gt=first_seq).values_list(
            "started_at", "ended_at", "trigger__accepted_at"
        )
        for started_at, ended_at, accepted_at in rows:
            starts.append((started_at - accepted_at).total_seconds() * 1000)
            ends.append((ended_at - accepted_at).total_seconds() * 1000)
        attempts_total = Attempt.objects.count()
        works = Work.objects.count()
        throughput_attempts = [
            (pk, result if isinstance(result, float) else None, (made - accepted_at).total_seconds())
            for pk, result, made, accepted_at in Attempt.objects.filter(
                trigger__seq__lte=first_seq
            ).values_list("pk", "result", "started_at", "trigger__accepted_at")
        ]
    finally:
        stop_all(loops)
    profile = json.loads(Path(profile_path).read_text()) if args.profile else None
    floor_s = raw_floor(args.n, f"{tmp}/raw.sqlite3", args.synchronous)
    shutil.rmtree(tmp, ignore_errors=True)
    floor = args.n / floor_s
    workers = "a new interpreter per attempt" if args.no_reuse else "a process forked per attempt"
    if args.profile:
        workers += "; stages timed (--profile)"
    if args.limits:
        workers += f"; concurrency limit {args.slots} and throttle {args.throttle}/s on the binding"
    print(
        f"work                       {args.n} no-op Work (synchronous={args.synchronous}, {args.slots} slots, {workers})"
    )
    print(
        f"acceptance                 {args.n / (accepted - started):,.0f} Events/s (bench process, batches of 500)"
    )
    print(
        f"end to end                 {throughput:,.0f} attempts completed/s (accept -> route -> run -> complete)"
    )
    print(f"raw sqlite3 floor          {floor:,.0f} Work/s (4 commits per Work, one process)")
    print(f"ratio engine/floor         {throughput / floor:.2f}")
    print(f"attempts per Work          {attempts_total / works:.2f} (1.00: no retries)")
    print(
        f"accept -> attempt start    p50 {percentile(starts, 0.5):.0f} ms, p99 {percentile(starts, 0.99):.0f} ms"
        f"  ({len(starts)} Events at {args.rate:g}/s; target p50 <= 250 ms)"
    )
    print(
        f"accept -> completed        p50 {percentile(ends, 0.5):.0f} ms, p99 {percentile(ends, 0.99):.0f} ms"
    )
    print(
        f"target                     >= 200 attempts/s end to end: {'met' if throughput >= 200 else 'NOT met'}"
    )
    if profile is not None:
        print_profile(profile, throughput_attempts)


if __name__ == "__main__":
    main()
