"""Router throughput beside a raw sqlite3 floor, in one run.

    python bench/route_throughput.py [--n 20000] [--batch-size 200] [--synchronous FULL]
    python bench/route_throughput.py --profile 30             # the routing phase under cProfile
    python bench/route_throughput.py --postgres [--n 60000]   # 1, 2 and 4 loops beside pgbench
    python bench/route_throughput.py --runs 3 [--postgres]    # three runs, each printed, and the medians

Routes N accepted Events (about 60% attach to existing Work, 30% start Work, 10% unmatched
with refusals) with the built-in declarative handler, and times a raw ``sqlite3`` script
doing the same reads, inserts and updates with one transaction per Event and the same
journal and synchronous settings (the per-Event floor), and again set-based: one transaction
per batch of 500 Events, key owners read with one SELECT per batch and every write an
``executemany`` (the set-based floor, what a router that batches its work can approach).
A third figure replays the router's own statements: the routing is run a second time on a
copy of the database with every statement, its parameters and each commit logged, and the
log is run again with raw ``sqlite3`` on another copy as routing found it (the product's
schema, indexes and constraints, the same transactions and settings): what routing costs the
database with none of the router's Python, and so the share of the router's time that is
its database work (the timed run logs nothing).
Prints Events/s for each, the router's ratios to the floors, SQL statements per routed Event,
the garbage collector's collections while routing (tuned as ``route_loop`` tunes it) and the
loop's peak memory. ``--profile N`` runs the routing phase under cProfile and prints
its top N functions by cumulative and by own time.
"""

from __future__ import annotations

import argparse
import enum
import json
import os
import pickle
import random
import re
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DOCUMENT = """
version: 1
scopes:
  - path: bench
    bindings:
      agent: {}
    routes:
      - slot: deploys
        handler: match
        params: {type: "deploy.*", keys: ["deploy:{data.n}"]}
        binding: agent
        policy: queue
      - slot: issues
        handler: match
        params: {type: "issue.*", keys: ["issue:{data.n}"]}
        binding: agent
        policy: queue
      - slot: pull-requests
        handler: match
        params:
          type: "pr.*"
          where: [{field: data.draft, equals: false}]
          keys: ["pr:{data.repo}#{data.n}"]
        binding: agent
        policy: queue
"""


def workload(n: int, seed: int = 7) -> list[dict]:
    """N Event payloads: ~30% start Work, ~60% attach to earlier Work, ~10% unmatched."""
    rng = random.Random(seed)
    started: list[int] = []
    events = []
    for i in range(n):
        r = rng.random()
        if r < 0.3 or not started:
            number = len(started) + 1
            started.append(number)
            kind, data = "pr.opened", {"repo": "acme/api", "n": number, "draft": False}
        elif r < 0.9:
            kind, data = "pr.comment", {"repo": "acme/api", "n": rng.choice(started), "draft": False}
        else:
            kind, data = "chat.message", {"text": "hello", "n": i}
        events.append(
            {
                "specversion": "1.0",
                "id": f"b{i}",
                "source": "bench",
                "type": kind,
                "scope": "bench",
                "data": data,
            }
        )
    return events


def accept_all(payloads: list[dict]) -> None:
    from causal.clock import system_clock
    from routing.acceptance.services import events_accept
    from routing.config.services import config_apply

    config_apply(document=DOCUMENT, clock=system_clock)
    for start in range(0, len(payloads), 1000):
        events_accept(payloads=payloads[start : start + 1000], clock=system_clock)


def route_all(batch_size: int, statements_log: list | None = None) -> dict:
    """Route everything; returns the seconds, Events routed, SQL statements, and the garbage
    collector's collections and seconds while routing. ``statements_log``, when given, gets
    every statement the loop ran, in order, with its parameters and whether it raised, and
    each commit and rollback (:func:`replay_floor` runs them again)."""
    import gc

    from django.db import DEFAULT_DB_ALIAS, connection, connections, reset_queries

    from causal.clock import system_clock
    from causal.models import Event, RouteState
    from conduit_site.management.loops import collector_tuned
    from routing.engine.loop import RouteLoop
    from routing.engine.options import RouterOptions

    statements = 0
    collector = {"collections": 0, "seconds": 0.0, "started": 0.0}

    def count(execute, sql, params, many, context):
        nonlocal statements
        statements += 1
        if statements_log is None:
            return execute(sql, params, many, context)
        if many and not isinstance(params, list):
            params = list(params)
        entry = ["sql", sql, params, many, False]
        statements_log.append(entry)
        try:
            return execute(sql, params, many, context)
        except Exception:
            entry[4] = True  # the replay expects it to raise too
            raise

    if statements_log is not None:
        # Django ends a transaction through the driver's connection, not with a statement.
        wrapper = connections[DEFAULT_DB_ALIAS]

        def recorded(original, marker):
            def ended():
                statements_log.append([marker])
                return original()

            return ended

        wrapper._commit = recorded(wrapper._commit, "commit")
        wrapper._rollback = recorded(wrapper._rollback, "rollback")

    def collecting(phase, info):
        if phase == "start":
            collector["started"] = time.perf_counter()
        else:
            collector["collections"] += 1
            collector["seconds"] += time.perf_counter() - collector["started"]

    # Heartbeats as ``route_loop`` (running on) writes them: one a second, not one a pass; and
    # the garbage collector tuned as ``route_loop`` tunes it.
    loop = RouteLoop(clock=system_clock, options=RouterOptions(batch_size=batch_size), heartbeat_every=1.0)
    started = time.perf_counter()
    gc.callbacks.append(collecting)
    try:
        with connection.execute_wrapper(count), collector_tuned():
            while True:
                result = loop.step()
                reset_queries()
                if result.empty:
                    break
    finally:
        gc.callbacks.remove(collecting)
    elapsed = time.perf_counter() - started
    loop.close()
    routed = Event.objects.exclude(route_state=RouteState.UNROUTED).count()
    return {
        "seconds": elapsed,
        "routed": routed,
        "statements": statements,
        "gc_collections": collector["collections"],
        "gc_seconds": collector["seconds"],
    }


# --- the raw sqlite3 floor -----------------------------------------------------------------------

RAW_SCHEMA = """
CREATE TABLE event (seq INTEGER PRIMARY KEY, type TEXT, data TEXT, route_state TEXT, routed_at TEXT);
CREATE INDEX event_unrouted ON event(seq) WHERE route_state = 'unrouted';
CREATE TABLE work (id INTEGER PRIMARY KEY, scope TEXT, status TEXT, binding TEXT, trigger INTEGER, created_at TEXT);
CREATE TABLE ckey (id INTEGER PRIMARY KEY, scope TEXT, key TEXT, work INTEGER, UNIQUE(scope, key));
CREATE TABLE input (id INTEGER PRIMARY KEY, work INTEGER, event INTEGER, seq INTEGER, kind TEXT, UNIQUE(work, event));
CREATE TABLE record (id INTEGER PRIMARY KEY, event INTEGER UNIQUE, work INTEGER, route TEXT, policy TEXT,
                     reason TEXT, refusals TEXT, decided_at TEXT);
"""


def raw_database(payloads: list[dict], path: str, synchronous: str) -> tuple[sqlite3.Connection, str]:
    """A raw sqlite3 database with the floors' schema and the workload accepted, and the
    refusals an unmatched Event records."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={synchronous}")
    db.executescript(RAW_SCHEMA)
    db.execute("BEGIN")
    db.executemany(
        "INSERT INTO event (type, data, route_state) VALUES (?, ?, 'unrouted')",
        [(p["type"], json.dumps(p["data"])) for p in payloads],
    )
    db.execute("COMMIT")
    return db, json.dumps([{"route": "deploys", "reason": "no"}, {"route": "issues", "reason": "no"}])


def raw_floor(payloads: list[dict], path: str, synchronous: str) -> float:
    """The same reads, inserts and updates, one transaction per Event, no ORM."""
    db, refusals = raw_database(payloads, path, synchronous)
    started = time.perf_counter()
    while True:
        rows = db.execute(
            "SELECT seq, type, data FROM event WHERE route_state = 'unrouted' ORDER BY seq LIMIT 200"
        ).fetchall()
        if not rows:
            break
        for seq, kind, data in rows:
            now = datetime.now(UTC).isoformat()
            data = json.loads(data)
            db.execute("BEGIN IMMEDIATE")
            if kind.startswith("pr."):
                key = f"pr:{data['repo']}#{data['n']}"
                owner = db.execute(
                    "SELECT work FROM ckey WHERE scope = 'bench' AND key = ?", (key,)
                ).fetchone()
                if owner is None:
                    work = db.execute(
                        "INSERT INTO work (scope, status, binding, trigger, created_at) VALUES ('bench', 'ready', 'agent', ?, ?)",
                        (seq, now),
                    ).lastrowid
                    db.execute("INSERT INTO ckey (scope, key, work) VALUES ('bench', ?, ?)", (key, work))
                    policy = "start"
                else:
                    work = owner[0]
                    policy = "queue"
                db.execute(
                    "INSERT INTO input (work, event, seq, kind) VALUES (?, ?, ?, 'queue')", (work, seq, seq)
                )
                db.execute(
                    "INSERT INTO record (event, work, route, policy, reason, refusals, decided_at) VALUES (?, ?, 'pull-requests', ?, '', '[]', ?)",
                    (seq, work, policy, now),
                )
            else:
                db.execute(
                    "INSERT INTO record (event, work, route, policy, reason, refusals, decided_at) VALUES (?, NULL, '', 'unmatched', 'no_match', ?, ?)",
                    (seq, refusals, now),
                )
            db.execute("UPDATE event SET route_state = 'routed', routed_at = ? WHERE seq = ?", (now, seq))
            db.execute("COMMIT")
    elapsed = time.perf_counter() - started
    db.close()
    return elapsed


SET_BATCH = 500


def set_based_floor(payloads: list[dict], path: str, synchronous: str) -> float:
    """The same reads, inserts and updates as :func:`raw_floor`, set-based: one transaction per
    batch of ``SET_BATCH`` Events, one SELECT for the batch's key owners, ``executemany`` for
    every insert and update. No ORM."""
    db, refusals = raw_database(payloads, path, synchronous)
    started = time.perf_counter()
    while True:
        rows = db.execute(
            "SELECT seq, type, data FROM event WHERE route_state = 'unrouted' ORDER BY seq LIMIT ?",
            (SET_BATCH,),
        ).fetchall()
        if not rows:
            break
        now = datetime.now(UTC).isoformat()
        db.execute("BEGIN IMMEDIATE")
        wanted: list[tuple[int, str | None]] = []
        for seq, kind, data in rows:
            data = json.loads(data)
            wanted.append((seq, f"pr:{data['repo']}#{data['n']}" if kind.startswith("pr.") else None))
        keys = sorted({key for _, key in wanted if key is not None})
        owners: dict[str, int] = {}
        for start in range(0, len(keys), 900):
            chunk = keys[start : start + 900]
            owners.update(
                db.execute(
                    f"SELECT key, work FROM ckey WHERE scope = 'bench' AND key IN ({','.join('?' * len(chunk))})",
                    chunk,
                ).fetchall()
            )
        # New Work: one row per key first seen in this batch, its trigger the first Event.
        starts = {}
        for seq, key in wanted:
            if key is not None and key not in owners and key not in starts:
                starts[key] = seq
        if starts:
            (last_work,) = db.execute("SELECT COALESCE(MAX(id), 0) FROM work").fetchone()
            db.executemany(
                "INSERT INTO work (scope, status, binding, trigger, created_at) VALUES ('bench', 'ready', 'agent', ?, ?)",
                [(seq, now) for seq in starts.values()],
            )
            by_trigger = dict(db.execute("SELECT trigger, id FROM work WHERE id > ?", (last_work,)))
            created = {key: by_trigger[seq] for key, seq in starts.items()}
            db.executemany(
                "INSERT INTO ckey (scope, key, work) VALUES ('bench', ?, ?)", list(created.items())
            )
            owners.update(created)
        inputs, records = [], []
        for seq, key in wanted:
            if key is not None:
                work = owners[key]
                inputs.append((work, seq, seq))
                policy = "start" if starts.get(key) == seq else "queue"
                records.append((seq, work, "pull-requests", policy, "", "[]", now))
            else:
                records.append((seq, None, "", "unmatched", "no_match", refusals, now))
        db.executemany("INSERT INTO input (work, event, seq, kind) VALUES (?, ?, ?, 'queue')", inputs)
        db.executemany(
            "INSERT INTO record (event, work, route, policy, reason, refusals, decided_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            records,
        )
        db.executemany(
            "UPDATE event SET route_state = 'routed', routed_at = ? WHERE seq = ?",
            [(now, seq) for seq, _ in wanted],
        )
        db.execute("COMMIT")
    elapsed = time.perf_counter() - started
    db.close()
    return elapsed


def _adapted(entry: list) -> list:
    """A logged statement with its parameters as the driver bound them (Django's adapters for
    datetimes and decimals applied), so the replay binds the same values without Django."""
    if entry[0] != "sql":
        return entry
    _, sql, params, many, raised = entry

    def bound(values):
        if isinstance(values, dict):
            return {k: _bound_value(v) for k, v in values.items()}
        return [_bound_value(v) for v in values or ()]

    return ["sql", sql, [bound(row) for row in params] if many else bound(params), many, raised]


def _bound_value(value):
    adapt = sqlite3.adapters.get((type(value), sqlite3.PrepareProtocol))
    if adapt is not None:
        return adapt(value)
    if isinstance(value, enum.Enum):  # Django's choices: bound as their value
        value = value.value
    if isinstance(value, str) and type(value) is not str:
        return str.__str__(value)
    if isinstance(value, int) and type(value) not in (int, bool):
        return int(value)
    return value


def replay_floor(path: str, statements_path: str, synchronous: str) -> float:
    """The router's own statements, run again in order with raw ``sqlite3`` on a copy of the
    database as it was before routing (the same rows, indexes, constraints and triggers), in
    the same transactions, with the same journal, synchronous and foreign-key settings: what
    routing costs the database, with no Python of the router's. Statements that raised for
    the router (a retried commit) raise here too and are passed over the same way."""
    with open(statements_path, "rb") as source:
        log = pickle.load(source)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={synchronous}")
    db.execute("PRAGMA foreign_keys=ON")
    converted: dict[str, str] = {}
    started = time.perf_counter()
    for entry in log:
        if entry[0] != "sql":
            if db.in_transaction:
                db.execute("COMMIT" if entry[0] == "commit" else "ROLLBACK")
            continue
        _, sql, params, many, raised = entry
        query = converted.get(sql)
        if query is None:
            query = converted[sql] = re.sub(r"(?<!%)%s", "?", sql).replace("%%", "%")
        try:
            if many:
                db.executemany(query, params)
            else:
                db.execute(query, params).fetchall()
        except sqlite3.Error:
            if not raised:
                raise
    elapsed = time.perf_counter() - started
    (unrouted,) = db.execute("SELECT COUNT(*) FROM causal_event WHERE route_state = 'unrouted'").fetchone()
    db.close()
    if unrouted:
        raise RuntimeError(f"the replay left {unrouted} Events unrouted: it did not do the router's work")
    return elapsed


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def sqlite_env(database: str, var_dir: str, synchronous: str = "FULL") -> dict[str, str]:
    """The environment of this bench's processes on the SQLite file ``database``."""
    return {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{database}",
        "CONDUIT_VAR_DIR": var_dir,
        "SQLITE_SYNCHRONOUS": synchronous,
        "DEBUG": "false",
        "LOG_LEVEL": "WARNING",
    }


def copy_database(source: str, target: str) -> None:
    """A consistent copy of an SQLite database, what its WAL holds included."""
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)


def sqlite_run(args: argparse.Namespace) -> dict[str, float]:
    """Accept in one process, route in another (so its peak memory is the loop's own), then
    time the raw floor over the same workload in this one. Returns the Events/s of the
    router and of both floors."""
    tmp = tempfile.mkdtemp(prefix="conduit-bench-")
    env = sqlite_env(f"{tmp}/conduit.sqlite3", tmp, args.synchronous)
    try:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, __file__, "--_prepare", str(args.n)], env=env, check=True)
        accept_s = time.perf_counter() - t0
        # The database as routing finds it, twice: once routed again with its statements
        # logged (logging them would weigh on the timed run's memory and collector), once for
        # the replay of that log.
        for copy_name in ("logged", "replay"):
            copy_database(f"{tmp}/conduit.sqlite3", f"{tmp}/{copy_name}.sqlite3")
        route_command = [sys.executable, __file__, "--_route", str(args.batch_size)]
        if args.profile:
            route_command += ["--profile", str(args.profile)]
        routed = subprocess.run(route_command, env=env, check=True, capture_output=True, text=True)
        *profile, last = routed.stdout.strip().splitlines()
        figures = json.loads(last)
        if not args.profile:
            logged_env = {**env, "DATABASE_URL": f"sqlite:///{tmp}/logged.sqlite3"}
            logged = [*route_command, "--_statements", f"{tmp}/statements.pickle"]
            subprocess.run(logged, env=logged_env, check=True, capture_output=True, text=True)
        raw_seconds = raw_floor(workload(args.n), f"{tmp}/raw.sqlite3", args.synchronous)
        set_seconds = set_based_floor(workload(args.n), f"{tmp}/set.sqlite3", args.synchronous)
        replay_seconds = (
            None
            if args.profile
            else replay_floor(f"{tmp}/replay.sqlite3", f"{tmp}/statements.pickle", args.synchronous)
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    routed, seconds = figures["routed"], figures["seconds"]
    router_rate = routed / seconds
    raw_rate = args.n / raw_seconds
    set_rate = args.n / set_seconds
    if profile:
        print("\n".join(profile))
    print(f"events                 {args.n} (synchronous={args.synchronous}, batch {args.batch_size})")
    print(f"acceptance             {args.n / accept_s:,.0f} Events/s (setup process, batches of 1,000)")
    print(f"router                 {router_rate:,.0f} Events/s ({routed} routed in {seconds:.2f} s)")
    print(f"raw sqlite3 floor      {raw_rate:,.0f} Events/s ({raw_seconds:.2f} s)")
    print(
        f"set-based floor        {set_rate:,.0f} Events/s ({set_seconds:.2f} s, one transaction per {SET_BATCH})"
    )
    if replay_seconds is not None:
        print(
            f"router's SQL replayed  {routed / replay_seconds:,.0f} Events/s ({replay_seconds:.2f} s: its "
            f"{figures['statements']:,} statements and commits, raw sqlite3, the same database)"
        )
    print(f"ratio router/raw       {router_rate / raw_rate:.2f}   (target >= 0.5)")
    print(f"ratio router/set-based {router_rate / set_rate:.2f}   (target >= 0.15)")
    if replay_seconds is not None:
        print(
            f"ratio router/replayed  {router_rate / (routed / replay_seconds):.2f}   "
            "(the share of routing's time its database work takes)"
        )
    print(f"SQL per routed Event   {figures['statements'] / max(routed, 1):.2f}   (target <= 7)")
    print(
        f"garbage collector      {figures['gc_collections']} collection{'' if figures['gc_collections'] == 1 else 's'}, "
        f"{figures['gc_seconds'] * 1e6 / max(routed, 1):.1f} µs a routed Event (tuned as route_loop tunes it)"
    )
    print(f"route loop peak RSS    {figures['peak_rss_mb']:,.0f} MB (its own process; target < 200 MB)")
    return {"router": router_rate, "raw floor": raw_rate, "set-based floor": set_rate}


def route_process(batch_size: int, profile: int = 0, statements_path: str = "") -> None:
    """The routing phase in a process of its own: prints its figures as JSON (last line),
    after its profile when ``profile`` is the number of functions to list. With
    ``statements_path``, the statements it ran are pickled there for :func:`replay_floor`."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "conduit_site.settings")
    import django

    django.setup()
    if statements_path:
        log: list = []
        figures = route_all(batch_size, log)
        with open(statements_path, "wb") as out:
            pickle.dump([_adapted(entry) for entry in log], out, protocol=pickle.HIGHEST_PROTOCOL)
    elif profile:
        import cProfile
        import io
        import pstats

        profiler = cProfile.Profile()
        figures = profiler.runcall(route_all, batch_size)
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out).strip_dirs()
        stats.sort_stats("cumulative").print_stats(profile)
        stats.sort_stats("tottime").print_stats(profile)
        print(out.getvalue())
    else:
        figures = route_all(batch_size)
    print(json.dumps({**figures, "peak_rss_mb": peak_rss_mb()}))


# --- PostgreSQL ----------------------------------------------------------------------------------


def postgres_run(args: argparse.Namespace) -> dict[int, float]:
    """Route the workload with each number of loops in ``args.loops`` beside pgbench with as
    many clients; returns the router's steady Events/s by number of loops (:func:`_spans`)."""
    base = os.environ.get("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test")
    database = f"conduit_bench{args.database_suffix}"
    admin = base.rsplit("/", 1)[0] + "/postgres"
    payloads = workload(args.n)
    results = {}
    for loops in args.loops:
        subprocess.run(["psql", admin, "-qc", f"DROP DATABASE IF EXISTS {database}"], check=True)
        subprocess.run(["psql", admin, "-qc", f"CREATE DATABASE {database}"], check=True)
        url = base.rsplit("/", 1)[0] + f"/{database}"
        # DEBUG off, as deployed and as the SQLite run has it (DEBUG records every statement).
        env = {**os.environ, "DATABASE_URL": url, "LOG_LEVEL": "WARNING", "DEBUG": "false"}
        subprocess.run([sys.executable, __file__, "--_prepare", str(args.n)], env=env, check=True)
        started = time.perf_counter()
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    str(ROOT / "manage.py"),
                    "route_loop",
                    "--drain",
                    "--batch-size",
                    str(args.batch_size),
                ],
                env=env,
                stdout=subprocess.DEVNULL,
            )
            for _ in range(loops)
        ]
        for proc in procs:
            proc.wait()
        wall = time.perf_counter() - started
        # The routing span excludes the processes' start-up (Django set-up, imports).
        span, steady, counted = _spans(url, wall)
        results[loops] = counted / max(steady, 1e-6)
        print(
            f"router, {loops} loop(s): {len(payloads)} Events in {span:.1f} s routing ({wall:.1f} s wall "
            f"with start-up), {len(payloads) / max(span, 1e-6):,.0f} Events/s first to last decision; "
            f"steady: {counted} Events in {steady:.2f} s"
        )
        pgbench = pgbench_tps(admin.rsplit("/", 1)[0], loops, args.database_suffix)
        print(
            f"router, {loops} loop(s)      {results[loops]:,.0f} Events/s   pgbench TPC-B-like, {loops} client(s): {pgbench:,.0f} tps   ratio {results[loops] / pgbench:.2f} (target >= 0.5)"
        )
    subprocess.run(["psql", admin, "-qc", f"DROP DATABASE IF EXISTS {database}"], check=True)
    for loops in args.loops:
        if loops != args.loops[0] and args.loops[0] in results:
            print(
                f"{loops} loops / {args.loops[0]} loop(s)   {results[loops] / results[args.loops[0]]:.2f}x"
                + ("   (target >= 1.6)" if (args.loops[0], loops) == (1, 2) else "")
            )
    return results


# The decisions a steady rate is measured between: from the one at this fraction of all to the
# one at 1 - it (_spans).
STEADY_TRIM = 0.05


def _spans(url: str, wall: float) -> tuple[float, float, int]:
    """The routing's span (first to last decision), and the steady span: from the decision at
    STEADY_TRIM of all to the one at 1 - STEADY_TRIM, with the Events decided after the first
    and up to the last of them. The first and last windows are not a steady state: the loops
    start a few tenths of a second apart (each sets Django up first), the first decision comes
    only when a window of 500 commits at once, and at the end some loops have no window left.
    With 20,000 Events and two loops that was about a tenth of a two-second span."""
    sql = f"""
        WITH d AS (
            SELECT decided_at, ROW_NUMBER() OVER (ORDER BY decided_at) AS n, COUNT(*) OVER () AS total
            FROM routing_routerecord
        ), b AS (
            SELECT MIN(decided_at) AS first, MAX(decided_at) AS last,
                   MAX(decided_at) FILTER (WHERE n <= total * {STEADY_TRIM}) AS low,
                   MAX(decided_at) FILTER (WHERE n <= total * {1 - STEADY_TRIM}) AS high
            FROM d
        )
        SELECT EXTRACT(EPOCH FROM last - first), EXTRACT(EPOCH FROM high - low),
               (SELECT COUNT(*) FROM routing_routerecord r WHERE r.decided_at > b.low AND r.decided_at <= b.high)
        FROM b
    """
    out = subprocess.run(
        ["psql", url, "-tAc", sql], check=True, capture_output=True, text=True
    ).stdout.strip()
    span, steady, counted = out.split("|")
    return float(span or wall), float(steady or 0), int(counted or 0)


def pgbench_tps(server: str, clients: int, suffix: str = "") -> float:
    db = f"conduit_pgbench{suffix}"
    admin = server + "/postgres"
    subprocess.run(["psql", admin, "-qc", f"DROP DATABASE IF EXISTS {db}"], check=True)
    subprocess.run(["psql", admin, "-qc", f"CREATE DATABASE {db}"], check=True)
    host = server.split("@", 1)[1].split(":")[0]
    common = ["-h", host, "-U", "postgres"]
    subprocess.run(["pgbench", *common, "-i", "-q", "-s", "4", db], check=True, capture_output=True)
    out = subprocess.run(
        ["pgbench", *common, "-c", str(clients), "-j", str(clients), "-T", "10", db],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    subprocess.run(["psql", admin, "-qc", f"DROP DATABASE IF EXISTS {db}"], check=True)
    for line in out.splitlines():
        if line.startswith("tps"):
            return float(line.split("=")[1].split()[0])
    raise RuntimeError(f"pgbench printed no tps:\n{out}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--n",
        type=int,
        default=None,
        help="Events to route (default 20,000; with --postgres 60,000: a run of 20,000 lasted two "
        "seconds with two loops, and a noisy machine moved single runs by a third).",
    )
    parser.add_argument(
        "--batch-size", type=int, default=500, help="Events per router pass (default 500, as route_loop)."
    )
    parser.add_argument(
        "--synchronous",
        default="FULL",
        choices=["FULL", "NORMAL"],
        help="SQLite synchronous setting for both sides.",
    )
    parser.add_argument(
        "--postgres", action="store_true", help="Run 1, 2 and 4 loops on PostgreSQL beside pgbench."
    )
    parser.add_argument(
        "--loops",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[1, 2, 4],
        help="With --postgres: the loop counts to run, comma-separated (default 1,2,4).",
    )
    parser.add_argument(
        "--database-suffix",
        default="",
        help="With --postgres: appended to the scratch databases' names (several benches at once).",
    )
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="SQLite: run the routing phase under cProfile and print its top N functions "
        "(the Events/s figure is then the profiled one).",
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=1,
        metavar="N",
        help="Run the whole bench N times, then print each run's figures and their medians (default 1).",
    )
    parser.add_argument("--_prepare", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--_route", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--_statements", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._route:
        route_process(args._route, args.profile, args._statements)
        return
    if args._prepare:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "conduit_site.settings")
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        accept_all(workload(args._prepare))
        return
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.n is None:
        args.n = 60000 if args.postgres else 20000
    if args.n < 1:
        parser.error("--n must be at least 1")
    runs = []
    for run in range(1, args.runs + 1):
        if args.runs > 1:
            print(f"--- run {run} of {args.runs}", flush=True)
        runs.append(postgres_run(args) if args.postgres else sqlite_run(args))
    if args.runs > 1:
        print_runs(runs, args)


def print_runs(runs: list[dict], args: argparse.Namespace) -> None:
    """Each run's figures on a line and the median of each (a noisy machine moves single runs
    by a third; the ratios are taken within each run, where both sides met the same load)."""
    print(f"--- {len(runs)} runs")
    if args.postgres:
        first = args.loops[0]
        for loops in args.loops:
            rates = [run[loops] for run in runs]
            line = f"{loops} loop(s)  " + " / ".join(f"{rate:,.0f}" for rate in rates) + " Events/s"
            line += f"   median {statistics.median(rates):,.0f}"
            if loops != first:
                ratios = [run[loops] / run[first] for run in runs]
                line += f";  / {first} loop(s) " + " / ".join(f"{r:.2f}" for r in ratios)
                line += f"   median {statistics.median(ratios):.2f}"
                line += "   (target >= 1.6)" if (first, loops) == (1, 2) else ""
            print(line)
        return
    for name in ("router", "set-based floor", "raw floor"):
        rates = [run[name] for run in runs]
        print(
            f"{name:<16} "
            + " / ".join(f"{rate:,.0f}" for rate in rates)
            + f" Events/s   median {statistics.median(rates):,.0f}"
        )
    ratios = [run["router"] / run["set-based floor"] for run in runs]
    print(
        "router/set-based "
        + " / ".join(f"{ratio:.3f}" for ratio in ratios)
        + f"   median {statistics.median(ratios):.3f}   (target >= 0.15)"
    )


if __name__ == "__main__":
    main()
