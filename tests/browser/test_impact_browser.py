"""In a real browser, under the Content-Security-Policy: the impact preview of
3,000 Events runs in the background, showing "Events traced N of M" with its button disabled,
then a roll-up by effect and route (each group with its replay) and the changed Events 50 a
page; no page weighs more than 500 KB, and axe finds nothing serious at 1280 and 400 px."""

from __future__ import annotations

import re
import time

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.urls import reverse
from playwright.sync_api import expect

from causal.models import Event
from routing.models import ImpactRun
from tests.browser.browserkit import BLOCKING
from tests.causal.factories import EventFactory
from tests.routing.factories import CHANGED, apply_config, user_with_role

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "browser-impact-password-39"
EVENTS = 3_000
# What the 3,000 Events are, in turn: an alert (unmatched live, started by the candidate's
# alerts route), a ping (dropped live, unmatched by the candidate) and an issue (unmatched by both).
KINDS = ("alert.fired", "x.ping", "issue.opened")
PAGE_LIMIT = 500_000


@pytest.fixture
def data():
    user = user_with_role("admin", username="ada")
    user.set_password(PASSWORD)
    user.save()
    apply_config()
    Event.objects.bulk_create(
        [
            EventFactory.build(
                type=KINDS[n % 3], source="mon", scope="acme", data={"id": n}, route_state="routed"
            )
            for n in range(EVENTS)
        ],
        batch_size=500,
    )
    return {"candidate": apply_config(CHANGED, candidate=True)}


@pytest.fixture
def page(live_server, browser, data):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    page.goto(live_server.url + reverse("login"))
    page.fill("#id_username", "ada")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(live_server.url + reverse("console-home"))
    yield page
    context.close()


def serious(page) -> list[str]:
    results = Axe().run(page)
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:5]}"
        for v in results.response["violations"]
        if v["impact"] in BLOCKING
    ]


def test_impact_progress_rollup_and_paging(page, live_server, data, tmp_path):
    candidate = data["candidate"]
    url = live_server.url + reverse("candidate-detail", args=[candidate.pk])
    page.goto(url)
    page.fill("#id_events", str(EVENTS))
    page.click("#impact-start")

    # While it runs: the progress, the button disabled, no old result on screen.
    progress = page.locator("#impact-progress")
    progress.wait_for()
    assert re.search(r"Events traced \d+ of \d+", progress.inner_text())
    assert page.locator("#impact-start").is_disabled()
    page.screenshot(path=tmp_path / "impact-running.png")
    assert page.locator("#impact-summary").count() == 0
    seen = set()
    deadline = time.monotonic() + 300
    while page.locator("#impact-summary").count() == 0:
        assert time.monotonic() < deadline, f"the preview did not end; progress seen: {sorted(seen)}"
        # Read without waiting: the progress is replaced by the roll-up once the run is done.
        text = page.evaluate("document.querySelector('#impact-progress')?.textContent || ''")
        match = re.search(r"Events traced (\d+) of (\d+)", text)
        if match:
            seen.add((int(match[1]), int(match[2])))
        page.wait_for_timeout(200)
    assert any(0 < done < EVENTS and total == EVENTS for done, total in seen), seen

    # Done: the roll-up first, by effect and route, each group replayable after Apply.
    summary = page.locator("#impact-summary").inner_text()
    assert "2000 of the 3000 latest Events" in summary
    assert "the candidate would start 1,000 Work, leave 1,000 unmatched" in summary
    rows = [row.inner_text() for row in page.locator("#impact-rollup tbody tr").all()]
    assert len(rows) == 2
    # Not replayed before Apply: the copies would route as live does now.
    assert any(r.startswith("unmatched → start\talerts\t1000") and "after Apply" in r for r in rows), rows
    assert any(r.startswith("drop → unmatched\tnoise\t1000") for r in rows), rows
    assert page.locator("#impact-start").is_enabled()

    # Then the changed Events, 50 a page.
    assert page.locator(".impact-change").count() == 50
    assert "page 1 of 40" in page.locator("#impact-changes-heading").inner_text()
    first = page.locator(".impact-change summary").first.inner_text()
    page.click("#impact-next")
    expect(page.locator("#impact-changes-heading")).to_contain_text("page 2 of 40")
    assert page.locator(".impact-change").count() == 50
    assert page.locator(".impact-change summary").first.inner_text() != first

    # No page carries the whole list.
    run = ImpactRun.objects.get()
    for path in (
        reverse("candidate-detail", args=[candidate.pk]),
        reverse("impact-run", args=[run.pk]) + "?page=40",
    ):
        body = page.request.get(live_server.url + path).body()
        assert len(body) < PAGE_LIMIT, (path, len(body))

    # Accessible, wide and narrow.
    page.goto(url)
    page.locator("#impact-summary").wait_for()
    page.locator("#impact-summary").scroll_into_view_if_needed()
    page.screenshot(path=tmp_path / "impact-done.png")
    assert serious(page) == []
    page.set_viewport_size({"width": 400, "height": 900})
    page.locator("#impact-summary").scroll_into_view_if_needed()
    page.screenshot(path=tmp_path / "impact-done-400.png")
    assert serious(page) == []
    assert page.errors == []
