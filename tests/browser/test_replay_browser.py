"""In a real browser, under the Content-Security-Policy: an Event the live
configuration left unmatched, a candidate that adds a route for it applied from the setup page,
then Replay on the Event's page: its copy routes under the new configuration and starts the
Work, and the copy's page names the Event it replays."""

from __future__ import annotations

import pytest
from django.urls import reverse

from causal.models import Event
from routing.acceptance.services import event_accept
from routing.config.selectors import live_generation
from routing.engine.options import RouterOptions
from routing.engine.router import build_router
from routing.models import RouteRecord
from tests.routing.factories import CHANGED, apply_config, user_with_role
from worklife.models import Work

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "browser-replay-password-39"


def route_pending(clock) -> None:
    router = build_router(clock=clock, options=RouterOptions(workers=1))
    try:
        router.route_pending()
    finally:
        router.close()


@pytest.fixture
def data(clock):
    """An admin, the default configuration live, an alert it routes as unmatched, and a
    candidate that adds the ``alerts`` route."""
    user = user_with_role("admin", username="ada")
    user.set_password(PASSWORD)
    user.save()
    apply_config()
    alert = event_accept(
        payload={
            "specversion": "1.0",
            "id": "alert-4",
            "source": "mon",
            "type": "alert.fired",
            "scope": "acme",
            "data": {"id": 4},
        },
        clock=clock,
    ).event
    route_pending(clock)
    assert RouteRecord.objects.get(event=alert).policy == "unmatched"
    return {"alert": alert, "candidate": apply_config(CHANGED, candidate=True)}


@pytest.fixture
def page(live_server, browser, data):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    page.on("dialog", lambda dialog: dialog.accept())
    page.goto(live_server.url + reverse("login"))
    page.fill("#id_username", "ada")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(live_server.url + reverse("console-home"))
    yield page
    context.close()


def test_replay_after_apply_starts_the_work(page, live_server, data, clock):
    alert = data["alert"]
    # Apply the candidate that adds a route for alerts.
    page.goto(live_server.url + reverse("candidate-detail", args=[data["candidate"].pk]))
    page.click("#candidate-apply")
    page.wait_for_url("**/config/?generation=*")
    assert live_generation().number == 2

    # The unmatched Event stays as it was; Replay accepts a copy of it.
    page.goto(live_server.url + reverse("event-detail", args=[alert.seq]))
    page.click(f"#replay-{alert.seq}")
    result = page.locator("#event-control-result .control-result")
    result.wait_for()
    copy = Event.objects.get(source="mon", envelope_id="replay/alert-4/1")
    assert f"Event #{alert.seq} replayed by ada as the copy #{copy.seq}" in result.inner_text()
    assert f"#{copy.seq}" in page.locator("#event-replays").inner_text()

    # The copy routes under the live configuration: the alerts route starts the Work.
    route_pending(clock)
    record = RouteRecord.objects.get(event=copy)
    assert (record.route, record.policy, record.generation) == ("alerts", "start", "2")
    work = Work.objects.get(pk=record.work_id)
    assert RouteRecord.objects.get(event=alert).policy == "unmatched"  # the original is history

    page.click(f"#event-control-result a[href='{reverse('event-detail', args=[copy.seq])}']")
    page.wait_for_url(f"**/events/{copy.seq}/")
    assert f"replay of #{alert.seq}" in page.locator("#event-replay-of").inner_text()
    route = page.locator("#event-route").inner_text()
    assert "start" in route and f"Work {work.pk}" in route
    assert page.errors == []
