"""The README tour as a user meets it: ``manage.py serve`` (console, route loop, work loop) on
a fresh SQLite database with the demo configuration; the demo's Events are sent; the Work page,
open in Chromium, shows the demo Work run and complete live, without a reload; the failing
agent's Work is retried and then parked."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.conf import settings

from tests.support import free_port

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(settings.BASE_DIR)
PASSWORD = "demo-tour-password-42"


def manage(env: dict, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def open_when_listed(page, base: str, work_id: int) -> None:
    """Reload the Work list until the router has started Work ``work_id``, then open it."""
    deadline = time.monotonic() + 30
    while True:
        page.goto(f"{base}/work/")
        if page.locator(f"a[href='/work/{work_id}/']").count():
            break
        assert time.monotonic() < deadline, page.content()
        time.sleep(0.2)
    page.goto(f"{base}/work/{work_id}/")


def test_demo_work_runs_and_completes_live_and_the_failing_agent_is_parked(tmp_path, browser):
    env = {
        **os.environ,
        "CONDUIT_VAR_DIR": str(tmp_path),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'tour.sqlite3'}",
        "PYTHONUNBUFFERED": "1",
        # The failing agent parks after 2 failures here (2 s of backoff) instead of 5 (30 s).
        "CONDUIT_MAX_ATTEMPTS": "2",
    }
    for name in ("TEST_DATABASE_NAME", "REDIS_URL", "DJANGO_ALLOW_ASYNC_UNSAFE"):
        env.pop(name, None)
    manage(env, "migrate", "--noinput", "-v0")
    manage(env, "config", "apply", "demo/conduit.yaml")
    manage(
        env,
        "operator",
        "create",
        "operator",
        "--role",
        "admin",
        "--password-file",
        "-",
        stdin=PASSWORD + "\n",
    )
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(server.stdout), daemon=True).start()
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not any("Conduit console:" in line for line in lines):
            assert server.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.1)
        assert "work: running" in "".join(lines)

        page = browser.new_context().new_page()
        page.goto(f"{base}/login/")
        page.fill("#id_username", "operator")
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(f"{base}/")

        # The pull request: its Work starts, the page opens while the triage command runs.
        manage(env, "events", "accept", "demo/events/pr-opened.json")
        open_when_listed(page, base, 1)
        # The agent takes more input for 3 s before it finishes: the page opens before that.
        assert page.locator("#work-summary .badge-completed").count() == 0
        page.evaluate("window.notReloaded = true")
        page.wait_for_selector("#work-summary .badge-completed", timeout=30_000)
        assert page.evaluate("window.notReloaded === true")  # it came live, over the websocket
        engine = page.locator("#work-engine").inner_text()
        assert "succeeded" in engine and "triage" in engine

        # The failing agent: its Work fails, backs off, fails again and is parked.
        manage(env, "events", "accept", "demo/events/slack-crash.json")
        open_when_listed(page, base, 2)
        page.evaluate("window.notReloaded = true")
        page.wait_for_function("() => document.body.innerText.includes('parked')", timeout=60_000)
        assert page.evaluate("window.notReloaded === true")
        assert "asked to crash" in page.locator("#work-engine").inner_text()
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
