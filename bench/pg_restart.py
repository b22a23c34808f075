"""PostgreSQL restarted under load: the loops reconnect and nothing acknowledged is lost.

    python bench/pg_restart.py [--n 3000] [--hosts 1] [--restart-after 4] [--restarts 1] [--port 55432]

It starts a PostgreSQL cluster of its own (``initdb`` into a temporary folder, trust
authentication, its own port and socket folder; as the ``postgres`` user when run as root), so
restarting it disturbs no other database. ``--pg-bin`` names the folder of ``initdb`` and
``pg_ctl`` (default: ``pg_config --bindir``, else the ``PATH``).

On a scratch database of that cluster, each of ``--hosts`` hosts (``CONDUIT_HOSTNAME`` host-1,
host-2…) runs a ``route_loop`` and a ``work_loop`` process while a client accepts a stream of
Events in batches (``bench/takeover.py``'s workload: a Work for each keyed Event, whose attempt
holds ``--hold`` seconds). A batch is *acknowledged* when ``events_accept`` returned; one that
raised (the server was going down or not back yet) is sent again until it is. ``--restart-after``
seconds in, ``pg_ctl restart -m fast`` restarts the server (``--restarts`` times, ``--gap`` seconds
apart); with ``--restart-at-start S`` also S seconds after the loops were started, while they
start. Then it waits until every Event is routed and every Work completed, and prints:

- Events acknowledged and the batches refused during the restart (then sent again);
- how long the restart took, and when each loop did its first work after the server was back:
  the first Event routed, and each work loop's first attempt started and ended;
- loops still running at the end (none may have exited);
- the history checker (``tests/routing/history.py``): every acknowledged Event routed exactly
  once, in acceptance order: lost 0, duplicated 0, order kept; every Work completed, and how many
  needed a second attempt (an attempt whose end could not be written is lost and runs again).

It exits 1 on a violation, a loop that exited or a backlog left after ``--timeout``.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.takeover import payloads  # noqa: E402

TAKEOVER = ROOT / "bench" / "takeover.py"
DATABASE = "conduit_pg_restart"


# --- in child processes on the scratch database ------------------------------------------------


def child_accept(n: int, batch: int, pause: float, acked: str) -> None:
    """Accept the stream in batches; note each acknowledged batch (with its time) and each
    refused one (sent again until acknowledged)."""
    from django.db import DatabaseError, close_old_connections, connection

    from causal.clock import system_clock
    from routing.acceptance.services import events_accept

    stream = payloads(n, "p")
    for start in range(0, n, batch):
        chunk = stream[start : start + batch]
        refused = 0
        while True:
            try:
                events_accept(payloads=chunk, clock=system_clock)
                break
            except DatabaseError:
                refused += 1
                connection.close()
                time.sleep(0.1)
                close_old_connections()
        with open(acked, "a") as handle:
            handle.write(
                json.dumps({"ids": [p["id"] for p in chunk], "at": time.time(), "refused": refused}) + "\n"
            )
        time.sleep(pause)


def child_beats() -> None:
    """How many route loops and work loops wrote a heartbeat."""
    from causal.models import KV
    from routing.engine.heartbeat import HEARTBEATS_NAMESPACE as ROUTE
    from worklife.heartbeat import HEARTBEATS_NAMESPACE as WORK

    print(json.dumps([KV.objects.filter(namespace=ROUTE).count(), KV.objects.filter(namespace=WORK).count()]))


def child_report(n: int, back_at: float) -> None:
    """The history's verdict and each loop's first work after ``back_at`` (the server back)."""
    from datetime import UTC, datetime

    from django.db.models import Count, Min

    from causal.models import Event
    from tests.routing.history import history_violations
    from worklife.models import Attempt, Work

    back = datetime.fromtimestamp(back_at, UTC)
    routed = Event.objects.filter(routed_at__gt=back).aggregate(first=Min("routed_at"))["first"]
    started = (
        Attempt.objects.filter(started_at__gt=back).values("lease_owner").annotate(first=Min("started_at"))
    )
    ended = Attempt.objects.filter(ended_at__gt=back).values("lease_owner").annotate(first=Min("ended_at"))

    def host(owner: str) -> str:
        return owner.split(":", 1)[0] if owner else "?"

    out = {
        "violations": history_violations(payloads(n, "p")),
        "route": routed.timestamp() - back_at if routed else None,
        "attempt_started": {
            host(a["lease_owner"]): a["first"].timestamp() - back_at
            for a in sorted(started, key=lambda a: a["first"], reverse=True)
        },
        "attempt_ended": {
            host(a["lease_owner"]): a["first"].timestamp() - back_at
            for a in sorted(ended, key=lambda a: a["first"], reverse=True)
        },
        "work": dict(Work.objects.values_list("status").annotate(c=Count("pk")).order_by()),
        "attempts": dict(Attempt.objects.values_list("state").annotate(c=Count("pk")).order_by()),
        "rerun": Work.objects.annotate(a=Count("attempts")).filter(a__gt=1).count(),
    }
    print(json.dumps(out))


# --- the throwaway cluster -----------------------------------------------------------------------


class Cluster:
    """A PostgreSQL cluster in a temporary folder, on its own port, trust authentication."""

    def __init__(self, bindir: Path, port: int) -> None:
        self.bindir, self.port = bindir, port
        self.folder = Path(tempfile.mkdtemp(prefix="conduit-pg-"))
        self.data, self.log = self.folder / "data", self.folder / "server.log"
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            # The server refuses to run as root.
            user = pwd.getpwnam("postgres")
            os.chown(self.folder, user.pw_uid, user.pw_gid)
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.url = f"postgres://postgres@127.0.0.1:{port}"

    def run(self, *argv: str) -> None:
        subprocess.run([*self.as_user, *argv], check=True, capture_output=True, text=True)

    def pg_ctl(self, *argv: str) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c max_connections=60"
        self.run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", options, *argv)

    def start(self) -> None:
        self.run(
            str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8"
        )
        self.pg_ctl("-w", "start")

    def restart(self) -> None:
        self.pg_ctl("-w", "-m", "fast", "restart")

    def remove(self) -> None:
        try:
            self.pg_ctl("-w", "-m", "immediate", "stop")
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.folder, ignore_errors=True)


def postgres_bindir(given: str) -> Path:
    if given:
        return Path(given)
    if shutil.which("pg_config"):
        found = Path(subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True).stdout.strip())
        if (found / "initdb").exists():
            return found
    initdb = shutil.which("initdb")
    if initdb is None:
        sys.exit("initdb not found: name PostgreSQL's programs' folder with --pg-bin")
    return Path(initdb).resolve().parent


# --- the driver ----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=3000, help="Events (default 3,000).")
    parser.add_argument("--batch", type=int, default=50, help="Events per acceptance (default 50).")
    parser.add_argument("--pause", type=float, default=0.1, help="Seconds between acceptances (default 0.1).")
    parser.add_argument("--hold", type=float, default=0.1, help="Seconds an attempt runs (default 0.1).")
    parser.add_argument(
        "--slots", type=int, default=16, help="Attempts a work loop runs at once (default 16)."
    )
    parser.add_argument(
        "--hosts", type=int, default=1, help="Hosts, each a route and a work loop (default 1)."
    )
    parser.add_argument("--restart-after", type=float, default=4.0, help="Seconds before the restart.")
    parser.add_argument("--restarts", type=int, default=1, help="Restarts (default 1).")
    parser.add_argument("--gap", type=float, default=3.0, help="Seconds between restarts (default 3).")
    parser.add_argument(
        "--restart-at-start",
        type=float,
        default=0.0,
        help="Also restart the server this many seconds after the loops are started (0: not).",
    )
    parser.add_argument("--port", type=int, default=55432, help="The cluster's port (default 55432).")
    parser.add_argument("--pg-bin", default="", help="Folder of initdb and pg_ctl.")
    parser.add_argument("--timeout", type=float, default=300.0, help="Give up after this many seconds.")
    parser.add_argument("--_child", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._child is not None:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "conduit_site.settings")
        import django

        django.setup()
        name, *rest = args._child
        if name == "accept":
            child_accept(int(rest[0]), int(rest[1]), float(rest[2]), rest[3])
        elif name == "beats":
            child_beats()
        else:
            child_report(int(rest[0]), float(rest[1]))
        return

    cluster = Cluster(postgres_bindir(args.pg_bin), args.port)
    loops: list[subprocess.Popen] = []
    try:
        cluster.start()
        subprocess.run(["psql", f"{cluster.url}/postgres", "-qc", f"CREATE DATABASE {DATABASE}"], check=True)
        work = Path(tempfile.mkdtemp(prefix="conduit-pg-restart-"))
        os.chmod(work, 0o1777)  # the attempts' log is written by the work user the attempts run as
        log, acked = work / "attempts.log", work / "acked.log"
        env = {
            **os.environ,
            "DATABASE_URL": f"{cluster.url}/{DATABASE}",
            "LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(ROOT),
            "CONDUIT_VAR_DIR": str(work / "var"),
        }
        manage = [sys.executable, str(ROOT / "manage.py")]
        me = [sys.executable, __file__, "--_child"]
        subprocess.run([*manage, "migrate", "--verbosity", "0"], env=env, check=True)
        subprocess.run(
            [sys.executable, str(TAKEOVER), "--_child", "apply", str(args.hold), str(log)],
            env=env,
            check=True,
        )
        for i in range(1, args.hosts + 1):
            host_env = {**env, "CONDUIT_HOSTNAME": f"host-{i}"}
            for loop, extra in (
                ("route_loop", ["--batch-size", "25"]),
                ("work_loop", ["--slots", str(args.slots)]),
            ):
                errors = open(work / f"host-{i}-{loop}.log", "w")  # noqa: SIM115 - the process's lifetime
                loops.append(
                    subprocess.Popen(
                        [*manage, loop, *extra],
                        env=host_env,
                        stdout=subprocess.DEVNULL,
                        stderr=errors,
                        start_new_session=True,
                    )
                )
        launched = time.time()
        if args.restart_at_start:
            # The loops start while the server restarts: each waits for it (infra.connections).
            time.sleep(args.restart_at_start)
            cluster.restart()
            print(
                f"restart as the loops start, {args.restart_at_start:.1f} s after them: {time.time() - launched:.2f} s"
            )
        # The stream and the restart begin once every loop beats.
        while True:
            beats = subprocess.run([*me, "beats"], env=env, capture_output=True)
            if beats.returncode == 0 and json.loads(beats.stdout) == [args.hosts, args.hosts]:
                break
            exited = [p for p in loops if p.poll() is not None]
            if exited:
                sys.exit(f"{len(exited)} of {len(loops)} loops exited as they started")
            time.sleep(0.2)
        print(f"every loop beats {time.time() - launched:.1f} s after it was started")
        started = time.time()
        accept = subprocess.Popen(
            [*me, "accept", str(args.n), str(args.batch), str(args.pause), str(acked)], env=env
        )
        time.sleep(args.restart_after)
        restarts = []
        for i in range(args.restarts):
            if i:
                time.sleep(args.gap)
            down = time.time()
            cluster.restart()
            back = time.time()
            restarts.append((down, back))
            print(
                f"restart {i + 1} at {down - started:.1f} s: pg_ctl restart -m fast took {back - down:.2f} s"
            )
        accept.wait()
        deadline = time.time() + args.timeout
        settled = False
        while time.time() < deadline:
            progress = json.loads(
                subprocess.run(
                    [sys.executable, str(TAKEOVER), "--_child", "progress"],
                    env=env,
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
            )
            if progress["unrouted"] == 0 and progress["open_work"] == 0:
                settled = True
                break
            time.sleep(0.5)
        if not settled:
            print(f"gave up after {args.timeout:.0f} s: {progress}")
        last_back = restarts[-1][1]
        print(
            f"all routed and every Work completed {time.time() - last_back:.1f} s after the server was back"
        )
        alive = [p for p in loops if p.poll() is None]
        print(f"loops still running: {len(alive)} of {len(loops)}")
        batches = [json.loads(line) for line in acked.read_text().splitlines()]
        acked_ids = sum(len(b["ids"]) for b in batches)
        refused = [b for b in batches if b["refused"]]
        print(
            f"{acked_ids} Events acknowledged in {len(batches)} batches; {len(refused)} batches refused during "
            f"the restart ({sum(b['refused'] for b in refused)} tries) and sent again"
        )
        report = json.loads(
            subprocess.run(
                [*me, "report", str(args.n), str(last_back)],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )

        def firsts(what: dict) -> str:
            return ", ".join(f"{host} {seconds:.2f} s" for host, seconds in sorted(what.items())) or "none"

        first = "none" if report["route"] is None else f"{report['route']:.2f} s"
        print(f"after the server was back: first Event routed after {first}")
        print(f"  first attempt started by {firsts(report['attempt_started'])}")
        print(f"  first attempt ended by {firsts(report['attempt_ended'])}")
        print(
            f"Work {report['work']}; attempts {report['attempts']}; Work that needed a second attempt: "
            f"{report['rerun']}"
        )
        reconnects = sum(
            (work / f"host-{i}-{loop}.log").read_text().count("pass_failed")
            for i in range(1, args.hosts + 1)
            for loop in ("route_loop", "work_loop")
        )
        print(f"loops' logged failed passes (the outage): {reconnects}")
        if args.restart_at_start:
            waited = sum(
                "database.unavailable" in (work / f"host-{i}-{loop}.log").read_text()
                for i in range(1, args.hosts + 1)
                for loop in ("route_loop", "work_loop")
            )
            print(f"loops that waited for the server as they started: {waited} of {len(loops)}")
        violations = report["violations"]
        print(
            "history: "
            + ("lost 0, duplicated 0, order kept" if not violations else "; ".join(violations[:5]))
        )
        ok = not violations and settled and len(alive) == len(loops) and acked_ids == args.n
        for proc in alive:
            proc.send_signal(signal.SIGTERM)
        for proc in alive:
            proc.wait(timeout=60)
        loops = []
        if ok:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"the loops' logs are kept in {work}")
    finally:
        for proc in loops:
            if proc.poll() is None:
                proc.kill()
        cluster.remove()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
