"""In Chromium: the Event page updates as a whole after Skip and live as the router
routes it (served by daphne as ``manage.py serve`` serves it: HTTP and websockets);
finding Events with the CLI's filters, their total, and paging to the oldest and back (items
4 and 5)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.db import connection, transaction
from django.urls import reverse

from routing.engine.live import publish_routed
from tests.browser.browserkit import operator, signed_in
from tests.causal.factories import EventFactory
from tests.routing import sample_handlers
from tests.routing.factories import RouteRecordFactory
from tests.routing.livekit import route_pass
from tests.routing.routerkit import accept, apply
from tests.support import free_port
from tests.worklife.factories import AttemptFactory, WorkFactory, WorkInputFactory
from worklife.attempts import attempt_fail

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ROOT = Path(settings.BASE_DIR)


def database_url() -> str:
    """The test database, for a server in another process."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{Path(db['NAME']).resolve()}"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return f"postgres://{db['USER']}{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@pytest.fixture
def asgi_server(tmp_path, settings):
    """The console under daphne in a process of its own, on the test database: what this
    process commits reaches its pages through the live-update outbox."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "CONDUIT_VAR_DIR": str(tmp_path),
        "LOG_LEVEL": "WARNING",
    }
    for name in ("TEST_DATABASE_NAME", "REDIS_URL", "DJANGO_ALLOW_ASYNC_UNSAFE"):
        env.pop(name, None)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "conduit_site.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    import urllib.request

    while True:
        try:
            urllib.request.urlopen(base + reverse("login"), timeout=1)
            break
        except OSError:
            assert server.poll() is None and time.monotonic() < deadline, "daphne did not start"
            time.sleep(0.2)
    try:
        yield base
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_event_page_updates_whole_after_skip_and_live_when_routed(
    asgi_server, browser, clock, test_handlers, tmp_path
):
    operator()
    apply(clock)
    sample_handlers.BROKEN.add("stuck")
    stuck = accept(clock, "x.thing", {}, id="stuck")
    route_pass(clock)  # its route fails: unrouted, a failure counted
    waiting = accept(clock, "github.pull_request.opened", {"repo": "acme/api", "number": 3})
    page = signed_in(browser, asgi_server)

    # Skip on the Event page: heading, State box, route and chain all say skipped at once.
    page.goto(asgi_server + reverse("event-detail", args=[stuck.seq]))
    page.wait_for_function("() => document.querySelector('#event-live').getAttribute('ws-connect')")
    assert "unrouted" in page.locator("#event-heading").inner_text()
    page.evaluate("window.notReloaded = true")
    page.click("#event-route >> text=Skip")
    page.wait_for_selector("#event-heading .badge-skipped", timeout=5000)
    assert page.locator("#event-state .badge-skipped").count() == 1
    assert page.locator(f"#chain-{stuck.seq} .badge-skipped").count() == 1
    assert "skipped by operator" in page.locator("#event-route").inner_text()
    assert page.locator("#event-route a[hx-post$='/reroute/']").count() == 1
    # The live update that follows the skip leaves the control's message in place.
    time.sleep(1)
    assert f"Event #{stuck.seq} skipped by operator" in page.locator("#event-control-result").inner_text()
    page.screenshot(path=str(tmp_path / "event-page-after-skip.png"), full_page=True)

    # Reroute: the page then links to the copy instead of offering Reroute again.
    page.click("#event-route a[hx-post$='/reroute/']")
    page.wait_for_selector("#event-route >> text=rerouted as", timeout=5000)
    assert page.locator("#event-route a[hx-post$='/reroute/']").count() == 0
    assert "rerouted as" in page.locator("#event-heading").inner_text()

    # An unrouted Event's page changes when the router routes it, without a reload.
    page.goto(asgi_server + reverse("event-detail", args=[waiting.seq]))
    page.wait_for_function("() => document.querySelector('#event-live').getAttribute('ws-connect')")
    assert page.locator("#event-heading .badge-unrouted").count() == 1
    page.evaluate("window.notReloaded = true")
    time.sleep(0.5)  # the socket is open before the router commits
    route_pass(clock)
    page.wait_for_selector("#event-heading .badge-routed", timeout=15_000)
    assert page.evaluate("window.notReloaded === true")
    assert "start" in page.locator("#event-route").inner_text()
    assert page.locator(f"#chain-{waiting.seq} .badge-routed").count() == 1
    page.screenshot(path=str(tmp_path / "event-page-routed-live.png"), full_page=True)
    assert page.errors == []


def test_find_count_and_page_both_ways(live_server, browser, tmp_path):
    operator()
    pushes = [EventFactory(scope="acme/web", type="github.push").seq for _ in range(60)]
    EventFactory(scope="ops", type="ops.alert", envelope_id="alert-7")
    unmatched = EventFactory(scope="acme", type="github.issues.opened", route_state="routed")
    RouteRecordFactory(event=unmatched, policy="unmatched")
    work = WorkFactory(scope="acme", binding="agent")
    inputs = [item.seq for item in WorkInputFactory.create_batch(55, work=work)]
    base = live_server.url
    page = signed_in(browser, base)

    page.goto(base + reverse("event-list"))
    assert f"{60 + 2 + 55} Events" in page.locator(".pager-total").inner_text()
    # A type glob and a scope with its subtree, as events list takes them.
    page.fill("#id_type", "github.*")
    page.fill("#id_scope", "acme")
    page.check("#id_subtree")
    page.click("#event-filters button[type=submit]")
    page.wait_for_function("() => document.querySelector('.pager-total').innerText.startsWith('61 Events')")
    assert "subtree=1" in page.url and "type=github.*" in page.url.replace("%2A", "*")
    assert page.locator("#event-rows tbody tr").count() == 50
    assert page.locator(f"#event-{unmatched.seq} .badge-unmatched").count() == 1
    # To the oldest page, then newer, then back to the newest.
    page.click("#event-rows >> text=Oldest")
    page.wait_for_function("() => document.querySelector('.pager-total').innerText.includes('oldest first')")
    assert page.locator("#event-rows tbody tr").first.get_attribute("id") == f"event-{pushes[0]}"
    page.click("#event-rows >> text=Newer →")
    page.wait_for_selector(f"#event-{pushes[50]}")
    assert page.locator("#event-rows tbody tr").count() == 11
    page.click("#event-rows >> text=← Newest")
    page.wait_for_function("() => !document.querySelector('.pager-total').innerText.includes('oldest first')")
    assert page.locator("#event-rows tbody tr").first.get_attribute("id") == f"event-{unmatched.seq}"
    assert page.locator("#event-rows tbody tr").count() == 50
    page.screenshot(path=str(tmp_path / "event-list-filtered.png"), full_page=True)
    # Search by envelope id.
    page.goto(base + reverse("event-list"))
    page.fill("#id_q", "alert-7")
    page.click("#event-filters button[type=submit]")
    page.wait_for_function("() => document.querySelector('.pager-total').innerText.startsWith('1 Event')")
    assert "ops.alert" in page.locator("#event-rows").inner_text()

    # The Work page's input, newest first.
    page.goto(base + reverse("work-detail", args=[work.pk]))
    assert "55 inputs, in acceptance order" in page.locator("#work-input").inner_text()
    page.click("#work-input >> text=Show newest first")
    page.wait_for_url("**input_order=newest")
    assert page.locator("#work-input tbody tr").first.get_attribute("id") == f"input-{inputs[-1]}"
    page.click("#work-input >> text=Earlier input →")
    page.wait_for_selector(f"#input-{inputs[0]}")
    assert page.locator("#work-input tbody tr").count() == 5
    page.screenshot(path=str(tmp_path / "work-input-newest.png"), full_page=True)


def test_work_page_offers_retry_live_when_its_work_parks(asgi_server, browser, clock, settings, tmp_path):
    settings.CONDUIT_MAX_ATTEMPTS = 1
    operator()
    User.objects.get(username="operator").user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="worklife", codename__in=["retry_work", "cancel_work"]
        )
    )
    work = WorkFactory(scope="acme", status="running")
    attempt = AttemptFactory(work=work, number=1)
    page = signed_in(browser, asgi_server)
    page.goto(asgi_server + reverse("work-detail", args=[work.pk]))
    page.wait_for_function("() => document.querySelector('#work-live').getAttribute('ws-connect')")
    assert page.locator("#work-control-buttons >> text=Cancel Work").count() == 1
    assert page.locator("#work-control-buttons >> text=Retry").count() == 0
    page.evaluate("window.notReloaded = true")
    time.sleep(0.5)  # the socket is open before the work loop commits

    # What the work loop does when the attempt fails: commit, then tell the Work's page.
    with transaction.atomic():
        attempt_fail(attempt_id=attempt.pk, lease_epoch=attempt.lease_epoch, error="boom", clock=clock)
        publish_routed([], [work.pk])
    page.wait_for_selector("#work-control-buttons >> text=Retry", timeout=15_000)
    assert page.evaluate("window.notReloaded === true")

    # The live button works as the page's own: Retry unparks the Work and goes away.
    page.click("#work-control-buttons >> text=Retry")
    page.wait_for_selector("#work-controls .control-result", timeout=5000)
    assert page.locator("#work-control-buttons >> text=Retry").count() == 0
    work.refresh_from_db()
    assert work.parked_at is None
    page.screenshot(path=str(tmp_path / "work-page-retry-live.png"), full_page=True)
    assert page.errors == []
