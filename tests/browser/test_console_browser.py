"""The console in a real browser: sign in through the form, filter the Events list with
htmx, open an Event and a Work page; everything is served by the console itself (no CDN)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest
from django.urls import reverse

from tests.causal.factories import EventFactory
from tests.routing.factories import RouteRecordFactory, UserFactory, live_scopes
from tests.worklife.factories import AttemptFactory, CorrelationKeyFactory, WorkFactory, WorkInputFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "browser-console-password-7"
SCREENSHOT = "console-work-page.png"
SCREENSHOT_NARROW = "console-work-page-800.png"


@pytest.fixture
def data():
    """An operator, Events in two scopes, and a Work with input and history."""
    user = UserFactory(username="operator")
    user.set_password(PASSWORD)
    user.save()
    live_scopes("acme", "ops")
    work = WorkFactory(scope="acme", status="running", binding="agent")
    CorrelationKeyFactory(work=work, key="pr:acme/web#42")
    AttemptFactory(
        work=work,
        number=1,
        binding="agent",
        state="failed",
        exit_status=1,
        error="exit status 1: the agent crashed",
        stderr_tail='Traceback (most recent call last):\n  File "agent.py", line 1\nRuntimeError: crashed',
    )
    AttemptFactory(work=work, number=2, binding="agent", state="running")
    opened = EventFactory(
        scope="acme",
        type="github.pull_request.opened",
        source="github",
        envelope_id="gh-delivery-1",
        data={"repository": "acme/web", "number": 42, "action": "opened"},
        correlation=["pr:acme/web#42"],
        route_state="routed",
    )
    WorkInputFactory(work=work, event=opened, binding="agent")
    RouteRecordFactory(event=opened, work=work, policy="start", route="prs", reason="matched")
    comment = EventFactory(scope="acme", type="github.issue_comment.created", route_state="routed")
    WorkInputFactory(work=work, event=comment, binding="agent")
    RouteRecordFactory(event=comment, work=work, policy="queue", route="comments", reason="matched")
    EventFactory(scope="ops", type="ops.disk_full", envelope_id="ops-1")
    return {"work": work, "opened": opened}


def test_d4_console_in_chromium(live_server, data, browser, tmp_path):
    # ``data`` is written before Chromium starts: Playwright's event loop then runs in this
    # thread, and connections opened under it would outlive the test.
    base = live_server.url
    host = urlsplit(base).netloc
    requests: list[str] = []
    sockets: list[str] = []
    errors: list[str] = []

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.on("request", lambda request: requests.append(request.url))
    page.on("websocket", lambda socket: sockets.append(socket.url))
    page.on("pageerror", lambda error: errors.append(str(error)))

    # Signing in through the form.
    page.goto(base + reverse("event-list"))
    assert page.url.startswith(base + reverse("login"))
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(re.escape(base + reverse("event-list"))))
    assert page.locator("#event-rows").is_visible()

    # htmx 2 is loaded, from the console's own static files.
    assert page.evaluate("typeof htmx") == "object"
    assert page.evaluate("htmx.version").startswith("2.")
    assert base + "/static/htmx/htmx.min.js" in requests
    assert base + "/static/htmx/ext/ws.min.js" in requests

    # Filtering the Events list swaps the list in place and pushes the URL.
    assert page.locator("text=ops.disk_full").count() == 1
    page.fill("#id_scope", "acme")
    with page.expect_response(
        lambda r: "scope=acme" in r.url and r.request.headers.get("hx-request") == "true"
    ):
        page.click("#event-filters button[type=submit]")
    page.wait_for_function("() => !document.body.innerText.includes('ops.disk_full')")
    assert "scope=acme" in page.url
    assert page.locator("#event-rows tbody tr").count() == 2
    page.select_option("#id_route_state", "unrouted")
    page.wait_for_function("() => document.querySelectorAll('#event-rows tbody tr').length === 0")
    page.select_option("#id_route_state", "")
    page.wait_for_function("() => document.querySelectorAll('#event-rows tbody tr').length === 2")

    # Opening an Event.
    opened = data["opened"]
    page.click(f"#event-{opened.seq} a")
    page.wait_for_url(base + reverse("event-detail", args=[opened.seq]))
    assert page.locator("#event-envelope").inner_text().count("gh-delivery-1") == 1
    assert '"repository": "acme/web"' in page.locator("#event-data").inner_text()
    assert "start" in page.locator("#event-route").inner_text()

    # Opening its Work.
    work = data["work"]
    page.click(f"#event-route a[href='{reverse('work-detail', args=[work.pk])}']")
    page.wait_for_url(base + reverse("work-detail", args=[work.pk]))
    assert "running" in page.locator("#work-summary").inner_text()
    # The engine: why it is (not) running, and a failed attempt's output behind a <details>.
    assert page.locator("#work-why").inner_text() == "running attempt 2"
    assert page.locator("#work-attempts tbody tr").count() == 2
    assert not page.locator(".attempt-output pre").is_visible()
    page.click(".attempt-output summary")
    assert "RuntimeError: crashed" in page.locator(".attempt-output pre").inner_text()
    assert page.locator("#work-input tbody tr").count() == 2
    assert page.locator("#work-history tbody tr").count() == 2
    assert "pr:acme/web#42" in page.locator("#work-keys").inner_text()
    # The history partial refreshes through htmx (HX-Target: work-history).
    with page.expect_response(lambda r: r.request.headers.get("hx-target") == "work-history"):
        page.click("#work-history >> xpath=preceding::a[1]")
    assert page.locator("#work-history tbody tr").count() == 2
    page.screenshot(path=tmp_path / SCREENSHOT, full_page=True)

    # Readable at 800px: nothing wider than the window.
    page.set_viewport_size({"width": 800, "height": 900})
    for url in (reverse("work-detail", args=[work.pk]), reverse("event-list")):
        page.goto(base + url)
        assert page.evaluate("document.documentElement.scrollWidth") <= 800, url
        if url.startswith("/work/"):
            page.screenshot(path=tmp_path / SCREENSHOT_NARROW, full_page=True)

    # Nothing was fetched from anywhere but the console.
    assert requests and all(urlsplit(url).netloc == host for url in requests), requests
    assert all(urlsplit(url).netloc == host for url in sockets), sockets
    assert errors == []
    context.close()
