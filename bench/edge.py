"""Hostile clients against the web server as ``manage.py serve`` runs it: hostile bodies (the
answer, the time to answer, what the web process's memory grew by), slow clients (``/healthz``
meanwhile, and when they are dropped) and a viewer's flood of impact previews (an operator's
accept latency meanwhile).

    python bench/edge.py [--compare] [--only bodies|slow|impact] [--slow-clients 3000]
        [--header-timeout 20]
        [--max-seconds 120] [--previews 50] [--events 10000]

Bodies (``bodies``):

Starts ``manage.py serve --no-router --workers 1`` on a fresh SQLite database in a temporary
var folder (an operator with an API token), then sends, each on a new connection, to
``/hooks/github`` and to ``/api/events`` (with the token, and without one):

- a declared ``Content-Length`` of 1 GB, with no body after the headers;
- a chunked body of 100 MB, 64 KiB a chunk, until the server answers or closes.

Prints each answer's status, the seconds until it came, the bytes sent and the growth of the
web process's resident memory (``VmRSS`` of ``/proc/PID/status``). ``--compare`` then sends the
100 MB chunked bodies to plain daphne (``python -m daphne``, as served before), for the figures
without the edge.

Slow clients (``slow``): ``manage.py serve --no-router`` as the systemd unit runs it (its web
processes, one per CPU, with the unit's ``LimitNOFILE`` of 65,536 or the hard limit here if
lower) and a short ``CONDUIT_HEADER_TIMEOUT`` (``--header-timeout``, printed); this process
raises its own file limit with ``setrlimit``. ``--slow-clients`` connections each send the first
byte of a request, then one more byte every 10 s. While they are all connected, ``/healthz`` is
timed on new connections (the acceptance: under 1 s); then how many were dropped, and how long
after their first byte (the acceptance: after the header timeout, with 408 or a close).

Impact previews (``impact``): the same server, on a database of ``--events`` accepted Events all
in a scope that ``--previews // 10`` candidates change. One viewer sends ``--previews`` impact
previews at once (``GET /api/candidates/ID/impact?events=N``, spread over the candidates) and
polls the jobs it was given until they end (at most ``--max-seconds``, then it cancels them),
while an operator accepts an Event every 50 ms
through ``POST /api/events``: how the previews were answered (202 job, 429 refused), how long
the jobs took, and the operator's accept latency (the acceptance: p99 under 1 s).

No figure is asserted.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import resource
import select
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GIGABYTE = 1_000_000_000
CHUNKED_TOTAL = 100_000_000
PIECE = b"x" * 65536
# The systemd unit's open-file limit (deploy/systemd/conduit-web.service).
UNIT_NOFILE = 65536
# What a slow client trickles, one byte every TRICKLE_SECONDS.
SLOW_REQUEST = b"POST /hooks/github HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\n\r\n0123456789"
TRICKLE_SECONDS = 10


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise SystemExit(f"no VmRSS for process {pid}")


def status_of(data: bytes) -> str:
    line = data.split(b"\r\n", 1)[0]
    return line.decode("latin-1") if line else "(no answer)"


def read_answer(sock: socket.socket, seconds: float) -> bytes:
    sock.settimeout(seconds)
    try:
        return sock.recv(65536)
    except (TimeoutError, ConnectionError):
        return b""


def declared(port: int, path: str, headers: list[str], length: int) -> tuple[str, float, int]:
    """Headers declaring ``length`` bytes and no body: (status line, seconds, bytes sent)."""
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        request = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {length}", *headers]
        sock.sendall(("\r\n".join(request) + "\r\n\r\n").encode())
        answer = read_answer(sock, 30)
    return status_of(answer), time.perf_counter() - start, 0


def chunked(port: int, path: str, headers: list[str], total: int) -> tuple[str, float, int]:
    """A chunked body of up to ``total`` bytes, sent until the server answers or closes."""
    start = time.perf_counter()
    chunk = b"%x\r\n%s\r\n" % (len(PIECE), PIECE)
    sent = 0
    with socket.create_connection(("127.0.0.1", port)) as sock:
        request = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Transfer-Encoding: chunked", *headers]
        sock.sendall(("\r\n".join(request) + "\r\n\r\n").encode())
        try:
            while sent < total and not select.select([sock], [], [], 0)[0]:
                sock.sendall(chunk)
                sent += len(PIECE)
            if sent >= total:
                sock.sendall(b"0\r\n\r\n")
        except ConnectionError:
            pass
        answer = read_answer(sock, 60)
    return status_of(answer), time.perf_counter() - start, sent


def setup(env: dict[str, str]) -> str:
    """Migrate and create an operator with an API token; returns its secret."""
    script = (
        "from django.contrib.auth import get_user_model\n"
        "from django.db import transaction\n"
        "from causal.clock import system_clock\n"
        "from routing.access.roles import Role, role_assign_in_tx\n"
        "from routing.access.services import api_token_create\n"
        "with transaction.atomic():\n"
        "    user = get_user_model().objects.create_user('bench')\n"
        "    role_assign_in_tx(user=user, role=Role.OPERATOR)\n"
        "print(api_token_create(user=user, name='bench', clock=system_clock).secret)\n"
    )
    run = [sys.executable, "manage.py"]
    subprocess.run([*run, "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    done = subprocess.run([*run, "shell", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(done.stderr)
    return done.stdout.strip().splitlines()[-1]


def wait_listening(port: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit("the server exited")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("the server did not listen")


def measure(port: int, web_pid: int, cases: list[tuple[str, str, list[str], object, int]]) -> None:
    for name, path, headers, send, size in cases:
        before = rss_mib(web_pid)
        status, seconds, sent = send(port, path, headers, size)
        time.sleep(0.5)  # what the process still does with the body after answering
        grown = rss_mib(web_pid) - before
        print(
            f"{name:44s} {status:34s} {seconds * 1000:8.1f} ms  sent {sent / 1e6:7.1f} MB  "
            f"RSS {before:6.1f} MiB, +{grown:6.1f} MiB"
        )


def raise_file_limit(wanted: int) -> int:
    """Raise this process's open-file limit to ``wanted`` (at most the hard limit); the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft < limit:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def unit_limits() -> None:
    """In the server's process before it starts: the unit's ``LimitNOFILE``."""
    raise_file_limit(UNIT_NOFILE)


def start_server(env: dict[str, str], var: str, *extra: str) -> tuple[subprocess.Popen, int, object]:
    port = free_port()
    serve = [
        sys.executable,
        "manage.py",
        "serve",
        "--no-router",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *extra,
    ]
    log = open(Path(var) / "serve.log", "ab")  # noqa: SIM115 - closed by stop_server
    server = subprocess.Popen(
        serve, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=unit_limits
    )
    wait_listening(port, server)
    return server, port, log


def stop_server(server: subprocess.Popen, log) -> None:
    server.send_signal(signal.SIGINT)
    server.wait(timeout=60)
    log.close()


def web_processes(server: subprocess.Popen) -> list[str]:
    """The server's web processes, once as many have started as ``serve`` starts (one per CPU)."""
    expected = min(os.process_cpu_count() or 1, 4)
    deadline = time.monotonic() + 30
    while True:
        found = subprocess.run(
            ["pgrep", "-P", str(server.pid)], capture_output=True, text=True
        ).stdout.split()
        if len(found) >= expected or time.monotonic() > deadline:
            time.sleep(1)  # each listening
            return found
        time.sleep(0.2)


def healthz(port: int) -> tuple[int, float]:
    """``GET /healthz`` on a new connection: (status, seconds)."""
    start = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", "/healthz")
        status = connection.getresponse().status
    except (OSError, http.client.HTTPException):
        status = 0
    finally:
        connection.close()
    return status, time.perf_counter() - start


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def slow_clients(env: dict[str, str], var: str, clients: int, header_timeout: float) -> None:
    """``clients`` slow clients, ``/healthz`` meanwhile, and when they are dropped."""
    limit = raise_file_limit(clients + 1024)
    env = {**env, "CONDUIT_HEADER_TIMEOUT": str(header_timeout)}
    server, port, log = start_server(env, var)
    try:
        workers = web_processes(server)
        nofile = [
            line.split()[3]
            for pid in workers
            for line in Path(f"/proc/{pid}/limits").read_text().splitlines()
            if line.startswith("Max open files")
        ]
        print(
            f"slow clients: {clients} against manage.py serve --no-router ({len(workers)} web processes, "
            f"open files {', '.join(nofile)}; this process {limit}), CONDUIT_HEADER_TIMEOUT={header_timeout:g} s"
        )
        selector = selectors.DefaultSelector()
        dropped: list[tuple[float, bytes]] = []

        def reap(timeout: float) -> None:
            """Note the clients the server has dropped (an answer, or the connection closed)."""
            for key, _ in selector.select(timeout=timeout):
                try:
                    answer = key.fileobj.recv(4096)
                except OSError:
                    answer = b""
                dropped.append((time.monotonic() - key.data[1], answer))
                selector.unregister(key.fileobj)
                key.fileobj.close()

        started = time.perf_counter()
        refused = 0
        for index in range(clients):
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=30)
                sock.sendall(SLOW_REQUEST[:1])
            except OSError:
                refused += 1
                continue
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ, [index, time.monotonic(), 1])
            if index % 50 == 0:
                reap(0)
        connected = clients - refused
        print(
            f"  connected {connected} (refused {refused}) in {time.perf_counter() - started:.1f} s, "
            "each sent its first byte"
        )
        reap(0)
        holding = len(selector.get_map())
        checks = [healthz(port) for _ in range(10)]
        times = [seconds for _, seconds in checks]
        statuses = sorted({status for status, _ in checks})
        print(
            f"  /healthz with {holding} slow clients connected: status {statuses}, "
            f"median {statistics.median(times) * 1000:.1f} ms, max {max(times) * 1000:.1f} ms (10 requests)"
        )
        next_byte = time.monotonic() + TRICKLE_SECONDS
        deadline = time.monotonic() + header_timeout + 2 * TRICKLE_SECONDS
        while selector.get_map() and time.monotonic() < deadline:
            reap(0.2)
            if time.monotonic() >= next_byte:
                for key in list(selector.get_map().values()):
                    position = key.data[2]
                    try:
                        key.fileobj.send(SLOW_REQUEST[position : position + 1])
                        key.data[2] += 1
                    except OSError:
                        pass  # the server dropped it: its close is read below
                next_byte += TRICKLE_SECONDS
        still = len(selector.get_map())
        for key in list(selector.get_map().values()):
            key.fileobj.close()
        after = [seconds for seconds, _ in dropped]
        answered = sum(1 for _, answer in dropped if answer.startswith(b"HTTP/1.1 408"))
        if after:
            print(
                f"  dropped {len(dropped)} of {connected} ({answered} answered 408, the others closed): "
                f"after {min(after):.1f} s to {max(after):.1f} s from their first byte "
                f"(median {statistics.median(after):.1f} s); still open after "
                f"{header_timeout + 2 * TRICKLE_SECONDS:g} s: {still}"
            )
        else:
            print(f"  none dropped; still open: {still}")
        status, seconds = healthz(port)
        print(f"  /healthz after: status {status} in {seconds * 1000:.1f} ms")
    finally:
        stop_server(server, log)


IMPACT_ROUTES = 20


def impact_document(drop_every: int = 0) -> str:
    """One scope of match routes; with ``drop_every``, every Nth route from the first left out."""
    lines = ["version: 1", "scopes:", "  - path: bench", "    bindings:", "      agent: {}", "    routes:"]
    for i in range(IMPACT_ROUTES):
        if drop_every and i % drop_every == 0:
            continue
        lines += [
            f"      - slot: r{i:02d}",
            "        handler: match",
            f'        params: {{type: "t{i}.*", keys: ["k{i}:{{data.n}}"]}}',
            "        binding: agent",
            "        policy: queue",
        ]
    return "\n".join(lines) + "\n"


def impact_setup(env: dict[str, str], events: int, candidates: int) -> tuple[str, str, list[int]]:
    """A viewer and an operator with API tokens, a live configuration, ``candidates`` candidates
    and ``events`` accepted Events: (viewer's secret, operator's secret, candidate ids)."""
    script = f"""
import json, sys
sys.path.insert(0, {str(ROOT / "bench")!r})
from django.contrib.auth import get_user_model
from django.db import transaction
from causal.clock import system_clock
from edge import impact_document
from routing.acceptance.services import event_accept
from routing.access.roles import Role, role_assign_in_tx
from routing.access.services import api_token_create
from routing.config.services import config_apply, config_candidate
secrets = {{}}
for name, role in (("viewer", Role.VIEWER), ("operator", Role.OPERATOR)):
    with transaction.atomic():
        user = get_user_model().objects.create_user(name)
        role_assign_in_tx(user=user, role=role)
    secrets[name] = api_token_create(user=user, name="bench", clock=system_clock).secret
config_apply(document=impact_document(), clock=system_clock, created_by="bench")
ids = [
    config_candidate(document=impact_document(2 + n % 3), clock=system_clock, created_by="bench").pk
    for n in range({candidates})
]
for n in range({events}):
    event_accept(
        payload={{"specversion": "1.0", "id": f"e{{n}}", "source": "bench", "type": f"t{{n % {IMPACT_ROUTES}}}.x",
                 "scope": "bench", "data": {{"n": n // 60}}}},
        clock=system_clock,
    )
print(json.dumps([secrets["viewer"], secrets["operator"], ids]))
"""
    run = [sys.executable, "manage.py"]
    subprocess.run([*run, "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    done = subprocess.run([*run, "shell", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(done.stderr)
    viewer, operator, ids = json.loads(done.stdout.strip().splitlines()[-1])
    return viewer, operator, ids


def api_call(
    port: int, method: str, path: str, secret: str, body: dict | None = None
) -> tuple[int, dict, float, dict]:
    """One API request on a new connection: (status, JSON body, seconds, headers)."""
    start = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
    try:
        connection.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        response = connection.getresponse()
        data = response.read()
        answer = json.loads(data) if data else {}
        return response.status, answer, time.perf_counter() - start, dict(response.getheaders())
    finally:
        connection.close()


def impact_previews(env: dict[str, str], var: str, previews: int, events: int, max_seconds: float) -> None:
    """A viewer's ``previews`` impact previews at once while an operator accepts Events."""
    candidates = max(1, previews // 10)
    started = time.perf_counter()
    viewer, operator, ids = impact_setup(env, events, candidates)
    print(
        f"impact previews: {events} Events accepted, {candidates} candidates "
        f"(set up in {time.perf_counter() - started:.0f} s)"
    )
    server, port, log = start_server(env, var)
    try:
        stop = threading.Event()
        latencies: list[float] = []
        accept_statuses: dict[int, int] = {}

        def operator_accepts() -> None:
            n = 0
            while not stop.is_set():
                event = {
                    "specversion": "1.0",
                    "id": f"op{n}",
                    "source": "operator",
                    "type": "t1.x",
                    "scope": "bench",
                }
                status, _, seconds, _ = api_call(port, "POST", "/api/events", operator, event)
                latencies.append(seconds)
                accept_statuses[status] = accept_statuses.get(status, 0) + 1
                n += 1
                stop.wait(0.05)

        # Warm both web processes up (their first requests load the app) before anything counts.
        warm, deadline = 0, time.monotonic() + 120
        while warm < 10 and time.monotonic() < deadline:
            status, _, seconds, _ = api_call(port, "GET", "/api/events?limit=1", operator)
            warm = warm + 1 if seconds < 0.5 else 0
        accepting = threading.Thread(target=operator_accepts)
        accepting.start()
        time.sleep(10)
        quiet = list(latencies)
        begun = time.perf_counter()
        with ThreadPoolExecutor(max_workers=previews) as pool:
            answers = list(
                pool.map(
                    lambda n: api_call(
                        port, "GET", f"/api/candidates/{ids[n % len(ids)]}/impact?events={events}", viewer
                    ),
                    range(previews),
                )
            )
        answered = time.perf_counter() - begun
        counts: dict[int, int] = {}
        for status, _, _, _ in answers:
            counts[status] = counts.get(status, 0) + 1
        retry = sorted({headers.get("Retry-After", "") for status, _, _, headers in answers if status == 429})
        jobs = sorted({body["id"] for status, body, _, _ in answers if status == 202})
        print(
            f"  {previews} previews at once (events={events}) answered in {answered:.2f} s: "
            + ", ".join(f"{count} × {status}" for status, count in sorted(counts.items()))
            + f"; {len(jobs)} distinct jobs; Retry-After {retry}"
        )
        during_start = len(latencies)
        ended: dict[int, tuple[str, float, int, int]] = {}
        while len(ended) < len(jobs) and time.perf_counter() - begun < max_seconds:
            for job in jobs:
                if job in ended:
                    continue
                _, body, _, _ = api_call(port, "GET", f"/api/impact/{job}", viewer)
                if body.get("status") != "running":
                    ended[job] = (body["status"], time.perf_counter() - begun, body["traced"], body["total"])
            time.sleep(1)
        during = latencies[during_start:]
        stop.set()
        accepting.join()
        for job in jobs:
            if job not in ended:
                _, body, _, _ = api_call(port, "DELETE", f"/api/impact/{job}", viewer)
                print(
                    f"  job {job}: still running after {max_seconds:g} s ({body['traced']} of {body['total']}): cancelled"
                )
        for job, (status, seconds, traced, total) in sorted(ended.items()):
            print(f"  job {job}: {status} after {seconds:.1f} s ({traced} of {total} Events looked at)")
        print(
            f"  operator's accepts before the previews: {len(quiet)}, p50 {percentile(quiet, 0.5) * 1000:.1f} ms, "
            f"p99 {percentile(quiet, 0.99) * 1000:.1f} ms"
        )
        print(
            f"  operator's accepts while the jobs ran: {len(during)}, p50 {percentile(during, 0.5) * 1000:.1f} ms, "
            f"p99 {percentile(during, 0.99) * 1000:.1f} ms, max {max(during, default=0) * 1000:.1f} ms; "
            f"statuses {dict(sorted(accept_statuses.items()))}"
        )
    finally:
        stop_server(server, log)


def bodies(env: dict[str, str], var: str, token: str, compare: bool) -> None:
    auth = [f"Authorization: Bearer {token}", "Content-Type: application/json"]
    cases = [
        ("1 GB declared, /hooks/github", "/hooks/github", [], declared, GIGABYTE),
        ("1 GB declared, /api/events with a token", "/api/events", auth, declared, GIGABYTE),
        ("50 MB declared, /api/events without a token", "/api/events", [], declared, 50_000_000),
        ("100 MB chunked, /hooks/github", "/hooks/github", [], chunked, CHUNKED_TOTAL),
        ("100 MB chunked, /api/events with a token", "/api/events", auth, chunked, CHUNKED_TOTAL),
        ("100 MB chunked, /api/events without a token", "/api/events", [], chunked, CHUNKED_TOTAL),
    ]
    server, port, log = start_server(env, var, "--workers", "1")
    try:
        web = subprocess.run(["pgrep", "-P", str(server.pid)], capture_output=True, text=True, check=True)
        print("manage.py serve (conduit_site.edge):")
        measure(port, int(web.stdout.split()[0]), cases)
    finally:
        stop_server(server, log)
    if not compare:
        return
    port = free_port()
    plain = [
        sys.executable,
        "-m",
        "daphne",
        "-b",
        "127.0.0.1",
        "-p",
        str(port),
        "conduit_site.asgi:application",
    ]
    daphne = subprocess.Popen(plain, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listening(port, daphne)
        print("plain daphne (no edge):")
        measure(port, daphne.pid, [case for case in cases if case[3] is chunked])
    finally:
        daphne.send_signal(signal.SIGINT)
        daphne.wait(timeout=30)


def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compare", action="store_true", help="also send the chunked bodies to plain daphne")
    parser.add_argument(
        "--only", choices=["bodies", "slow", "impact"], help="run one part only (default: all three)"
    )
    parser.add_argument("--slow-clients", type=int, default=3000, help="slow clients at once (default 3000)")
    parser.add_argument(
        "--header-timeout",
        type=float,
        default=20.0,
        help="CONDUIT_HEADER_TIMEOUT of the slow part (default 20 s: longer than connecting them all takes)",
    )
    parser.add_argument("--previews", type=int, default=50, help="impact previews at once (default 50)")
    parser.add_argument(
        "--events", type=int, default=10000, help="Events each preview looks at (default 10000)"
    )
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=120,
        help="how long the operator accepts while the jobs run, at most; then unfinished jobs are cancelled",
    )
    args = parser.parse_args()
    if (
        args.slow_clients < 1
        or args.previews < 1
        or not 1 <= args.events <= 10000
        or args.header_timeout <= 0
    ):
        parser.error(
            "--slow-clients and --previews must be positive, --events 1 to 10000, --header-timeout > 0"
        )
    parts = [args.only] if args.only else ["bodies", "slow", "impact"]
    for part in parts:
        with tempfile.TemporaryDirectory(prefix="conduit-edge-") as var:
            env = {
                **os.environ,
                "CONDUIT_VAR_DIR": var,
                "DATABASE_URL": f"sqlite:///{var}/conduit.sqlite3",
                "DEBUG": "false",
                "LOG_LEVEL": "WARNING",
            }
            env.pop("DJANGO_SETTINGS_MODULE", None)
            if part == "bodies":
                bodies(env, var, setup(env), args.compare)
            elif part == "slow":
                subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
                slow_clients(env, var, args.slow_clients, args.header_timeout)
            else:
                impact_previews(env, var, args.previews, args.events, args.max_seconds)


if __name__ == "__main__":
    main()
