"""In Chromium: a bulk Retry from the Work list after the list has updated live keeps its CSRF
token (the form sits outside the rows the websocket re-renders), and the job's page follows the
job's progress to its end. Served by daphne as ``manage.py serve`` serves it."""

from __future__ import annotations

import time

import pytest
from django.urls import reverse

from controls.jobs import bulk_job_run
from controls.models import BulkJob
from tests.browser import test_live_work_browser as live_work
from tests.browser.browserkit import signed_in
from tests.controls.controlkit import parked_work
from tests.routing.routerkit import apply
from tests.worklife.factories import WorkFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

asgi_server = live_work.asgi_server


def test_retry_selected_after_a_live_update_of_the_list_is_accepted_and_its_job_page_shows_progress(
    asgi_server, browser, clock, settings, tmp_path, test_handlers
):
    settings.CONDUIT_MAX_ATTEMPTS = 1
    apply(clock)
    live_work.work_operator()
    chosen = [parked_work(clock) for _ in range(2)]
    running = WorkFactory(scope="acme", binding="triage", status="running")
    page = signed_in(browser, asgi_server)
    page.goto(asgi_server + reverse("work-list"))
    for work in chosen:
        page.check(f"#select-work-{work.pk}")
    page.evaluate("window.notReloaded = true")
    time.sleep(live_work.SOCKET_OPEN)

    # Another process parks a Work: the rows are re-rendered over the websocket, without a request.
    live_work.park_elsewhere(running, clock)
    page.wait_for_selector(f"#work-{running.pk} .badge-parked", timeout=3000)
    assert page.evaluate("window.notReloaded === true")
    assert all(page.locator(f"#select-work-{w.pk}").is_checked() for w in chosen)

    page.click("#bulk-retry")
    page.wait_for_selector("#bulk-confirm")
    assert "Retry the 2 selected Work" in page.locator("#work-bulk-result").inner_text()
    page.click("#bulk-confirm")
    page.wait_for_selector("#job-progress")
    job = BulkJob.objects.get()
    assert page.url.endswith(reverse("job-detail", args=[job.pk]))
    assert "0 of 2 Work so far" in page.locator("#job-summary").inner_text()

    bulk_job_run(job_id=job.pk, clock=clock)
    page.wait_for_function(
        "() => document.querySelector('#job-summary').innerText.includes('2 of 2 Work: 2 done, 0 refused')",
        timeout=5000,
    )
    page.screenshot(path=str(tmp_path / "bulk-job-done.png"), full_page=True)
    assert page.errors == []
