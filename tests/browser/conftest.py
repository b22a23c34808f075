"""Fixtures of the browser tests: Debian's Chromium driven by Playwright (sync API)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.browser.browserkit import PASSWORD, RECEIVERS
from tests.causal.factories import CausalDiagnosticFactory, EventFactory
from tests.routing.factories import (
    CHANGED,
    DEFAULT_TEST_CONFIG,
    ApiTokenFactory,
    ReceiverCountFactory,
    RouteRecordFactory,
    UserFactory,
    apply_config,
)
from tests.worklife.factories import (
    AttemptFactory,
    CorrelationKeyFactory,
    IntentFactory,
    TimerFactory,
    WaitFactory,
    WorkFactory,
    WorkInputFactory,
)

CHROMIUM = "/usr/bin/chromium"
ENABLE_HINT = "install it (Debian: apt-get install chromium) to run the browser tests"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def in_ci(environ: Mapping[str, str]) -> bool:
    """Whether ``CI`` is set (CI services set ``CI=true``); empty, ``0``, ``false`` and ``no``
    mean it is not."""
    return environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def chromium_gate(path: str = CHROMIUM, environ: Mapping[str, str] = os.environ) -> tuple[str, str] | None:
    """What the browser tests do about Chromium: ``None`` when ``path`` is an executable, else
    ``("skip", why)`` on a developer's machine and ``("fail", why)`` in CI, where a missing
    browser must not pass unnoticed."""
    if os.path.isfile(path) and os.access(path, os.X_OK):
        return None
    why = f"Chromium not found at {path}: {ENABLE_HINT}"
    if in_ci(environ):
        return "fail", f"{why} (CI is set, so the browser tests fail instead of being skipped)"
    return "skip", why


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Place every skip for want of Chromium at this file, so that pytest's summary folds them
    into one line instead of one per browser test."""
    report = yield
    if report.skipped and isinstance(report.longrepr, tuple) and ENABLE_HINT in str(report.longrepr[2]):
        report.longrepr = (__file__, chromium_present.__wrapped__.__code__.co_firstlineno, report.longrepr[2])
    return report


SCREENSHOTS_ENV = "CONDUIT_SCREENSHOTS"


def keep_screenshots(tmp_path: Path, nodeid: str, environ: Mapping[str, str] = os.environ) -> Path | None:
    """Copy the screenshots a browser test left in its ``tmp_path`` to ``$CONDUIT_SCREENSHOTS``
    (one folder per test), so that a CI run keeps them as artifacts; nothing when it is unset.
    Returns the folder written."""
    root = environ.get(SCREENSHOTS_ENV, "").strip()
    shots = sorted(tmp_path.glob("**/*.png"))
    if not root or not shots:
        return None
    folder = Path(root) / re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")
    folder.mkdir(parents=True, exist_ok=True)
    for shot in shots:
        shutil.copy2(shot, folder / shot.name)
    return folder


@pytest.fixture(autouse=True)
def screenshots_kept(request, tmp_path):
    """After each browser test, the screenshots it saved under its ``tmp_path`` are kept where
    ``CONDUIT_SCREENSHOTS`` says (``.ci/run`` sets it), passed or failed."""
    yield
    keep_screenshots(tmp_path, request.node.nodeid)


@pytest.fixture(scope="session", autouse=True)
def chromium_present():
    """Skip every browser test with one line when Chromium is missing (fail when CI is set),
    before a live server or any data is set up for it."""
    gate = chromium_gate()
    if gate is not None:
        action, why = gate
        if action == "fail":
            pytest.fail(why, pytrace=False)
        pytest.skip(why)


@pytest.fixture
def allow_async_unsafe(monkeypatch):
    """Playwright's sync API keeps an event loop running in the test's thread, which makes
    Django refuse ORM calls there (its async-safety check); the test itself is synchronous,
    so it may make them."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture
def browser(allow_async_unsafe):
    """A headless Chromium, closed after the test."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def world() -> dict[str, Any]:
    """An admin and something on every page: the test configuration, routed, unrouted, failed
    and skipped Events, a causal chain with refusals, running and parked Work, an API token."""
    admin = UserFactory(username="admin", is_staff=True, is_superuser=True)
    admin.set_password(PASSWORD)
    admin.save()
    apply_config(DEFAULT_TEST_CONFIG + RECEIVERS)
    candidate = apply_config(CHANGED, candidate=True)
    work = WorkFactory(scope="acme", status="running", binding="agent")
    CorrelationKeyFactory(work=work, key="pr:acme/web#42")
    failed_attempt = AttemptFactory(
        work=work,
        number=1,
        binding="agent",
        state="failed",
        exit_status=1,
        error="exit status 1: the agent crashed",
        stderr_tail='Traceback (most recent call last):\n  File "agent.py", line 1\nRuntimeError: crashed',
    )
    running = AttemptFactory(work=work, number=2, binding="agent", state="running")
    opened = EventFactory(
        scope="acme",
        type="github.pull_request.review_comment.created",
        source="github",
        data={"repository": "acme/web", "number": 42, "body": "x" * 400},
        correlation=["pr:acme/web#42"],
        route_state="routed",
    )
    WorkInputFactory(work=work, event=opened, binding="agent")
    RouteRecordFactory(event=opened, work=work, policy="start", route="prs", reason="matched")
    chat = EventFactory(
        scope="acme", type="chat.message", route_state="routed", parent=opened, root=opened, depth=1
    )
    IntentFactory(attempt=running, work=work, event=chat)
    WaitFactory(work=work, match={"type": "chat.message"})
    TimerFactory(work=work)
    failed = EventFactory(scope="acme", type="x.crash", route_state="failed")
    RouteRecordFactory(
        event=failed,
        work=work,
        policy="failed",
        reason="handler_failed",
        disposition="failed",
        error="route prs: the handler raised\nTraceback (most recent call last): ...",
        attempts=5,
    )
    skipped = EventFactory(scope="acme", type="x.skip", route_state="skipped")
    RouteRecordFactory(event=skipped, policy="skipped", reason="skipped", disposition="skipped")
    unrouted = EventFactory(scope="acme", type="deploy.requested", data={"service": "web"})
    CausalDiagnosticFactory(root_seq=opened.seq, parent_seq=chat.seq)
    CausalDiagnosticFactory(kind="rate_exceeded", root_seq=opened.seq, parent_seq=opened.seq)
    parked = WorkFactory(scope="acme", status="parked", binding="agent")
    AttemptFactory(work=parked, number=1, binding="agent", state="failed", error="exit status 2")
    token = ApiTokenFactory(user=admin, name="webhooks")
    EventFactory(scope="acme", type="github.pull_request.opened", accepted_by="receiver:github")
    ReceiverCountFactory(receiver="github", outcome="signature_invalid", count=3)
    ReceiverCountFactory(
        receiver="slack", outcome="handshake", last_message="answered Slack's url_verification challenge"
    )
    del failed_attempt
    return {
        "opened": opened,
        "root": opened,
        "unrouted": unrouted,
        "failed": failed,
        "work": work,
        "parked": parked,
        "token": token,
        "candidate": candidate,
    }
