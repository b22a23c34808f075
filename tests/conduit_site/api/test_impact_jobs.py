"""Impact previews through the API are jobs with quotas: a large preview answers 202 with a job
to poll (its report once done), a login or token past its quota of running jobs gets 429 with
Retry-After and nothing is started, and a job can be cancelled by whoever started it."""

from __future__ import annotations

import pytest

from causal.models import Event
from conduit_site.api import setup as api_setup
from routing.models import ImpactRun
from routing.setup.impact_runs import impact_run_execute
from tests.causal.factories import EventFactory
from tests.routing.factories import CHANGED, api_token_with_secret, apply_config, user_with_role

pytestmark = pytest.mark.django_db

# In turn: unmatched live and started by the candidate, dropped live and unmatched by it, and
# unmatched by both (no change).
KINDS = ("alert.fired", "x.ping", "issue.opened")


def events(n: int) -> None:
    Event.objects.bulk_create(
        [
            EventFactory.build(type=KINDS[i % 3], source="mon", data={"id": i}, route_state="routed")
            for i in range(n)
        ],
        batch_size=500,
    )


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def launched(monkeypatch) -> list[int]:
    """Jobs started are recorded, not traced: they stay running, as long ones do."""
    started: list[int] = []
    monkeypatch.setattr(api_setup, "launch", lambda run_id, clock: started.append(run_id))
    return started


@pytest.fixture
def candidates():
    apply_config()
    return [apply_config(CHANGED, candidate=True) for _ in range(3)]


@pytest.fixture
def viewer():
    return user_with_role("viewer", username="vera")


def preview(client, candidate, secret, events=1000):
    return client.get(f"/api/candidates/{candidate.pk}/impact?events={events}", headers=bearer(secret))


def test_a_large_impact_preview_is_a_job_polled_until_its_report(
    client, candidates, viewer, launched, clock, monkeypatch
):
    monkeypatch.setattr(api_setup, "clock", clock)
    events(600)
    _, secret = api_token_with_secret(user=viewer)
    candidate = candidates[0]

    small = preview(client, candidate, secret, events=300)
    started = preview(client, candidate, secret, events=600)

    assert small.status_code == 200 and small.json()["examined"] == 300  # at once, no job
    assert started.status_code == 202
    job = started.json()
    run = ImpactRun.objects.get()
    assert launched == [run.pk]
    assert started["Location"] == job["url"] == f"/api/impact/{run.pk}"
    assert (job["status"], job["events"], job["started_by"], job["report"]) == ("running", 600, "vera", None)
    # Asked again while it runs: the same job, none started; polling it says someone waits.
    clock.advance(5)
    assert preview(client, candidate, secret, events=600).json()["id"] == run.pk and launched == [run.pk]
    clock.advance(5)
    assert client.get(job["url"], headers=bearer(secret)).json()["status"] == "running"
    run.refresh_from_db()
    assert run.waited_at == clock()

    impact_run_execute(run_id=run.pk, clock=clock)
    done = client.get(job["url"], headers=bearer(secret)).json()

    assert (done["status"], done["traced"], done["total"]) == ("done", 0, 0)  # no progress told here
    report = done["report"]
    assert (report["examined"], report["changed"]) == (600, 400)
    assert {(g["group"], g["count"]) for g in report["groups"]} == {
        ("unmatched → start", 200),
        ("drop → unmatched", 200),
    }
    change = report["groups"][0]["changes"][0]
    assert set(change) == {"seq", "type", "scope", "group", "live", "candidate"}


def test_a_viewer_past_the_quota_of_running_previews_gets_429_with_retry_after(
    client, candidates, viewer, launched, settings
):
    settings.CONDUIT_IMPACT_JOBS_PER_LOGIN = 2
    _, secret = api_token_with_secret(user=viewer)

    first = preview(client, candidates[0], secret)
    second = preview(client, candidates[1], secret)
    refused = preview(client, candidates[2], secret)

    assert (first.status_code, second.status_code) == (202, 202)
    assert refused.status_code == 429
    assert refused["Retry-After"] == "10" and refused.json()["retry_after"] == 10
    assert refused.json()["error"] == "too_many_requests" and "'vera'" in refused.json()["message"]
    assert ImpactRun.objects.count() == 2 and len(launched) == 2  # nothing started
    # Another login has a quota of its own.
    _, other = api_token_with_secret(user=user_with_role("viewer", username="otto"))
    assert preview(client, candidates[2], other).status_code == 202


def test_the_quota_holds_per_token_and_per_login_over_all_its_tokens(
    client, candidates, viewer, launched, settings
):
    _, first_token = api_token_with_secret(user=viewer)
    _, second_token = api_token_with_secret(user=viewer)
    settings.CONDUIT_IMPACT_JOBS_PER_LOGIN = 5
    settings.CONDUIT_IMPACT_JOBS_PER_TOKEN = 1

    assert preview(client, candidates[0], first_token).status_code == 202
    by_token = preview(client, candidates[1], first_token)
    assert by_token.status_code == 429 and "of this token" in by_token.json()["message"]
    assert preview(client, candidates[1], second_token).status_code == 202

    settings.CONDUIT_IMPACT_JOBS_PER_LOGIN = 2
    settings.CONDUIT_IMPACT_JOBS_PER_TOKEN = 5
    by_login = preview(client, candidates[2], second_token)
    assert by_login.status_code == 429 and "of 'vera'" in by_login.json()["message"]
    assert ImpactRun.objects.count() == 2


def test_a_job_is_cancelled_through_the_api_naming_who_cancelled_it(client, candidates, viewer, launched):
    _, secret = api_token_with_secret(user=viewer)
    _, other = api_token_with_secret(user=user_with_role("viewer", username="otto"))
    job = preview(client, candidates[0], secret).json()

    cancelled = client.delete(job["url"], headers=bearer(other))
    again = client.delete(job["url"], headers=bearer(secret))

    assert cancelled.status_code == 200
    assert (cancelled.json()["status"], cancelled.json()["error"]) == ("cancelled", "cancelled by otto")
    assert again.status_code == 200 and again.json()["error"] == "cancelled by otto"  # ended: as it was
    # It no longer counts against its starter's quota.
    assert ImpactRun.objects.get().status == "cancelled"
