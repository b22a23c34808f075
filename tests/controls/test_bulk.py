"""Bulk operator controls on Work: retry or cancel several Work, each through
its own control with its own control Event, by ids or by a Work list filter, through the
service and ``POST /api/work/bulk``."""

from __future__ import annotations

import pytest
from django.urls import reverse

from controls.bulk import BULK_LIMIT, work_bulk, work_bulk_ids
from controls.work import WorkControl, WorkControlInvalid
from tests.controls.controlkit import api, control_events, grant, parked_work, stored
from tests.routing.factories import api_token_with_secret
from tests.routing.routerkit import apply
from tests.worklife.factories import WorkFactory
from worklife.models import Work
from worklife.selectors import WorkFilter

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def handlers(test_handlers):
    """Routing with the test handlers registered."""


@pytest.fixture(autouse=True)
def fake_clocks(clock, monkeypatch):
    from conduit_site.api import work as api_work

    monkeypatch.setattr(api_work, "clock", clock)


def test_bulk_retry_by_filter_retries_each_with_its_own_control_event(clock):
    apply(clock)
    parked = [parked_work(clock) for _ in range(3)]
    WorkFactory(scope="acme", binding="other", parked_at=clock(), failures=5)  # another binding
    ids = work_bulk_ids(filters=WorkFilter(status="parked", binding="triage"), now=clock())
    assert ids == [w.pk for w in parked]
    running = WorkFactory(scope="acme", binding="triage", status="running")
    result = work_bulk(action=WorkControl.RETRY, work_ids=[*ids, running.pk], user="ops", clock=clock)
    assert result.summary.startswith(f"retried 3, refused 1 (Work {running.pk}: ")
    assert "neither parked nor backing off" in result.summary
    assert sorted(e.data["work"] for e in control_events("retry_work")) == ids
    for work in Work.objects.filter(pk__in=ids):
        assert work.parked_at is None and work.failures == 0


def test_bulk_ids_refuses_both_neither_and_more_than_the_limit(clock):
    with pytest.raises(WorkControlInvalid):
        work_bulk_ids(now=clock())
    with pytest.raises(WorkControlInvalid):
        work_bulk_ids(ids=[1], filters=WorkFilter(), now=clock())
    with pytest.raises(WorkControlInvalid, match="at most 2 Work"):
        work_bulk_ids(ids=[1, 2, 3], now=clock(), limit=2)
    assert BULK_LIMIT == 10_000


def test_api_bulk_cancel_needs_the_cancel_permission_and_returns_outcomes(client, clock):
    apply(clock)
    works = [parked_work(clock) for _ in range(2)]
    done = WorkFactory(status="completed")
    token, secret = api_token_with_secret(user__username="dave")
    body = {"action": "cancel", "ids": [w.pk for w in works] + [done.pk]}
    grant(token.user, "retry_work")
    before = stored()
    refused = api(client, "POST", reverse("api-work-bulk"), secret, body)
    assert refused.status_code == 403 and "worklife.cancel_work" in refused.json()["message"]
    assert stored() == before

    grant(token.user, "cancel_work")
    response = api(client, "POST", reverse("api-work-bulk"), secret, body)
    assert response.status_code == 200, response.content
    result = response.json()
    assert (result["action"], result["done"], result["refused"]) == ("cancel_work", 2, 1)
    assert [o["ok"] for o in result["outcomes"]] == [True, True, False]
    assert result["outcomes"][2]["error"] == "wrong_state"
    assert result["summary"].startswith("cancelled 2, refused 1")
    assert len(control_events("cancel_work")) == 2

    by_filter = api(
        client, "POST", reverse("api-work-bulk"), secret, {"action": "retry", "filter": {"status": "nope"}}
    )
    assert by_filter.status_code == 400 and by_filter.json()["field"] == "filter.status"


def test_api_bulk_by_filter_needs_the_confirmed_count_and_refuses_another(client, clock):
    apply(clock)
    parked = [parked_work(clock) for _ in range(2)]
    token, secret = api_token_with_secret(user__username="erin")
    grant(token.user, "retry_work")
    body = {"action": "retry", "filter": {"status": "parked"}}
    before = stored()

    for count in ({}, {"count": None}, {"count": "2"}, {"count": -1}, {"count": True}):
        missing = api(client, "POST", reverse("api-work-bulk"), secret, {**body, **count})
        assert missing.status_code == 400, count
        assert (
            missing.json()["field"] == "count"
            and "needs the number of Work confirmed" in missing.json()["message"]
        )
    assert stored() == before and not control_events("retry_work")
    parked_work(clock)  # a third began to match after the caller counted two
    before = stored()
    changed = api(client, "POST", reverse("api-work-bulk"), secret, {**body, "count": 2})
    assert changed.status_code == 409
    assert changed.json() == {
        "error": "count_changed",
        "message": "the filter now matches 3 Work, not the 2 confirmed: nothing was done; confirm 3 to act on them",
        "confirmed": 2,
        "count": 3,
    }
    assert stored() == before and not control_events("retry_work")

    done = api(client, "POST", reverse("api-work-bulk"), secret, {**body, "count": 3})
    assert done.status_code == 200 and done.json()["done"] == 3
    assert len(parked) == 2
