"""The API of pauses and schedules (conduit_site.api.flow): pause with who, why and until, resume,
list, schedules with next and last fire times, fire now; refusals are 409 or 400 and store nothing."""

from __future__ import annotations

import pytest
from django.test import Client

import conduit_site.api.flow
from tests.routing.factories import api_token_with_secret, user_with_role
from tests.routing.schedulekit import apply_schedule
from worklife.models import Pause

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(clock, monkeypatch):
    monkeypatch.setattr(conduit_site.api.flow, "clock", clock)
    apply_schedule(clock, every=3600)
    _, secret = api_token_with_secret(user=user_with_role("operator", username="alice"))
    client = Client(headers={"Authorization": f"Bearer {secret}"})
    return client


def test_an_operator_pauses_a_binding_with_a_reason_and_an_until_then_resumes_it(api, clock):
    made = api.post(
        "/api/pauses",
        {"kind": "binding", "scope": "s", "name": "inbox", "reason": "incident 42", "until": "2h"},
        content_type="application/json",
    )
    assert made.status_code == 201, made.content
    body = made.json()
    assert (body["paused_by"], body["reason"], body["until"]) == (
        "alice",
        "incident 42",
        "2026-01-05T14:00:00Z",
    )
    assert body["line"].startswith("paused by alice at 2026-01-05 12:00: incident 42")
    listed = api.get("/api/pauses").json()["pauses"]
    assert [p["name"] for p in listed] == ["inbox"]
    again = api.post(
        "/api/pauses", {"kind": "binding", "scope": "s", "name": "inbox"}, content_type="application/json"
    )
    assert again.status_code == 409 and "paused already" in again.json()["message"]
    resumed = api.post(
        "/api/pauses/resume",
        {"kind": "binding", "scope": "s", "name": "inbox"},
        content_type="application/json",
    )
    assert resumed.status_code == 200 and resumed.json()["ended_by"] == "alice"
    assert api.get("/api/pauses").json()["pauses"] == []


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"kind": "queue", "scope": "s"}, 400, "kind"),
        ({"kind": "binding", "scope": "s"}, 409, None),
        ({"kind": "scope", "scope": "s", "until": "soon"}, 400, "until"),
        ({"kind": "scope", "scope": "s", "colour": "red"}, 400, "colour"),
        ({"kind": "binding", "scope": "s", "name": "nope"}, 409, None),
        ({"kind": "route", "scope": "nowhere", "name": "x"}, 409, None),
    ],
)
def test_a_bad_or_refused_pause_stores_nothing(api, body, status, field):
    response = api.post("/api/pauses", body, content_type="application/json")
    assert response.status_code == status, response.content
    if field:
        assert response.json()["field"] == field
    assert not Pause.objects.exists()


def test_schedules_list_their_next_fire_and_one_fires_now(api):
    [row] = api.get("/api/schedules").json()["schedules"]
    assert (row["name"], row["when"], row["next_fire"], row["last_fire"]) == (
        "tick",
        "every 3600 s",
        "2026-01-05T13:00:00Z",
        None,
    )
    fired = api.post("/api/schedules/fire", {"scope": "s", "name": "tick"}, content_type="application/json")
    assert fired.status_code == 201 and fired.json()["id"].startswith("schedule/tick/now/")
    [row] = api.get("/api/schedules").json()["schedules"]
    assert row["last_event"] == fired.json()["seq"] and row["last_outcome"] == "fired now by alice"
    missing = api.post("/api/schedules/fire", {"scope": "s", "name": "nope"}, content_type="application/json")
    assert missing.status_code == 409
