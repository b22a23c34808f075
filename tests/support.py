"""Helpers shared by tests: real processes on the test database, query plans."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

from asgiref.testing import ApplicationCommunicator
from django.conf import settings
from django.db import connection

ROOT = Path(settings.BASE_DIR)
CHILD_ENV_DROP = frozenset({"TEST_DATABASE_NAME", "PYTEST_CURRENT_TEST"})


def database_url() -> str:
    """A DATABASE_URL naming the database this test run uses (the test database)."""
    current = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{Path(current['NAME']).resolve()}"
    user = quote(current.get("USER") or "")
    password = quote(current.get("PASSWORD") or "")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = current.get("HOST") or "localhost"
    port = f":{current['PORT']}" if current.get("PORT") else ""
    return f"postgres://{auth}{host}{port}/{current['NAME']}"


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child process: this one's, on the test database."""
    env = {k: v for k, v in os.environ.items() if k not in CHILD_ENV_DROP}
    env.update({"DATABASE_URL": database_url(), "DJANGO_SETTINGS_MODULE": "conduit_site.settings"})
    env.update(extra)
    return env


def manage_command(*args: str) -> list[str]:
    return [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), *args]


def run_manage(
    *args: str, stdin: str | None = None, timeout: float = 120, **env: str
) -> subprocess.CompletedProcess:
    """Run ``manage.py ARGS`` in a new process on the test database."""
    return subprocess.run(
        manage_command(*args),
        input=stdin,
        capture_output=True,
        text=True,
        cwd=settings.BASE_DIR,
        env=child_env(**env),
        timeout=timeout,
        check=False,
    )


def query_plan(cursor, sql: str, params) -> str:
    """The plan the database gives ``sql`` (``EXPLAIN`` on PostgreSQL, ``EXPLAIN QUERY PLAN``
    on SQLite), one line per step, read through ``cursor``."""
    explain = "EXPLAIN " if connection.vendor == "postgresql" else "EXPLAIN QUERY PLAN "
    cursor.execute(explain + sql, params)
    return "\n".join(str(row[-1]) for row in cursor.fetchall())


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def demo_send_module():
    """``demo/send`` (a script without a suffix) as a module."""
    loader = importlib.machinery.SourceFileLoader("demo_send", str(ROOT / "demo" / "send"))
    spec = importlib.util.spec_from_loader("demo_send", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


async def asgi_get(path: str) -> tuple[int, dict[bytes, bytes]]:
    from conduit_site.asgi import application

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"localhost")],
        "client": ("127.0.0.1", 1),
        "server": ("localhost", 80),
    }
    communicator = ApplicationCommunicator(application, scope)
    await communicator.send_input({"type": "http.request", "body": b"", "more_body": False})
    start = await communicator.receive_output(timeout=10)
    while True:
        message = await communicator.receive_output(timeout=10)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            break
    await communicator.wait(timeout=10)
    return start["status"], {name.lower(): value for name, value in start["headers"]}
