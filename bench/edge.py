"""Hostile bodies against the web server as ``manage.py serve`` runs it: the answer, the time to
answer and what the web process's memory grew by.

    python bench/edge.py [--compare]

Starts ``manage.py serve --no-router --workers 1`` on a fresh SQLite database in a temporary
var folder (an operator with an API token), then sends, each on a new connection, to
``/hooks/github`` and to ``/api/events`` (with the token, and without one):

- a declared ``Content-Length`` of 1 GB, with no body after the headers;
- a chunked body of 100 MB, 64 KiB a chunk, until the server answers or closes.

Prints each answer's status, the seconds until it came, the bytes sent and the growth of the
web process's resident memory (``VmRSS`` of ``/proc/PID/status``). ``--compare`` then sends the
100 MB chunked bodies to plain daphne (``python -m daphne``, as served before), for the figures
without the edge. No figure is asserted.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GIGABYTE = 1_000_000_000
CHUNKED_TOTAL = 100_000_000
PIECE = b"x" * 65536


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compare", action="store_true", help="also send the chunked bodies to plain daphne")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="conduit-edge-") as var:
        env = {
            **os.environ,
            "CONDUIT_VAR_DIR": var,
            "DATABASE_URL": f"sqlite:///{var}/conduit.sqlite3",
            "DEBUG": "false",
            "LOG_LEVEL": "WARNING",
        }
        env.pop("DJANGO_SETTINGS_MODULE", None)
        token = setup(env)
        auth = [f"Authorization: Bearer {token}", "Content-Type: application/json"]
        cases = [
            ("1 GB declared, /hooks/github", "/hooks/github", [], declared, GIGABYTE),
            ("1 GB declared, /api/events with a token", "/api/events", auth, declared, GIGABYTE),
            ("50 MB declared, /api/events without a token", "/api/events", [], declared, 50_000_000),
            ("100 MB chunked, /hooks/github", "/hooks/github", [], chunked, CHUNKED_TOTAL),
            ("100 MB chunked, /api/events with a token", "/api/events", auth, chunked, CHUNKED_TOTAL),
            ("100 MB chunked, /api/events without a token", "/api/events", [], chunked, CHUNKED_TOTAL),
        ]
        port = free_port()
        serve = [sys.executable, "manage.py", "serve", "--no-router", "--workers", "1", "--port", str(port)]
        log = open(Path(var) / "serve.log", "wb")  # noqa: SIM115 - closed below, after the server
        server = subprocess.Popen(serve, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_listening(port, server)
            web = subprocess.run(["pgrep", "-P", str(server.pid)], capture_output=True, text=True, check=True)
            print("manage.py serve (conduit_site.edge):")
            measure(port, int(web.stdout.split()[0]), cases)
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(timeout=30)
            log.close()
        if not args.compare:
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
        daphne = subprocess.Popen(
            plain, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            wait_listening(port, daphne)
            print("plain daphne (no edge):")
            measure(port, daphne.pid, [case for case in cases if case[3] is chunked])
        finally:
            daphne.send_signal(signal.SIGINT)
            daphne.wait(timeout=30)


if __name__ == "__main__":
    main()
