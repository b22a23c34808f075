"""In Chromium: the Work list and the home page follow Work live, the Work
page's controls follow its state when another tab cancels it, a backoff counts down
in the page; axe on the pages changed, wide and narrow. Served by daphne as ``manage.py
serve`` serves it, on the database this process's services write."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.urls import reverse

from tests.browser import test_find_and_live_browser as live_kit
from tests.browser.browserkit import operator, serious, signed_in
from tests.routing.routerkit import apply
from tests.worklife.factories import AttemptFactory, WorkFactory
from worklife.attempts import attempt_fail

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Daphne in a process of its own, as the Event page's live tests run it.
asgi_server = live_kit.asgi_server

# The socket is open before the change commits (the ws extension connects after load).
SOCKET_OPEN = 1.0


def work_operator() -> None:
    """The ``operator`` of the live tests, with the Work controls too."""
    operator()
    User.objects.get(username="operator").user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="worklife",
            codename__in=["retry_work", "cancel_work", "send_input", "rebind_work"],
        )
    )


def park_elsewhere(work, clock) -> float:
    """Park the Work from another thread through the service, as a work loop does when its
    last allowed attempt fails; returns when it committed (``time.monotonic()``)."""
    attempt = AttemptFactory(work=work, number=1)
    committed: list[float] = []

    def run():
        try:
            attempt_fail(attempt_id=attempt.pk, lease_epoch=attempt.lease_epoch, error="boom", clock=clock)
            committed.append(time.monotonic())
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(10)
    assert committed, "the attempt did not fail"
    return committed[0]


def test_live_work_list_shows_a_parked_work_within_2_s(asgi_server, browser, clock, settings, tmp_path):
    settings.CONDUIT_MAX_ATTEMPTS = 1
    work_operator()
    work = WorkFactory(scope="acme", status="running")
    WorkFactory(scope="acme", status="ready")
    page = signed_in(browser, asgi_server)
    page.goto(asgi_server + reverse("work-list") + "?status=parked")
    assert "No Work matches these filters" in page.locator("#work-rows").inner_text()
    page.evaluate("window.notReloaded = true")
    time.sleep(SOCKET_OPEN)

    committed = park_elsewhere(work, clock)
    page.wait_for_selector(f"#work-{work.pk} .badge-parked", timeout=2000)
    seen = time.monotonic() - committed
    assert seen < 2.0, seen
    assert page.evaluate("window.notReloaded === true")
    # The filter holds: the ready Work is not shown; the page is the list's own.
    assert page.locator("#work-rows tbody tr").count() == 1
    assert (
        page.locator("#work-list").get_attribute("ws-connect").startswith("/ws/work/?status=parked&outbox=")
    )
    page.screenshot(path=str(tmp_path / "work-list-parked-live.png"), full_page=True)
    assert page.errors == []


def test_live_work_list_keeps_ticked_boxes_and_home_counts_follow(
    asgi_server, browser, clock, settings, tmp_path
):
    settings.CONDUIT_MAX_ATTEMPTS = 1
    work_operator()
    work = WorkFactory(scope="acme", status="running")
    other = WorkFactory(scope="acme", status="ready")
    page = signed_in(browser, asgi_server)
    assert page.locator("#parked-count").inner_text() == "0"
    page.evaluate("window.notReloaded = true")
    time.sleep(SOCKET_OPEN)

    committed = park_elsewhere(work, clock)
    page.wait_for_function("() => document.querySelector('#parked-count').innerText === '1'", timeout=2500)
    assert time.monotonic() - committed < 2.5
    assert page.evaluate("window.notReloaded === true")
    page.screenshot(path=str(tmp_path / "home-parked-live.png"), full_page=True)

    # On the list, a box ticked for a bulk action stays ticked through a live update.
    page.goto(asgi_server + reverse("work-list"))
    page.check(f"#work-{other.pk} input[type=checkbox]")
    time.sleep(SOCKET_OPEN)
    AttemptFactory(work=other, number=1, state="succeeded")
    from controls import work as controls

    controls.work_cancel(work_id=other.pk, user="elsewhere", clock=clock)
    page.wait_for_selector(f"#work-{other.pk} .badge-cancelled", timeout=2500)
    assert page.locator(f"#work-{other.pk} input[type=checkbox]").is_checked()
    assert page.errors == []


def test_stale_controls_go_when_work_is_cancelled_elsewhere(asgi_server, browser, clock, tmp_path):
    work_operator()
    work = WorkFactory(scope="acme", status="ready")
    watching = signed_in(browser, asgi_server)
    url = asgi_server + reverse("work-detail", args=[work.pk])
    watching.goto(url)
    for control in ("#work-send", "#work-rebind", "#work-control-buttons >> text=Cancel Work"):
        assert watching.locator(control).count() == 1, control
    watching.evaluate("window.notReloaded = true")
    # What the operator typed in a live Work's form survives the page's live updates.
    watching.click("#work-send summary")
    watching.fill("#send-type", "operator.note")

    other = watching.context.new_page()
    other.on("dialog", lambda dialog: dialog.accept())
    other.goto(url)
    time.sleep(SOCKET_OPEN)
    other.click("#work-control-buttons >> text=Cancel Work")
    other.wait_for_selector("#work-controls .control-result", timeout=5000)

    watching.wait_for_selector("#work-send", state="detached", timeout=3000)
    assert watching.locator("#work-rebind").count() == 0
    assert watching.locator("#work-control-buttons >> text=Cancel Work").count() == 0
    assert watching.locator("#work-summary .badge-cancelled").count() == 1
    assert watching.evaluate("window.notReloaded === true")
    watching.screenshot(path=str(tmp_path / "work-page-cancelled-elsewhere.png"), full_page=True)
    assert watching.errors == []


def test_backoff_countdown_ticks(live_server, browser, tmp_path):
    """The next try counts down in the page, a second at a time, with no request, and says
    "now" when it is due."""
    work_operator()
    retry_at = datetime.now(UTC) + timedelta(seconds=8)
    work = WorkFactory(scope="acme", status="ready", failures=1, retry_at=retry_at, last_error="boom")
    page = signed_in(browser, live_server.url)
    page.goto(live_server.url + reverse("work-list"))
    countdown = page.locator(f"#work-{work.pk} time[data-countdown]")
    first = countdown.inner_text()
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.wait_for_function(
        "([selector, first]) => document.querySelector(selector).innerText !== first",
        arg=[f"#work-{work.pk} time[data-countdown]", first],
        timeout=2500,
    )
    later = countdown.inner_text()
    assert first.startswith("in ") and later.startswith("in ")
    assert int(later.split()[1]) < int(first.split()[1])
    page.wait_for_function(
        "(selector) => document.querySelector(selector).innerText === 'now'",
        arg=f"#work-{work.pk} time[data-countdown]",
        timeout=10_000,
    )
    # Every second of it came from the page's clock: no request, so no query.
    assert requests == []
    page.screenshot(path=str(tmp_path / "work-list-countdown.png"), full_page=True)


@pytest.mark.parametrize("width", [1280, 400])
def test_live_work_list_home_and_work_page_pass_axe(
    live_server, browser, clock, test_handlers, tmp_path, width
):
    work_operator()
    apply(clock)
    now = datetime.now(UTC)
    WorkFactory(
        scope="acme", status="ready", failures=2, retry_at=now + timedelta(minutes=2), last_error="boom"
    )
    WorkFactory(scope="acme", status="ready", failures=5, parked_at=now, last_error="boom")
    queue_only = WorkFactory(
        scope="acme",
        binding="inbox",
        status="ready",
        pending_run=True,
        retry_at=now + timedelta(minutes=5),
        last_error="dispatch refused: binding 'inbox' is queue-only: its input waits in the queue",
    )
    cancelled = WorkFactory(scope="acme", status="cancelled", ended_at=now)
    page = signed_in(browser, live_server.url)
    page.set_viewport_size({"width": width, "height": 900})
    axe = Axe()
    found = {}
    for label, path in (
        ("home", reverse("console-home")),
        ("work list", reverse("work-list")),
        ("work list parked", reverse("work-list") + "?status=parked"),
        ("queue-only work", reverse("work-detail", args=[queue_only.pk])),
        ("cancelled work", reverse("work-detail", args=[cancelled.pk])),
    ):
        response = page.goto(live_server.url + path)
        assert response is not None and response.status == 200, label
        found[label] = serious(axe.run(page))
        page.screenshot(path=str(tmp_path / f"{label.replace(' ', '-')}-{width}.png"), full_page=True)
    failing = {label: lines for label, lines in found.items() if lines}
    assert failing == {}, failing
