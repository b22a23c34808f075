"""Accept → routed latency at a steady rate, with and without wake-ups, in one run.

    python bench/latency.py [--rate 100] [--seconds 10] [--poll-interval 0.5]
    python bench/latency.py --postgres        # on a scratch PostgreSQL database

Starts ``manage.py route_loop`` (a separate process, as ``serve`` runs it) twice on a fresh
database: first with ``--no-wakeup`` (polling only: the floor this work replaces), then as it
runs by default (acceptance wakes it). Each time this process accepts Events at a steady
``--rate`` through ``routing.acceptance.services.event_accept`` (the API's service) while an observer
thread reads which of them are routed every 5 ms. A latency is from the moment acceptance
returned (committed) to the moment the observer first saw the Event routed (committed), so
it is an upper bound by the observer's period. Prints p50, p99 and max for both.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
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
      - slot: pull-requests
        handler: match
        params: {type: "pr.*", keys: ["pr:{data.n}"]}
        binding: agent
        policy: queue
"""
OBSERVE_SECONDS = 0.005


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def one_run(
    label: str, env: dict[str, str], args: argparse.Namespace, wakeup: bool, offset: int
) -> list[float]:
    from django.db import close_old_connections

    from causal.clock import system_clock
    from causal.models import Event, RouteState
    from routing.acceptance.services import event_accept

    argv = [sys.executable, "manage.py", "route_loop", "--poll-interval", str(args.poll_interval)]
    if not wakeup:
        argv.append("--no-wakeup")
    loop = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert loop.stdout is not None
    loop.stdout.readline()  # "route_loop … started": listening from here on
    time.sleep(1.0)  # its first (empty) pass
    accepted: dict[int, float] = {}
    routed: dict[int, float] = {}
    done = threading.Event()
    lock = threading.Lock()

    def observe() -> None:
        while not done.is_set() or len(routed) < len(accepted):
            with lock:
                pending = [seq for seq in accepted if seq not in routed]
            if pending:
                seen = Event.objects.filter(seq__in=pending).exclude(route_state=RouteState.UNROUTED)
                now = time.perf_counter()
                for seq in seen.values_list("seq", flat=True):
                    routed[seq] = now
            time.sleep(OBSERVE_SECONDS)
        close_old_connections()

    observer = threading.Thread(target=observe)
    observer.start()
    count = int(args.rate * args.seconds)
    period = 1.0 / args.rate
    start = time.perf_counter()
    for i in range(count):
        target = start + i * period
        delay = target - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        payload = {
            "specversion": "1.0",
            "id": f"lat-{offset + i}",
            "source": "bench",
            "type": "pr.comment",
            "scope": "bench",
            "data": {"n": (offset + i) % 50},
        }
        seq = event_accept(payload=payload, clock=system_clock).event.seq
        with lock:
            accepted[seq] = time.perf_counter()
    achieved = count / (time.perf_counter() - start)
    done.set()
    observer.join(timeout=args.poll_interval * 4 + 30)
    loop.terminate()
    loop.communicate(timeout=30)
    latencies = [(routed[seq] - accepted[seq]) * 1000 for seq in accepted if seq in routed]
    lost = len(accepted) - len(latencies)
    # The same from the database's own clock readings: acceptance's and the router's decision's
    # (the decision's commit follows it within the pass); free of the observer's period.
    stamped = Event.objects.filter(seq__in=list(accepted)).exclude(routed_at=None)
    decided = [
        (e.routed_at - e.accepted_at).total_seconds() * 1000 for e in stamped.only("accepted_at", "routed_at")
    ]
    print(
        f"{label:34s} {achieved:6.1f} Events/s accepted  p50 {percentile(latencies, 0.5):7.1f} ms  "
        f"p99 {percentile(latencies, 0.99):7.1f} ms  max {max(latencies):7.1f} ms"
        + (f"  ({lost} not seen routed)" if lost else "")
    )
    print(
        f"{'':34s} accepted_at → routed_at in the database: p50 {percentile(decided, 0.5):7.1f} ms  "
        f"p99 {percentile(decided, 0.99):7.1f} ms"
    )
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=100.0, help="Events accepted per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long each run accepts")
    parser.add_argument("--poll-interval", type=float, default=0.5, help="the route loop's poll interval")
    parser.add_argument("--postgres", action="store_true", help="run on a scratch PostgreSQL database")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="conduit-latency-") as var:
        env = {**os.environ, "CONDUIT_VAR_DIR": var, "LOG_LEVEL": "WARNING"}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        database = admin = ""
        if args.postgres:
            base = os.environ.get("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test")
            admin = base.rsplit("/", 1)[0] + "/postgres"
            database = f"conduit_latency_{os.getpid()}"
            subprocess.run(["psql", admin, "-qc", f"CREATE DATABASE {database}"], check=True)
            env["DATABASE_URL"] = base.rsplit("/", 1)[0] + "/" + database
        else:
            env["DATABASE_URL"] = f"sqlite:///{var}/conduit.sqlite3"
        os.environ.update(env)
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "conduit_site.settings")
        import django

        django.setup()
        from django.core.management import call_command

        from causal.clock import system_clock
        from routing.config.services import config_apply

        try:
            call_command("migrate", verbosity=0)
            config_apply(document=DOCUMENT, clock=system_clock)
            vendor = "PostgreSQL" if args.postgres else "SQLite (synchronous=FULL)"
            print(f"accept → routed latency, {vendor}, {args.rate:g} Events/s for {args.seconds:g} s each")
            polled = one_run(f"polling every {args.poll_interval:g} s (--no-wakeup)", env, args, False, 0)
            woken = one_run("woken on acceptance (default)", env, args, True, 1_000_000)
            ratio = statistics.median(woken) / statistics.median(polled)
            print(f"p50 woken / p50 polling: {ratio:.2f}")
        finally:
            if database:
                from django.db import connections

                connections.close_all()
                # WITH (FORCE): a stopped loop's session may still be closing.
                subprocess.run(
                    ["psql", admin, "-qc", f"DROP DATABASE IF EXISTS {database} WITH (FORCE)"], check=True
                )


if __name__ == "__main__":
    main()
