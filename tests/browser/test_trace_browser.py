"""The trace page in a real browser: "Trace this Event" on a routed Event's page shows, first,
that routing already decided it and then every route's verdict for it traced as new; the routes filter limits the trace (R37); axe finds no serious violation at a wide and a
narrow width."""

from __future__ import annotations

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.urls import reverse

from routing.acceptance.services import event_accept
from routing.engine.options import RouterOptions
from routing.engine.router import build_router
from tests.browser.browserkit import serious
from tests.routing.factories import apply_config, user_with_role

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "browser-trace-password-39"
ROUTES = ["prs", "chat", "stop", "notes", "noise"]  # scope acme of the default test configuration


@pytest.fixture
def routed(clock) -> int:
    """A viewer, the default configuration live, and an Event routing started a Work for."""
    user = user_with_role("viewer", username="vic")
    user.set_password(PASSWORD)
    user.save()
    apply_config()
    payload = {
        "specversion": "1.0",
        "id": "gh-4",
        "source": "github",
        "type": "github.pull_request.opened",
        "scope": "acme",
        "data": {"repository": "acme/api", "number": 4},
    }
    seq = event_accept(payload=payload, clock=clock).event.seq
    router = build_router(clock=clock, options=RouterOptions(workers=1))
    try:
        router.route(seq)
    finally:
        router.close()
    return seq


def signed_in(browser, live_server, width: int):
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.goto(live_server.url + reverse("login"))
    page.fill("#id_username", "vic")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(live_server.url + reverse("console-home"))
    return context, page


def trace_from_the_event_page(page, live_server, seq: int) -> None:
    page.goto(live_server.url + reverse("event-detail", args=[seq]))
    page.click("#trace-this-event")
    page.wait_for_selector(".trace-verdicts")


def test_trace_of_a_routed_event_shows_the_verdict_table(live_server, browser, routed, tmp_path):
    context, page = signed_in(browser, live_server, 1280)
    try:
        trace_from_the_event_page(page, live_server, routed)
        page.screenshot(path=tmp_path / "trace-of-a-routed-event.png", full_page=True)
        rows = page.locator(".trace-verdicts tbody tr")
        assert rows.count() == len(ROUTES)
        assert [rows.nth(i).locator("td").first.inner_text() for i in range(rows.count())] == ROUTES
        assert rows.first.locator(".badge-verdict").inner_text() == "match"
        recorded = page.locator(".trace-recorded")
        assert recorded.is_visible()
        text = recorded.inner_text()
        assert f"Event #{routed} was already routed on " in text and " to start on Work " in text
        assert "this is what the live configuration (generation 1) would do with it now" in text
        # Up front: above the effect and the table.
        assert recorded.bounding_box()["y"] < page.locator(".trace-effect").bounding_box()["y"]
        assert "duplicate" not in page.locator("#trace-result").inner_text()
    finally:
        context.close()


def test_r37_trace_filter_limits_the_routes_evaluated_in_the_browser(live_server, browser, routed):
    context, page = signed_in(browser, live_server, 1280)
    try:
        trace_from_the_event_page(page, live_server, routed)
        page.fill("#id_filter", "noise, chat")
        page.click(".trace-form button[type=submit]")
        page.wait_for_selector(".trace-verdicts caption:has-text('only the routes asked')")
        rows = page.locator(".trace-verdicts tbody tr td:first-child")
        assert rows.all_inner_texts() == ["chat", "noise"]
        assert page.locator(".trace-effect .badge-effect").inner_text() == "unmatched"
        page.fill("#id_filter", "chats")
        page.click(".trace-form button[type=submit]")
        page.wait_for_selector("#trace-result .error")
        refusal = page.locator("#trace-result .error").inner_text()
        assert "unknown route 'chats' in scope acme; its routes are: " + ", ".join(ROUTES) in refusal
    finally:
        context.close()


@pytest.mark.parametrize("width", [1280, 400])
def test_axe_finds_no_serious_violation_on_the_trace_of_a_routed_event(
    live_server, browser, routed, tmp_path, width
):
    context, page = signed_in(browser, live_server, width)
    try:
        trace_from_the_event_page(page, live_server, routed)
        page.screenshot(path=tmp_path / f"trace-{width}.png", full_page=True)
        assert serious(Axe().run(page)) == []
    finally:
        context.close()
