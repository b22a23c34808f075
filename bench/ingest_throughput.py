"""HTTP ingestion (``POST /api/events``, and a receiver's ``POST /hooks/github``) beside a floor
server, in one run.

    python bench/ingest_throughput.py [--clients 8] [--seconds 10] [--workers N] [--batch 100]

Starts, on a fresh SQLite database (WAL, synchronous=FULL) in a temporary var folder:

- the floor: a minimal Django view behind daphne that stores each body with one durable
  INSERT (``bench/floor/floor_app.py``);
- Conduit as it is served: ``manage.py serve`` (daphne, the route loop and the work loop),
  with ``--workers N`` when given, and ``DEBUG`` off as deployed (the floor's is off too).

Loads each in turn with ``--clients`` concurrent clients (keep-alive connections), each
sending one CloudEvent a request for ``--seconds``, then Conduit with batch bodies (arrays of
``--batch`` Events). Then the receiver run: GitHub ``pull_request`` deliveries (the demo's
``demo/deliveries/github/pr-opened.json``, a new delivery id and number each), signed with
``X-Hub-Signature-256``, to the floor (which stores the body as it is) and to Conduit's
``github`` receiver (which verifies, maps and accepts each). Every answer must be 201. Prints
requests/s, p50 and p99 for each, the ratios to the floor, and Events/s for batches.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GITHUB_SECRET = "bench-github-webhook-secret"
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
      - slot: github
        handler: match
        params: {type: "github.pull_request.*", keys: ["pr:{data.repository.full_name}#{data.number}"]}
        binding: agent
        policy: queue
receivers:
  github: {kind: github, scope: bench, secret: {env: BENCH_GITHUB_SECRET}}
"""
GITHUB_DELIVERY = json.loads((ROOT / "demo" / "deliveries" / "github" / "pr-opened.json").read_text())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, process: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited ({process.returncode}) before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"nothing listens on {port} after {timeout} s")


def event(i: int, run: str) -> dict:
    return {
        "specversion": "1.0",
        "id": f"{run}-{i}",
        "source": "bench",
        "type": "pr.comment",
        "scope": "bench",
        "data": {"n": i % 200, "text": "a comment of a typical webhook's size " * 4},
    }


def github_delivery(i: int, run: str) -> tuple[bytes, dict[str, str]]:
    """A ``pull_request`` delivery as GitHub sends it: its body and signed headers."""
    payload = {**GITHUB_DELIVERY, "number": i % 200}
    body = json.dumps(payload, separators=(",", ":")).encode()
    signature = hmac.new(GITHUB_SECRET.encode(), body, hashlib.sha256).hexdigest()
    return body, {
        "Content-Type": "application/json",
        "X-GitHub-Event": "pull_request",
        "X-GitHub-Delivery": f"{run}-{i}",
        "X-Hub-Signature-256": f"sha256={signature}",
    }


def load(
    port: int, token: str, *, clients: int, seconds: float, run: str, batch: int = 0, github: bool = False
) -> dict:
    """``clients`` threads POST for ``seconds``; returns requests/s, Events/s, p50, p99 (ms).
    ``github``: signed GitHub deliveries to ``/hooks/github`` instead of CloudEvents."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    failures: list[str] = []
    stop_at = time.perf_counter() + seconds
    headers = {"Content-Type": "application/cloudevents+json", "Authorization": f"Bearer {token}"}
    if batch:
        headers["Content-Type"] = "application/cloudevents-batch+json"

    def client(k: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        i = 0
        while time.perf_counter() < stop_at:
            url, sent = "/api/events", headers
            if github:
                url = "/hooks/github"
                body, sent = github_delivery(i, f"{run}-{k}")
            elif batch:
                body = json.dumps([event(i * batch + j, f"{run}-{k}") for j in range(batch)])
            else:
                body = json.dumps(event(i, f"{run}-{k}"))
            started = time.perf_counter()
            conn.request("POST", url, body=body, headers=sent)
            response = conn.getresponse()
            response.read()
            latencies[k].append(time.perf_counter() - started)
            if response.status != 201:
                failures.append(f"{response.status}")
            if response.getheader("Connection", "").lower() == "close":
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            i += 1
        conn.close()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    every = sorted(x for per in latencies for x in per)
    if failures:
        raise SystemExit(f"{len(failures)} requests were not answered 201: {sorted(set(failures))}")
    return {
        "rps": len(every) / elapsed,
        "eps": len(every) * max(batch, 1) / elapsed,
        "p50": every[len(every) // 2] * 1000,
        "p99": every[min(len(every) - 1, int(len(every) * 0.99))] * 1000,
    }


def _tree(root: int) -> list[int]:
    """``root`` and every process below it (from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [root], [root]
    while frontier:
        frontier = [pid for pid, parent in parents.items() if parent in frontier]
        found.extend(frontier)
    return found


def cpu_by_role(root: int) -> dict[str, float]:
    """CPU seconds (user + system) so far of the server's processes, by role: the web server,
    the route loop, the work loop; and of this process (the clients)."""
    tick = os.sysconf("SC_CLK_TCK")
    roles: dict[str, float] = {"clients": sum(os.times()[:2])}
    for pid in _tree(root):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        role = "route loop" if "route_loop" in command else "work loop" if "work_loop" in command else "web"
        roles[role] = roles.get(role, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return roles


def cpu_per_event(before: dict[str, float], after: dict[str, float], events: float) -> str:
    parts = [f"{role} {(after[role] - before.get(role, 0.0)) / events * 1e6:,.0f}" for role in after]
    return "CPU per Event (µs): " + ", ".join(parts)


def setup_conduit(env: dict[str, str]) -> str:
    """Migrate, apply the configuration, create an operator and a token; returns its secret."""
    script = (
        "import sys\n"
        "from django.contrib.auth import get_user_model\n"
        "from django.db import transaction\n"
        "from causal.clock import system_clock\n"
        "from routing.access.roles import Role, role_assign_in_tx\n"
        "from routing.access.services import api_token_create\n"
        "from routing.config.services import config_apply\n"
        "config_apply(document=sys.stdin.read(), clock=system_clock)\n"
        "with transaction.atomic():\n"
        "    user = get_user_model().objects.create_user('bench')\n"
        "    role_assign_in_tx(user=user, role=Role.OPERATOR)\n"
        "print(api_token_create(user=user, name='bench', clock=system_clock).secret)\n"
    )
    run = [sys.executable, "manage.py"]
    subprocess.run([*run, "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    done = subprocess.run(
        [*run, "shell", "-c", script], cwd=ROOT, env=env, input=DOCUMENT, capture_output=True, text=True
    )
    if done.returncode:
        raise SystemExit(done.stderr)
    return done.stdout.strip().splitlines()[-1]


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()


def show(name: str, figures: dict) -> None:
    print(
        f"{name:40s} {figures['rps']:7.1f} requests/s  p50 {figures['p50']:6.1f} ms  p99 {figures['p99']:7.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients (default 8)")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds of load per run (default 10)")
    parser.add_argument("--workers", type=int, default=0, help="serve --workers N (default: serve's own)")
    parser.add_argument(
        "--no-router",
        action="store_true",
        help="serve --no-router (no route loop, no work loop): for comparison",
    )
    parser.add_argument("--batch", type=int, default=100, help="Events per batch body (default 100)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="conduit-ingest-") as var:
        # DEBUG off, as deployed and as the floor runs (DEBUG records every query's SQL).
        env = {
            **os.environ,
            "CONDUIT_VAR_DIR": var,
            "DATABASE_URL": f"sqlite:///{var}/conduit.sqlite3",
            "DEBUG": "false",
            "BENCH_GITHUB_SECRET": GITHUB_SECRET,
        }
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.pop("DJANGO_SETTINGS_MODULE", None)
        token = setup_conduit(env)

        port = free_port()
        floor_env = {**env, "FLOOR_DB": f"{var}/floor.sqlite3"}
        floor = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "floor_app:application"],
            cwd=ROOT / "bench" / "floor",
            env=floor_env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_listening(port, floor)
            load(port, token, clients=args.clients, seconds=1, run="floor-warm")
            floor_figures = load(port, token, clients=args.clients, seconds=args.seconds, run="floor")
            floor_github = load(
                port, token, clients=args.clients, seconds=args.seconds, run="floor-github", github=True
            )
        finally:
            stop(floor)

        port = free_port()
        serve = [sys.executable, "manage.py", "serve", "--port", str(port)]
        if args.workers:
            serve += ["--workers", str(args.workers)]
        if args.no_router:
            serve.append("--no-router")
        # The server's log goes to a file: a pipe nobody reads fills up and blocks the server.
        log = open(Path(var) / "serve.log", "wb")  # noqa: SIM115 - closed below, after the server
        server = subprocess.Popen(serve, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_listening(port, server)
            load(port, token, clients=args.clients, seconds=1, run="warm")
            cpu = cpu_by_role(server.pid)
            single = load(port, token, clients=args.clients, seconds=args.seconds, run="one")
            between = cpu_by_role(server.pid)
            batches = load(
                port, token, clients=args.clients, seconds=args.seconds, run="batch", batch=args.batch
            )
            # The route loop is still routing the batches: its CPU is counted once it is done.
            time.sleep(2)
            after = cpu_by_role(server.pid)
            receiver = load(
                port, token, clients=args.clients, seconds=args.seconds, run="github", github=True
            )
            time.sleep(2)
            received = cpu_by_role(server.pid)
        finally:
            stop(server)
            log.close()

    workers = f", serve --workers {args.workers}" if args.workers else ""
    workers += ", serve --no-router" if args.no_router else ""
    print(
        f"POST /api/events, {args.clients} clients, SQLite synchronous=FULL, {args.seconds:g} s each{workers}"
    )
    show("floor (one INSERT behind daphne)", floor_figures)
    show("Conduit (manage.py serve)", single)
    print(f"ratio to the floor: {single['rps'] / floor_figures['rps']:.2f}")
    print("  " + cpu_per_event(cpu, between, single["eps"] * args.seconds))
    print(
        f"batches of {args.batch}: {batches['eps']:7.0f} Events/s "
        f"({batches['rps']:.1f} requests/s, p50 {batches['p50']:.0f} ms, p99 {batches['p99']:.0f} ms)"
    )
    print("  " + cpu_per_event(between, after, batches["eps"] * args.seconds))
    size = len(github_delivery(0, "size")[0])
    print(f"POST /hooks/github, signed GitHub pull_request deliveries of {size:,} bytes")
    show("floor (one INSERT behind daphne)", floor_github)
    show("Conduit's github receiver", receiver)
    print(
        f"receiver's ratio to the floor: {receiver['rps'] / floor_github['rps']:.2f} "
        f"(the plain API's: {single['rps'] / floor_figures['rps']:.2f})"
    )
    print("  " + cpu_per_event(after, received, receiver["eps"] * args.seconds))


if __name__ == "__main__":
    main()
