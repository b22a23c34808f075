"""The web server as ``manage.py serve`` runs it (``conduit_site.edge``) refuses bodies over
their path's limit, and API bodies without a live token, before reading them: a real ``serve``,
raw sockets, and the web process's memory read from ``/proc``.

Without the edge, daphne reads a declared body whole before the application sees the request:
a client that declares a large body and sends none gets no answer at all, and one that sends
it grows the process by its size."""

from __future__ import annotations

import select
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone

from tests.conduit_site.livekit import open_websocket
from tests.routing.factories import api_token_with_secret, user_with_role
from tests.support import ROOT, child_env, free_port

GIGABYTE = 1_000_000_000
MEGABYTE = 1_000_000
RECEIVER_LIMIT = 100_000  # CONDUIT_MAX_RECEIVER_BODY_BYTES of the served process
API_LIMIT = 2_621_440  # CONDUIT_MAX_API_BODY_BYTES by default (DATA_UPLOAD_MAX_MEMORY_SIZE)
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
HEADER_TIMEOUT = 1.0  # CONDUIT_HEADER_TIMEOUT of the strict process
IDLE_TIMEOUT = 2.0  # its CONDUIT_IDLE_TIMEOUT
MAX_CONNECTIONS = 4  # its CONDUIT_MAX_CONNECTIONS
UNKNOWN_TOKEN = "cdt_0badc0de_" + "A" * 43


@dataclass(frozen=True)
class Answer:
    status: int | None
    seconds: float
    head: bytes
    body: bytes
    sent: int = 0


@dataclass
class Served:
    port: int
    web_pid: int

    def rss_kib(self) -> int:
        """The web process's resident memory (``VmRSS``), in KiB."""
        for line in Path(f"/proc/{self.web_pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")


def _parse(data: bytes) -> tuple[int | None, bytes, bytes]:
    head, _, body = data.partition(b"\r\n\r\n")
    try:
        return int(head.split(b" ", 2)[1]), head, body
    except (IndexError, ValueError):
        return None, head, body


def _read_answer(sock: socket.socket, deadline: float) -> bytes:
    data = b""
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        except ConnectionError:
            break
        if not chunk:
            break
        data += chunk
        status, head, body = _parse(data.removeprefix(CONTINUE))
        if status is not None and status != 100 and b"Content-Length:" in head:
            length = int(head.split(b"Content-Length:")[1].split(b"\r\n")[0])
            if len(body) >= length:
                break
    return data


def declared(served: Served, path: str, length: int, *headers: str, body: bytes = b"") -> Answer:
    """Send a request declaring a ``length``-byte body, then only ``body``; the answer within 5 s."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", served.port)) as sock:
        lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {length}", *headers]
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        data = _read_answer(sock, start + 5)
    status, head, rest = _parse(data)
    return Answer(status, time.monotonic() - start, head, rest)


def healthz(served: Served, timeout: float = 5) -> int | None:
    """The status of ``GET /healthz`` on a connection of its own."""
    with socket.create_connection(("127.0.0.1", served.port), timeout=timeout) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        return _parse(_read_answer(sock, time.monotonic() + timeout))[0]


def closed_after(sock: socket.socket, limit: float) -> tuple[float | None, bytes]:
    """Seconds until the server closes ``sock`` (None if still open after ``limit``), and what
    it sent meanwhile."""
    start = time.monotonic()
    data = b""
    while time.monotonic() < start + limit:
        sock.settimeout(max(0.01, start + limit - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        except ConnectionError:
            return time.monotonic() - start, data
        if not chunk:
            return time.monotonic() - start, data
        data += chunk
    return None, data


def chunked(served: Served, path: str, total: int, *headers: str) -> Answer:
    """Send a chunked body of up to ``total`` bytes, 64 KiB a chunk, until the server answers
    or closes (at most 30 s)."""
    start = time.monotonic()
    piece = b"x" * 65536
    chunk = b"%x\r\n%s\r\n" % (len(piece), piece)
    sent = 0
    data = b""
    with socket.create_connection(("127.0.0.1", served.port)) as sock:
        lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Transfer-Encoding: chunked", *headers]
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        try:
            while sent < total and time.monotonic() < start + 30:
                readable, _, _ = select.select([sock], [], [], 0)
                if readable:
                    break
                sock.sendall(chunk)
                sent += len(piece)
            else:
                sock.sendall(b"0\r\n\r\n")
        except ConnectionError:
            pass
        data = _read_answer(sock, time.monotonic() + 5)
    status, head, rest = _parse(data)
    return Answer(status, time.monotonic() - start, head, rest, sent)


@contextmanager
def serving(tmp_path_factory, **env: str):
    """``serve --no-router --workers 1`` on the test database with ``env`` added."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--no-router", "--workers", "1", "--port", str(port)],
        cwd=ROOT,
        env=child_env(CONDUIT_VAR_DIR=str(tmp_path_factory.mktemp("edge-var")), LOG_LEVEL="WARNING", **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert "Conduit console" in server.stdout.readline()
        children = subprocess.run(
            ["pgrep", "-P", str(server.pid)], capture_output=True, text=True, check=True
        ).stdout.split()
        assert len(children) == 1, children
        yield Served(port=port, web_pid=int(children[0]))
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()


@pytest.fixture(scope="module")
def served(django_db_setup, tmp_path_factory):
    """A web process with receivers limited to 100,000 bytes."""
    with serving(tmp_path_factory, CONDUIT_MAX_RECEIVER_BODY_BYTES=str(RECEIVER_LIMIT)) as process:
        yield process


@pytest.fixture(scope="module")
def strict(django_db_setup, tmp_path_factory):
    """A web process with short connection limits: a request's headers and body within
    :data:`HEADER_TIMEOUT` s, :data:`IDLE_TIMEOUT` s idle, :data:`MAX_CONNECTIONS` connections."""
    with serving(
        tmp_path_factory,
        CONDUIT_HEADER_TIMEOUT=str(HEADER_TIMEOUT),
        CONDUIT_IDLE_TIMEOUT=str(IDLE_TIMEOUT),
        CONDUIT_MAX_CONNECTIONS=str(MAX_CONNECTIONS),
    ) as process:
        yield process


@pytest.fixture
def api_secret(transactional_db) -> str:
    return api_token_with_secret(user__permissions=("routing.accept_event",))[1]


@pytest.mark.parametrize("path", ["/hooks/github", "/api/events"])
def test_a_declared_gigabyte_is_refused_at_once_without_its_body(served, api_secret, path):
    before = served.rss_kib()
    answer = declared(served, path, GIGABYTE, f"Authorization: Bearer {api_secret}")
    assert answer.status == 413, answer
    assert answer.seconds < 1
    assert b"Connection: close" in answer.head
    limit = RECEIVER_LIMIT if path.startswith("/hooks/") else API_LIMIT
    assert f"the limit is {limit} bytes".encode() in answer.body
    assert served.rss_kib() - before < 20 * 1024


@pytest.mark.parametrize(("path", "limit"), [("/hooks/github", RECEIVER_LIMIT), ("/api/events", API_LIMIT)])
def test_a_chunked_body_is_cut_off_once_it_passes_the_limit(served, api_secret, path, limit):
    before = served.rss_kib()
    answer = chunked(served, path, 100 * MEGABYTE, f"Authorization: Bearer {api_secret}")
    assert answer.status == 413, answer
    assert b"Connection: close" in answer.head
    # Refused as the limit was passed: what was sent beyond it is what the sockets' buffers held
    # (a few MB on loopback; Linux lets a receive buffer grow to 32 MiB). Unbounded, all 100 MB.
    assert answer.sent < limit + 40 * MEGABYTE
    assert answer.seconds < 10
    assert served.rss_kib() - before < 20 * 1024


@pytest.mark.parametrize(
    ("authorization", "challenge"),
    [
        ((), b'WWW-Authenticate: Bearer realm="conduit"\r\n'),
        (("Authorization: Basic b3A6cGFzcw==",), b'error="invalid_token"'),
        (("Authorization: Bearer not-a-token",), b'error="invalid_token"'),
        ((f"Authorization: Bearer {UNKNOWN_TOKEN}",), b'error="invalid_token"'),
    ],
)
def test_an_api_body_without_a_live_token_is_refused_before_it_is_read(
    served, transactional_db, authorization, challenge
):
    answer = declared(served, "/api/events", 50 * MEGABYTE, *authorization)
    assert answer.status == 401, answer
    assert answer.seconds < 1
    assert challenge in answer.head + b"\r\n"
    assert b'"error": "unauthorized"' in answer.body


def test_a_revoked_token_is_refused_before_the_body_is_read(served, transactional_db):
    _, secret = api_token_with_secret(user__permissions=("routing.accept_event",), revoked_at=timezone.now())
    answer = declared(served, "/api/events", 50 * MEGABYTE, f"Authorization: Bearer {secret}")
    assert answer.status == 401, answer


def test_an_api_body_with_a_live_token_reaches_the_api(served, api_secret):
    """A body under the limit with a live token is read and answered by the API itself (here:
    not an Event, 400): sent with the headers, or after the ``100 Continue`` the client asked
    for, which comes once the token is found live (looked up, then remembered)."""
    headers = (f"Authorization: Bearer {api_secret}", "Content-Type: application/json")
    for _ in range(2):
        answer = declared(served, "/api/events", 2, *headers, body=b"{}")
        assert answer.status == 400, answer
        assert b'"error": "invalid_event"' in answer.body
    _, fresh = api_token_with_secret(user__permissions=("routing.accept_event",))
    for secret in (fresh, fresh):
        with socket.create_connection(("127.0.0.1", served.port)) as sock:
            request = [
                "POST /api/events HTTP/1.1",
                "Host: 127.0.0.1",
                "Content-Length: 2",
                f"Authorization: Bearer {secret}",
                "Content-Type: application/json",
                "Expect: 100-continue",
            ]
            sock.sendall(("\r\n".join(request) + "\r\n\r\n").encode())
            sock.settimeout(5)
            assert sock.recv(len(CONTINUE)) == CONTINUE
            sock.sendall(b"{}")
            status, _, body = _parse(_read_answer(sock, time.monotonic() + 5))
        assert status == 400, body
        assert b'"error": "invalid_event"' in body


def test_the_consoles_forms_are_held_to_the_django_upload_limit(served):
    answer = declared(served, "/accounts/login/", API_LIMIT + 1)
    assert answer.status == 413, answer
    assert b"(DATA_UPLOAD_MAX_MEMORY_SIZE)" in answer.body
    # A request without a body is served as before.
    assert healthz(served) == 200


def test_a_client_trickling_its_headers_is_dropped_after_the_header_timeout(strict):
    """One header byte every 0.2 s (each byte resets the idle timeout) is answered 408 and
    closed once the request is :data:`HEADER_TIMEOUT` s old, while ``/healthz`` answers."""
    request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200 + b"\r\n\r\n"
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", strict.port)) as sock:
        dropped = False
        for byte in request:
            try:
                sock.sendall(bytes([byte]))
            except ConnectionError:
                dropped = True
                break
            readable, _, _ = select.select([sock], [], [], 0.2)
            if readable:
                dropped = True
                break
            assert healthz(strict, timeout=1) == 200
            if time.monotonic() > start + 5:
                break
        assert dropped, "still open after 5 s"
        seconds, data = closed_after(sock, 2)
    assert seconds is not None
    assert HEADER_TIMEOUT <= time.monotonic() - start < HEADER_TIMEOUT + 1.5
    assert data.startswith(b"HTTP/1.1 408 "), data
    assert b"CONDUIT_HEADER_TIMEOUT" in data


def test_a_kept_alive_connection_is_closed_after_the_idle_timeout(strict):
    """Answered at once and kept alive, then closed :data:`IDLE_TIMEOUT` s later; the header
    timeout, shorter, does not apply before the next request's first byte."""
    with socket.create_connection(("127.0.0.1", strict.port)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        seconds, data = closed_after(sock, IDLE_TIMEOUT + 3)
    status, head, _ = _parse(data)
    assert status == 200
    assert b"Connection: close" not in head
    assert seconds is not None, "still open"
    assert IDLE_TIMEOUT - 0.2 <= seconds < IDLE_TIMEOUT + 1


def test_past_the_connection_cap_a_new_connection_is_refused_until_some_close(strict):
    held = [socket.create_connection(("127.0.0.1", strict.port)) for _ in range(MAX_CONNECTIONS)]
    try:
        time.sleep(0.2)  # accepted by the server
        with socket.create_connection(("127.0.0.1", strict.port)) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            status, head, body = _parse(_read_answer(sock, time.monotonic() + 5))
            assert closed_after(sock, 3)[0] is not None
        assert status == 503, head
        assert b"Retry-After: 5" in head
        assert b"Connection: close" in head
        assert b"CONDUIT_MAX_CONNECTIONS" in body
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + 3
    while healthz(strict) != 200:
        assert time.monotonic() < deadline, "still refused once the connections closed"
        time.sleep(0.05)


def frame_opcodes(data: bytes) -> list[int]:
    """The opcodes of the (unmasked) frames a server sent."""
    opcodes = []
    while len(data) >= 2:
        length, at = data[1] & 0x7F, 2
        if length == 126:
            length, at = int.from_bytes(data[2:4]), 4
        elif length == 127:
            length, at = int.from_bytes(data[2:10]), 10
        opcodes.append(data[0] & 0x0F)
        data = data[at + length :]
    return opcodes


def test_open_websockets_outlive_both_timeouts_and_count_towards_the_connection_cap(strict, transactional_db):
    client = Client()
    client.force_login(user_with_role("viewer"))
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    sockets = [open_websocket(strict.port, "/ws/events/", cookie) for _ in range(MAX_CONNECTIONS)]
    try:
        # Neither timeout cuts them (the idle one, the longer, has passed once over).
        for sock in sockets:
            seconds, data = closed_after(sock, IDLE_TIMEOUT + 0.5 if sock is sockets[0] else 0.05)
            assert seconds is None, "a websocket was closed"
            assert 0x8 not in frame_opcodes(data), data
        # They hold the process's connections: one more is refused.
        with socket.create_connection(("127.0.0.1", strict.port)) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert _parse(_read_answer(sock, time.monotonic() + 5))[0] == 503
    finally:
        for sock in sockets:
            sock.close()
    deadline = time.monotonic() + 3
    while healthz(strict) != 200:
        assert time.monotonic() < deadline, "still refused once the websockets closed"
        time.sleep(0.05)
