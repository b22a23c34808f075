"""Two hosts on one PostgreSQL: one dies by SIGKILL mid-load, the other takes over.

    python bench/takeover.py [--n 1500] [--claim-seconds 10] [--lease-seconds 6] [--kill-after 4]
    python bench/takeover.py --drop-connections
    python bench/takeover.py --pg-restart "pg_ctlcluster 16 main restart"   # alone, see below

Each "host" is its own process tree with its own ``CONDUIT_HOSTNAME`` (``host-a``, ``host-b``): a
``route_loop`` and a ``work_loop``, on a scratch database. The driver accepts a stream while they
run; every Event names a key of its own or none, so each keyed Event starts a Work whose attempt
(``hold`` below) runs ``--hold`` seconds, logs its start and end wall times, and completes it.
``--kill-after`` seconds in, every process of host A (its loops and their attempt workers) gets
SIGKILL at once. A loop judges only loops of its own host name dead by their pid, so host B must
wait for A's route claims (``CONDUIT_ROUTE_CLAIM_SECONDS``) and attempt leases
(``CONDUIT_ATTEMPT_LEASE_SECONDS``) to lapse. Printed:

- A's route claims and active attempts at the kill, and when B routed the last claimed Event and
  marked the last attempt lost (seconds after the kill, beside the claim and lease times);
- that every Work A was running ran again on B and completed;
- the history checker (``tests/routing/history.py``): lost 0, duplicated 0, order kept;
- overlaps: two attempts of one Work running at once, from the attempts' own wall-time log
  (a killed attempt ends at the kill): expected 0.

``--drop-connections`` instead ends every connection to the scratch database mid-load
(``pg_terminate_backend``; other databases of the server are untouched) with both hosts alive:
the loops reconnect, and every acknowledged acceptance is routed exactly once.
``--pg-restart CMD`` instead restarts PostgreSQL (CMD, run once) mid-load with both hosts alive
and checks the loops reconnect and that every Event acceptance acknowledged before, during or
after the restart is routed exactly once. It disturbs every database of the server: run it
alone, never beside tests.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DOCUMENT = """
version: 1
scopes:
  - path: acme
    bindings:
      inbox:
        executor: python
        settings:
          target: "bench.takeover:hold"
          params: {hold: %(hold)s, log: "%(log)s"}
    routes:
      - slot: conversations
        handler: match
        params:
          type: "c.*"
          keys: ["k:{data.k}"]
        binding: inbox
        policy: queue
      - slot: noise
        handler: match
        params: {type: "noise.*"}
        policy: drop
"""


def hold(run):
    """The attempts' target: log the start, hold ``hold`` seconds (an interrupt ends it early),
    log the end, complete the Work."""
    log = run.params["log"]

    def note(what: str) -> None:
        line = json.dumps({"work": run.work_id, "attempt": run.attempt_id, what: time.time()})
        with open(log, "a") as handle:
            handle.write(line + "\n")

    note("start")
    run.interrupted.wait(float(run.params["hold"]))
    note("end")
    return {"held": run.params["hold"]}


def payloads(n: int, prefix: str = "t") -> list[dict]:
    """N Events: 85% keyed, each key its own (a Work each), 15% noise or unmatched."""
    out = []
    for i in range(n):
        payload = {"specversion": "1.0", "id": f"{prefix}{i}", "source": "history", "scope": "acme"}
        if i % 20 < 17:
            payload.update(type="c.msg", data={"k": f"{prefix}{i}"})
            if i % 5 == 0:
                payload["correlation"] = [f"k:{prefix}{i}"]
        elif i % 20 < 19:
            payload.update(type="noise.tick", data={"n": i})
        else:
            payload.update(type="other.thing", data={"n": i})
        out.append(payload)
    return out


# --- in child processes on the scratch database ------------------------------------------------


def _django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "conduit_site.settings")
    import django

    django.setup()


def child_apply(hold_seconds: float, log: str) -> None:
    from causal.clock import system_clock
    from routing.config.services import config_apply

    config_apply(document=DOCUMENT % {"hold": hold_seconds, "log": log}, clock=system_clock)


def child_accept(n: int, batch: int, pause: float, prefix: str, acked: str) -> None:
    """Accept the stream in batches, noting each acknowledged batch's ids (the acceptance
    committed); a batch refused by a lost connection is retried until it is acknowledged."""
    from django.db import DatabaseError, close_old_connections, connection

    from causal.clock import system_clock
    from routing.acceptance.services import events_accept

    stream = payloads(n, prefix)
    for start in range(0, n, batch):
        chunk = stream[start : start + batch]
        while True:
            try:
                events_accept(payloads=chunk, clock=system_clock, may_address_work=True)  # keys of its own
                break
            except DatabaseError:
                connection.close()
                time.sleep(0.2)
                close_old_connections()
        with open(acked, "a") as handle:
            handle.write(json.dumps([p["id"] for p in chunk]) + "\n")
        time.sleep(pause)


def child_snapshot(host: str) -> None:
    """A's route claims and active attempts, as JSON."""
    from django.utils import timezone

    from causal.models import Event, RouteState
    from worklife.models import ACTIVE_ATTEMPT_STATES, Attempt

    now = timezone.now()
    claims = list(
        Event.objects.filter(
            route_state=RouteState.UNROUTED, claimed_by__startswith=f"{host}:", claimed_until__gt=now
        ).values_list("seq", flat=True)
    )
    attempts = list(
        Attempt.objects.filter(
            state__in=ACTIVE_ATTEMPT_STATES, lease_owner__startswith=f"{host}:"
        ).values_list("pk", "work_id")
    )
    print(json.dumps({"claims": claims, "attempts": attempts}))


def child_progress() -> None:
    from causal.models import Event, RouteState
    from worklife.models import Work

    print(
        json.dumps(
            {
                "unrouted": Event.objects.filter(route_state=RouteState.UNROUTED).count(),
                "open_work": Work.objects.exclude(status__in=["completed", "cancelled"]).count(),
            }
        )
    )


def child_report(snapshot: str, kill_at: float, n: int, prefix: str) -> None:
    from causal.models import Event
    from tests.routing.history import history_violations
    from worklife.models import Attempt

    snap = json.loads(snapshot)
    out: dict = {"violations": history_violations(payloads(n, prefix))}
    routed = Event.objects.filter(seq__in=snap["claims"]).values_list("routed_at", "route_record__decided_by")
    if snap["claims"]:
        out["claims_routed_after"] = max(at.timestamp() for at, _ in routed) - kill_at
    lost = Attempt.objects.filter(pk__in=[a for a, _ in snap["attempts"]])
    out["attempt_states"] = sorted({a.state for a in lost})
    if snap["attempts"]:
        out["attempts_lost_after"] = max(a.ended_at.timestamp() for a in lost) - kill_at
    rerun = []
    for _, work in snap["attempts"]:
        later = Attempt.objects.filter(work_id=work, lease_owner__startswith="host-b:", state="succeeded")
        rerun.append(later.exists())
    out["rerun_on_b"] = f"{sum(rerun)} of {len(rerun)}"
    print(json.dumps(out))


# --- the driver ----------------------------------------------------------------------------------


def psql(url: str, sql: str) -> None:
    subprocess.run(["psql", url, "-qc", sql], check=True, capture_output=True)


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children.get(p, []))
    return found


def overlaps(log: Path, kill_at: float, killed: set[int]) -> list[str]:
    """Attempts of one Work whose wall-time intervals meet (a killed one ends at the kill)."""
    spans: dict[int, dict[int, list[float]]] = {}
    for line in log.read_text().splitlines():
        item = json.loads(line)
        span = spans.setdefault(item["work"], {}).setdefault(item["attempt"], [0.0, 0.0])
        if "start" in item:
            span[0] = item["start"]
        else:
            span[1] = item["end"]
    problems = []
    for work, attempts in spans.items():
        intervals = []
        for attempt, (start, end) in attempts.items():
            if not end:
                end = kill_at if attempt in killed else float("inf")
            intervals.append((start, end, attempt))
        intervals.sort()
        for (_, end, a), (start, _, b) in zip(intervals, intervals[1:], strict=False):
            if start < end:
                problems.append(f"Work {work}: attempts {a} and {b} ran at once")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=1500, help="Events (default 1,500).")
    parser.add_argument("--batch", type=int, default=50, help="Events per acceptance (default 50).")
    parser.add_argument("--pause", type=float, default=0.1, help="Seconds between acceptances (default 0.1).")
    parser.add_argument("--hold", type=float, default=1.0, help="Seconds an attempt runs (default 1).")
    parser.add_argument("--slots", type=int, default=8, help="Attempts a work loop runs at once (default 8).")
    parser.add_argument(
        "--claim-seconds", type=int, default=10, help="CONDUIT_ROUTE_CLAIM_SECONDS (default 10)."
    )
    parser.add_argument(
        "--lease-seconds", type=int, default=6, help="CONDUIT_ATTEMPT_LEASE_SECONDS (default 6)."
    )
    parser.add_argument("--kill-after", type=float, default=4.0, help="Seconds before host A is killed.")
    parser.add_argument("--timeout", type=float, default=300.0, help="Give up after this many seconds.")
    parser.add_argument("--pg-restart", default="", help="Restart PostgreSQL with this command instead.")
    parser.add_argument(
        "--drop-connections",
        action="store_true",
        help="Instead, end every connection to the scratch database (pg_terminate_backend) mid-load.",
    )
    parser.add_argument("--database", default="conduit_takeover", help="The scratch database's name.")
    parser.add_argument("--_child", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._child is not None:
        _django()
        name, *rest = args._child
        {
            "apply": lambda: child_apply(float(rest[0]), rest[1]),
            "accept": lambda: child_accept(int(rest[0]), int(rest[1]), float(rest[2]), rest[3], rest[4]),
            "snapshot": lambda: child_snapshot(rest[0]),
            "progress": child_progress,
            "report": lambda: child_report(rest[0], float(rest[1]), int(rest[2]), rest[3]),
        }[name]()
        return

    base = os.environ.get("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test")
    server = base.rsplit("/", 1)[0]
    url = f"{server}/{args.database}"
    psql(f"{server}/postgres", f"DROP DATABASE IF EXISTS {args.database}")
    psql(f"{server}/postgres", f"CREATE DATABASE {args.database}")
    # Outside var/ (which a Work cannot see) and writable by the work user its attempts run as.
    work_dir = Path(tempfile.mkdtemp(prefix="conduit-bench-takeover-"))
    os.chmod(work_dir, 0o1777)
    atexit.register(shutil.rmtree, work_dir, True)
    log, acked = work_dir / "attempts.log", work_dir / "acked.log"
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "LOG_LEVEL": "WARNING",
        "CONDUIT_ROUTE_CLAIM_SECONDS": str(args.claim_seconds),
        "CONDUIT_ATTEMPT_LEASE_SECONDS": str(args.lease_seconds),
        "PYTHONPATH": str(ROOT),
    }
    manage = [sys.executable, str(ROOT / "manage.py")]
    me = [sys.executable, __file__, "--_child"]

    def child(*argv: str) -> str:
        return subprocess.run([*me, *argv], env=env, check=True, capture_output=True, text=True).stdout

    subprocess.run([*manage, "migrate", "--verbosity", "0"], env=env, check=True)
    child("apply", str(args.hold), str(log))
    outage = bool(args.pg_restart or args.drop_connections)
    prefix = "r" if outage else "t"

    def host(name: str) -> list[subprocess.Popen]:
        host_env = {**env, "CONDUIT_HOSTNAME": name}
        return [
            subprocess.Popen(
                [*manage, loop, *extra], env=host_env, stdout=subprocess.DEVNULL, start_new_session=True
            )
            for loop, extra in (
                ("route_loop", ["--batch-size", "25"]),
                ("work_loop", ["--slots", str(args.slots)]),
            )
        ]

    hosts = {"host-a": host("host-a"), "host-b": host("host-b")}
    started = time.time()
    accept = subprocess.Popen(
        [*me, "accept", str(args.n), str(args.batch), str(args.pause), prefix, str(acked)], env=env
    )
    time.sleep(args.kill_after)
    kill_at = time.time()
    snapshot = ""
    killed: set[int] = set()
    if args.pg_restart:
        print(f"restarting PostgreSQL at {kill_at - started:.1f} s: {args.pg_restart}")
        subprocess.run(args.pg_restart, shell=True, check=True)
        print(f"PostgreSQL back after {time.time() - kill_at:.1f} s")
    elif args.drop_connections:
        ended = subprocess.run(
            [
                "psql",
                f"{server}/postgres",
                "-tAc",
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                f"WHERE datname = '{args.database}' AND pid <> pg_backend_pid()",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        print(f"ended {ended} connections to {args.database} at {kill_at - started:.1f} s")
    else:
        pids = [p for proc in hosts["host-a"] for p in descendants(proc.pid)]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for proc in hosts["host-a"]:
            proc.wait()
        kill_at = time.time()
        snapshot = child("snapshot", "host-a").strip()
        snap = json.loads(snapshot)
        killed = {a for a, _ in snap["attempts"]}
        print(
            f"killed host A ({len(pids)} processes) at {kill_at - started:.1f} s: it held "
            f"{len(snap['claims'])} route claims and {len(snap['attempts'])} active attempts"
        )
    accept.wait()
    deadline = time.time() + args.timeout
    while time.time() < deadline:
        progress = json.loads(child("progress"))
        if progress["unrouted"] == 0 and progress["open_work"] == 0:
            break
        time.sleep(1.0)
    else:
        print(f"gave up after {args.timeout:.0f} s: {progress}")
    settled = time.time() - kill_at
    alive = [p for procs in hosts.values() for p in procs if p.poll() is None]
    if outage:
        print(f"loops still running after the outage: {len(alive)} of 4")
    for proc in alive:
        proc.send_signal(signal.SIGTERM)
    for proc in alive:
        proc.wait(timeout=60)
    acked_ids = sum((json.loads(line) for line in acked.read_text().splitlines()), [])
    print(f"{len(acked_ids)} Events acknowledged, all settled {settled:.1f} s after the kill or restart")
    report = json.loads(
        child("report", snapshot or '{"claims": [], "attempts": []}', str(kill_at), str(args.n), prefix)
    )
    if not outage:
        print(
            f"route claims of A routed by B {report.get('claims_routed_after', 0):.1f} s after the kill "
            f"(claim time {args.claim_seconds} s); A's attempts {report['attempt_states']}, the last "
            f"marked lost {report.get('attempts_lost_after', 0):.1f} s after the kill (lease {args.lease_seconds} s, "
            f"checked every {max(1, args.lease_seconds / 3):.0f} s); their Work ran again on B and "
            f"completed: {report['rerun_on_b']}"
        )
    both = overlaps(log, kill_at, killed)
    violations = report["violations"]
    print(
        "history: "
        + ("lost 0, duplicated 0, order kept" if not violations else "; ".join(violations[:5]))
        + f"; attempts of one Work at once: {len(both)}"
        + (f" ({'; '.join(both[:3])})" if both else "")
    )
    psql(f"{server}/postgres", f"DROP DATABASE IF EXISTS {args.database}")
    sys.exit(1 if violations or both else 0)


if __name__ == "__main__":
    main()
