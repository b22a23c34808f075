"""Bulk Retry and Cancel on the console's Work list: select Work (or all
matching a filter), see how many before confirming, and read what happened."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from conduit_site.console.views import work as work_views
from conduit_site.console.views import work_bulk as bulk_views
from controls.jobs import bulk_job_run, work_bulk_job
from controls.models import BulkJob
from controls.work import WorkControl
from tests.controls.controlkit import control_events, grant, parked_work
from tests.routing.factories import UserFactory
from tests.routing.routerkit import apply
from tests.worklife.factories import WorkFactory
from worklife.models import Work

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def handlers(test_handlers):
    """Routing with the test handlers registered."""


@pytest.fixture(autouse=True)
def fake_clock(clock, monkeypatch):
    monkeypatch.setattr(work_views, "clock", clock)
    monkeypatch.setattr(bulk_views, "clock", clock)


@pytest.fixture
def operator(client):
    user = grant(UserFactory(username="operator"), "retry_work", "cancel_work")
    client.force_login(user)
    return client


def test_bulk_work_list_has_checkboxes_and_select_all_matching(
    operator, clock, django_assert_max_num_queries
):
    for _ in range(3):
        parked_work(clock)
    # The session, user, permission (4), the page and total (2), the pauses in force (1), the banner (1), the outbox position (1).
    with django_assert_max_num_queries(9):
        body = operator.get(reverse("work-list"), {"status": "parked"}).content.decode()
    assert len(re.findall(r'<input type="checkbox" name="ids" value="\d+" form="work-bulk"', body)) == 3
    assert "Select all 3 Work matching this filter" in body
    assert '<input type="hidden" name="status" value="parked" form="work-bulk">' in body


def test_bulk_select_all_matching_one_work_says_the_one_work(operator, clock):
    parked_work(clock)
    body = operator.get(reverse("work-list"), {"status": "parked"}).content.decode()
    assert "Select the one Work matching this filter" in body and "all 1 Work" not in body
    confirm = operator.post(reverse("work-bulk"), {"action": "retry", "all": "1", "status": "parked"})
    assert "the one Work matching this filter" in confirm.content.decode()


def test_bulk_retry_all_matching_confirms_the_count_then_stores_a_job_whose_page_shows_progress(
    operator, clock
):
    apply(clock)
    parked = [parked_work(clock) for _ in range(3)]
    WorkFactory(status="running")
    form = {"action": "retry", "all": "1", "status": "parked"}
    confirm = operator.post(reverse("work-bulk"), form)
    assert confirm.status_code == 200
    body = confirm.content.decode()
    assert "Retry all 3 Work matching this filter" in body and 'id="bulk-confirm">Retry 3 Work<' in body
    assert not control_events("retry_work")  # nothing done before confirming

    stored = operator.post(reverse("work-bulk"), {**form, "count": "3", "confirm": "1"})
    job = BulkJob.objects.get()
    assert stored.status_code == 302 and stored["Location"] == reverse("job-detail", args=[job.pk])
    page = operator.get(stored["Location"]).content.decode()
    assert "0 of 3 Work so far: 0 done, 0 refused" in page and 'hx-trigger="every 1s"' in page
    assert not control_events("retry_work")  # the route loop runs it

    bulk_job_run(job_id=job.pk, clock=clock)
    progress = operator.get(stored["Location"], HTTP_HX_REQUEST="true").content.decode()
    assert "3 of 3 Work: 3 done, 0 refused" in progress and "every 1s" not in progress
    assert len(control_events("retry_work")) == 3
    assert not Work.objects.filter(pk__in=[w.pk for w in parked], parked_at__isnull=False).exists()


def test_bulk_retry_all_matching_does_nothing_when_the_filter_matches_another_count_on_confirming(
    operator, clock
):
    """Shown "Retry 1 Work", an operator confirmed and 3 were retried: two more had parked
    meanwhile. The confirmation carries its count; another count is confirmed again first."""
    apply(clock)
    parked_work(clock)
    form = {"action": "retry", "all": "1", "status": "parked"}
    body = operator.post(reverse("work-bulk"), form).content.decode()
    assert 'id="bulk-confirm">Retry 1 Work<' in body
    assert '<input type="hidden" name="count" value="1">' in body
    parked_work(clock), parked_work(clock)

    again = operator.post(reverse("work-bulk"), {**form, "count": "1", "confirm": "1"})
    assert again.status_code == 409
    body = again.content.decode()
    assert "the filter now matches 3 Work, not the 1 you were shown" in body
    assert (
        'id="bulk-confirm">Retry 3 Work<' in body and '<input type="hidden" name="count" value="3">' in body
    )
    assert not control_events("retry_work")

    done = operator.post(reverse("work-bulk"), {**form, "count": "3", "confirm": "1"})
    assert done.status_code == 302 and BulkJob.objects.get().total == 3


@pytest.mark.parametrize("count", [None, "", "three", "-1"])
def test_bulk_all_matching_without_the_confirmed_count_is_refused_and_does_nothing(operator, clock, count):
    apply(clock)
    parked_work(clock)
    form = {"action": "retry", "all": "1", "status": "parked", "confirm": "1"}
    if count is not None:
        form["count"] = count

    refused = operator.post(reverse("work-bulk"), form)

    assert refused.status_code == 400
    assert "needs the number of Work confirmed" in refused.content.decode()
    assert not control_events("retry_work") and not BulkJob.objects.exists()


def test_bulk_cancel_selected_needs_the_permission_and_the_job_page_names_each_refusal(client, clock):
    apply(clock)
    live = parked_work(clock)
    done = WorkFactory(status="completed")
    form = {"action": "cancel", "ids": [live.pk, done.pk], "count": "2", "confirm": "1"}
    client.force_login(grant(UserFactory(username="viewer"), "retry_work"))
    assert client.post(reverse("work-bulk"), form).status_code == 403
    client.force_login(grant(UserFactory(username="ops"), "cancel_work"))
    stored = client.post(reverse("work-bulk"), form)
    bulk_job_run(job_id=BulkJob.objects.get().pk, clock=clock)
    body = client.get(stored["Location"]).content.decode()
    assert "2 of 2 Work: 1 done, 1 refused" in body
    assert re.search(rf"Work {done.pk}</a>: refused: [^<]*only live Work", body)
    assert len(control_events("cancel_work")) == 1


def test_a_job_is_cancelled_from_its_page_with_the_permission_of_its_control(client, clock):
    apply(clock)
    works = [parked_work(clock) for _ in range(2)]
    job = work_bulk_job(action=WorkControl.RETRY, ids=[w.pk for w in works], count=2, user="ops", clock=clock)
    client.force_login(grant(UserFactory(username="canceller"), "cancel_work"))
    assert client.post(reverse("job-cancel", args=[job.pk])).status_code == 403
    client.force_login(grant(UserFactory(username="retrier"), "retry_work"))
    assert client.post(reverse("job-cancel", args=[job.pk])).status_code == 302
    body = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    assert "cancelled by retrier" in body and 'id="job-cancel"' not in body
    assert not control_events("retry_work")
