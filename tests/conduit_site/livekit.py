"""Helpers of the live-update tests: a reader that records what it would send, the console
served in a process of its own, and raw websockets to it."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from conduit_site.live import LiveReader
from tests.support import ROOT, child_env, free_port


class RecordingReader(LiveReader):
    """A :class:`LiveReader` whose passes run in the test (``step()``) and whose messages are
    recorded instead of sent: ``sent`` holds, per pass that sent, the groups and the position."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[list[str], int]] = []
        self.loop = asyncio.new_event_loop()

    def listen(self, *groups: str) -> None:
        """Groups a websocket of this process joined (no thread: the test runs the passes)."""
        with self._lock:
            self._groups.update(groups)
            self._loop = self.loop

    def _send(self, loop, groups, position) -> None:
        self.sent.append((list(groups), position))
        self.messages += len(groups)

    def close(self) -> None:
        self.loop.close()


# --- a console served in a process of its own, and raw websockets to it ---------------------------


@contextlib.contextmanager
def served_console(var_dir: Path, *, stderr_path: Path | None = None) -> Iterator[int]:
    """The console under daphne, as ``manage.py serve`` runs it, in a process of its own on the
    test database (its var folder ``var_dir``); yields its port. Its stderr goes to
    ``stderr_path`` (default: ``var_dir/daphne.log``)."""
    port = free_port()
    log = (stderr_path or var_dir / "daphne.log").open("w")
    env = child_env(CONDUIT_VAR_DIR=str(var_dir), LOG_LEVEL="WARNING")
    env.pop("REDIS_URL", None)
    server = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "conduit_site.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "daphne did not start"
                time.sleep(0.2)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=10)
        log.close()


def session_cookie(client) -> str:
    """The ``Cookie`` header of a signed-in test client (the server shares the database)."""
    return f"sessionid={client.cookies['sessionid'].value}"


def open_websocket(port: int, path: str, cookie: str) -> socket.socket:
    """A websocket to ``path`` opened on a raw socket (the handshake answered ``101``)."""
    sock = socket.create_connection(("127.0.0.1", port))
    origin = f"127.0.0.1:{port}"
    lines = [
        f"GET {path} HTTP/1.1",
        f"Host: {origin}",
        f"Origin: http://{origin}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version: 13",
        f"Cookie: {cookie}",
    ]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    sock.settimeout(5)
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        assert chunk, head
        head += chunk
    assert head.startswith(b"HTTP/1.1 101 "), head
    return sock


def _read_exactly(sock: socket.socket, size: int, deadline: float) -> bytes:
    data = b""
    while len(data) < size:
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the server closed the websocket")
        data += chunk
    return data


def read_text(sock: socket.socket, timeout: float) -> str | None:
    """The next text frame the server sends within ``timeout`` seconds (``None``: none came).
    A close frame raises ``ConnectionError``."""
    deadline = time.monotonic() + timeout
    try:
        head = _read_exactly(sock, 2, deadline)
    except TimeoutError:
        return None
    length = head[1] & 0x7F
    if length == 126:
        length = int.from_bytes(_read_exactly(sock, 2, deadline + 5))
    elif length == 127:
        length = int.from_bytes(_read_exactly(sock, 8, deadline + 5))
    payload = _read_exactly(sock, length, deadline + 5)
    opcode = head[0] & 0x0F
    if opcode == 0x8:
        raise ConnectionError(f"the server closed the websocket: {payload!r}")
    return payload.decode() if opcode == 0x1 else read_text(sock, max(deadline - time.monotonic(), 0.001))


def read_until(sock: socket.socket, text: str, timeout: float) -> str | None:
    """The first frame within ``timeout`` seconds that contains ``text`` (``None``: none did)."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        frame = read_text(sock, left)
        if frame is not None and text in frame:
            return frame
    return None
