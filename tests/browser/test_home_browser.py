"""In a real browser: timestamps in the browser's time zone with the zone
named (UTC without JavaScript) and relative ages in lists; the home page's charts; the banner
when a loop has no heartbeat, linking to Doctor; Doctor polling itself. Screenshots go to the
test's tmp_path."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.urls import reverse

from causal.clock import system_clock
from routing.engine.heartbeat import HEARTBEATS_NAMESPACE as ROUTE_HEARTBEATS
from tests.causal.factories import EventFactory, KVFactory
from tests.routing.factories import RouteRecordFactory, UserFactory
from worklife.heartbeat import HEARTBEATS_NAMESPACE as WORK_HEARTBEATS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "browser-home-password-7"
ZONE = "Asia/Kolkata"  # UTC+5:30 all year: "GMT+5:30" in en-US


@pytest.fixture
def data():
    user = UserFactory(username="operator")
    user.set_password(PASSWORD)
    user.save()
    now = system_clock()
    accepted = (now - timedelta(minutes=3)).replace(microsecond=0)
    routed = EventFactory(
        accepted_at=accepted, route_state="routed", routed_at=accepted + timedelta(seconds=2)
    )
    RouteRecordFactory(event=routed, decided_at=accepted + timedelta(seconds=2))
    EventFactory.create_batch(4, accepted_at=now - timedelta(minutes=1))
    return {"event": routed, "accepted": accepted}


def beating():
    """Fresh heartbeats of a route loop and a work loop."""
    now = system_clock()
    KVFactory(namespace=ROUTE_HEARTBEATS, key="host:1", updated_at=now, value={"at": now.isoformat()})
    KVFactory(
        namespace=WORK_HEARTBEATS,
        key="host:2",
        updated_at=now,
        value={"at": now.isoformat(), "stopped": False},
    )


def signed_in(live_server, browser, **context_options):
    context = browser.new_context(viewport={"width": 1280, "height": 1000}, **context_options)
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    page.goto(live_server.url + reverse("login"))
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(live_server.url + reverse("console-home"))
    return context, page


def local(moment: datetime) -> str:
    return moment.astimezone(ZoneInfo(ZONE)).strftime("%Y-%m-%d %H:%M:%S") + " GMT+5:30"


def test_times_show_in_the_browsers_zone_named_with_ages_in_lists(live_server, browser, data, tmp_path):
    beating()
    context, page = signed_in(live_server, browser, timezone_id=ZONE)
    event = data["event"]
    page.goto(live_server.url + reverse("event-detail", args=[event.seq]))
    accepted = page.locator(f'time[datetime="{data["accepted"].isoformat().replace("+00:00", "Z")}"]').first
    assert accepted.inner_text() == local(data["accepted"])
    page.screenshot(path=tmp_path / "event-local-time.png", full_page=True)
    # A list shows ages, the local time in the title.
    page.goto(live_server.url + reverse("event-list"))
    row = page.locator(f"#event-{event.seq} time[data-ago]")
    assert re.fullmatch(r"(3 min|1\d\d s) ago", row.inner_text()), row.inner_text()
    assert row.get_attribute("title") == local(data["accepted"])
    page.screenshot(path=tmp_path / "event-list-ages.png", full_page=True)
    assert page.errors == []
    context.close()


def test_times_read_utc_without_javascript(live_server, browser, data):
    beating()
    context, page = signed_in(live_server, browser, timezone_id=ZONE, java_script_enabled=False)
    page.goto(live_server.url + reverse("event-list"))
    row = page.locator(f"#event-{data['event'].seq} time[data-ago]")
    assert row.inner_text() == data["accepted"].astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    context.close()


def test_home_draws_the_charts(live_server, browser, data, tmp_path):
    beating()
    context, page = signed_in(live_server, browser, timezone_id=ZONE)
    charts = page.locator("figure.chart svg[role=img]")
    assert charts.count() == 8
    # The hour's Events chart draws its accepted line across the plot.
    line = page.locator("#chart-events-hour .series-accepted polyline").first
    box = line.bounding_box()
    assert box and box["width"] > 300
    # Its title and summary name it for assistive technology.
    label = page.locator("#chart-events-hour svg[role=img]").get_attribute("aria-labelledby")
    assert label == "chart-events-hour-svg-title chart-events-hour-svg-desc"
    assert "5 accepted" in page.locator("#chart-events-hour-svg-desc").text_content()
    # The data table is in the page, not on the screen.
    box = page.locator("#trends-hour-table").locator("xpath=..").bounding_box()
    assert box["width"] <= 1 and box["height"] <= 1
    assert page.locator("#heartbeat-banner").count() == 0
    page.screenshot(path=tmp_path / "home-charts.png", full_page=True)
    assert page.errors == []
    context.close()


def test_banner_without_heartbeats_links_to_doctor_which_polls(live_server, browser, data, tmp_path):
    context, page = signed_in(live_server, browser)
    banner = page.locator("#heartbeat-banner")
    assert banner.is_visible()
    assert "No route loop and no work loop heartbeat" in banner.inner_text()
    page.screenshot(path=tmp_path / "banner.png")
    banner.get_by_role("link", name="See Doctor").click()
    page.wait_for_url(live_server.url + reverse("doctor"))
    assert page.locator("#heartbeat-banner").is_visible()
    # Doctor runs its checks again by itself.
    with page.expect_request(lambda request: request.url.endswith(reverse("doctor")), timeout=15000) as poll:
        pass
    assert poll.value.headers.get("hx-request") == "true"
    assert page.errors == []
    context.close()
