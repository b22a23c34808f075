"""Fixtures of the browser tests: Debian's Chromium driven by Playwright (sync API)."""

from __future__ import annotations

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


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
