"""Bulk operator controls on Work: retry or cancel several Work, each through
its own control with its own control Event, by ids or by a Work list filter, through the
service and ``POST /api/work/bulk``."""

from __future__ import annotations

import pytest
from django.urls import reverse

from controls.bulk import BULK_LIMIT, work_bulk_ids
from controls.jobs import bulk_job_run, bulk_job_step, work_bulk_job
from controls.models import BulkJob
from controls.work import WorkControl, WorkControlInvalid
from tests.controls.controlkit import api, control_events, grant, parked_work, stored
from tests.routing.factories import api_token_with_secret
from tests.routing.routerkit import apply
from tests.worklife.factories import WorkFactory
from worklife.selectors import WorkFilter

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def handlers(test_handlers):
    """Routing with the test handlers registered."""


@pytest.fixture(autouse=True)
def fake_clocks(clock, monkeypatch):
    from conduit_site.api import work as api_work

    monkeypatch.setattr(api_work, "clock", clock)


def test_bulk_ids_by_filter_are_the_matching_work_in_id_order(clock):
    apply(clock)
    parked = [parked_work(clock) for _ in range(3)]
    WorkFactory(scope="acme", binding="other", parked_at=clock(), failures=5)  # another binding
    ids = work_bulk_ids(filters=WorkFilter(status="parked", binding="triage"), now=clock())
    assert ids == [w.pk for w in parked]


def test_bulk_ids_refuses_both_neither_and_more_than_the_limit(clock):
    with pytest.raises(WorkControlInvalid):
        work_bulk_ids(now=clock())
    with pytest.raises(WorkControlInvalid):
        work_bulk_ids(ids=[1], filters=WorkFilter(), now=clock())
    with pytest.raises(WorkControlInvalid, match="at most 2 Work"):
        work_bulk_ids(ids=[1, 2, 3], now=clock(), limit=2)
    assert BULK_LIMIT == 10_000


def test_api_bulk_cancel_needs_the_cancel_permission_and_answers_the_job_its_get_shows_progress(
    client, clock
):
    apply(clock)
    works = [parked_work(clock) for _ in range(2)]
    done = WorkFactory(status="completed")
    token, secret = api_token_with_secret(user__username="dave")
    body = {"action": "cancel", "ids": [w.pk for w in works] + [done.pk], "count": 3}
    grant(token.user, "retry_work")
    before = stored()
    refused = api(client, "POST", reverse("api-work-bulk"), secret, body)
    assert refused.status_code == 403 and "worklife.cancel_work" in refused.json()["message"]
    assert stored() == before

    grant(token.user, "cancel_work")
    response = api(client, "POST", reverse("api-work-bulk"), secret, body)
    assert response.status_code == 202, response.content
    job = response.json()
    assert (job["kind"], job["state"], job["total"], job["position"]) == ("cancel_work", "pending", 3, 0)
    assert response["Location"] == reverse("api-job-detail", args=[job["id"]])
    assert not control_events("cancel_work")  # the request only stores the job

    bulk_job_run(job_id=job["id"], clock=clock)
    shown = api(client, "GET", response["Location"], secret).json()
    assert (shown["state"], shown["position"], shown["done"], shown["refused"]) == ("done", 3, 2, 1)
    assert [i["outcome"] for i in shown["items"]] == ["done", "done", "refused"]
    assert "only live Work can be cancelled" in shown["items"][2]["message"]
    assert len(control_events("cancel_work")) == 2

    by_filter = api(
        client,
        "POST",
        reverse("api-work-bulk"),
        secret,
        {"action": "retry", "filter": {"status": "nope"}, "count": 1},
    )
    assert by_filter.status_code == 400 and by_filter.json()["field"] == "filter.status"


def test_api_job_cancel_needs_the_job_controls_permission_and_skips_what_is_left(client, clock):
    apply(clock)
    works = [parked_work(clock) for _ in range(3)]
    job = work_bulk_job(action=WorkControl.RETRY, ids=[w.pk for w in works], count=3, user="ops", clock=clock)
    token, secret = api_token_with_secret(user__username="fay")
    url = reverse("api-job-cancel", args=[job.pk])
    assert api(client, "POST", url, secret).status_code == 403
    grant(token.user, "retry_work")
    cancelled = api(client, "POST", url, secret)
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    assert bulk_job_step(clock=clock, job_id=job.pk) is None
    assert not control_events("retry_work")
    missing = api(client, "GET", reverse("api-job-detail", args=[job.pk + 100]), secret)
    assert missing.status_code == 404


@pytest.mark.parametrize("by", [{"ids": "parked"}, {"filter": {"status": "parked"}}])
def test_api_bulk_needs_the_confirmed_count_by_ids_and_by_filter_and_refuses_another(client, clock, by):
    apply(clock)
    parked = [parked_work(clock) for _ in range(2)]
    token, secret = api_token_with_secret(user__username="erin")
    grant(token.user, "retry_work")
    body = {"action": "retry", **by}
    if by.get("ids") == "parked":
        body["ids"] = [w.pk for w in parked]
    before = stored()

    for count in ({}, {"count": None}, {"count": "2"}, {"count": -1}, {"count": True}):
        missing = api(client, "POST", reverse("api-work-bulk"), secret, {**body, **count})
        assert missing.status_code == 400, count
        assert (
            missing.json()["field"] == "count"
            and "needs the number of Work confirmed" in missing.json()["message"]
        )
    assert stored() == before and not BulkJob.objects.exists()
    changed = api(client, "POST", reverse("api-work-bulk"), secret, {**body, "count": 3})
    assert changed.status_code == 409
    assert changed.json() == {
        "error": "count_changed",
        "message": "the request now names 2 Work, not the 3 confirmed: nothing was done; confirm 2 to act on them",
        "confirmed": 3,
        "count": 2,
    }
    assert stored() == before and not BulkJob.objects.exists()

    done = api(client, "POST", reverse("api-work-bulk"), secret, {**body, "count": 2})
    assert done.status_code == 202 and done.json()["total"] == 2
