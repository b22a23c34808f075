"""The Flow page (conduit_site.console.views.flow): pauses in force with Resume, a form to pause,
schedules with next and last fire times, Pause/Resume and Fire now; the banner on every page
names what is paused; plain forms, so it works without JavaScript."""

from __future__ import annotations

import pytest
from django.urls import reverse

import conduit_site.console.templatetags.console_health
import conduit_site.console.views.flow
from tests.routing.factories import user_with_role
from tests.routing.schedulekit import apply_schedule, fired_events
from worklife.models import Pause

pytestmark = pytest.mark.django_db


@pytest.fixture
def page(client, clock, monkeypatch):
    monkeypatch.setattr(conduit_site.console.views.flow, "clock", clock)
    monkeypatch.setattr(conduit_site.console.templatetags.console_health, "clock", clock)
    apply_schedule(clock, every=3600)
    client.force_login(user_with_role("operator", username="alice"))
    return client


def test_an_operator_pauses_a_binding_from_the_page_and_every_page_then_says_so(page):
    response = page.post(
        reverse("flow-pause"),
        {"kind": "binding", "scope": "s", "name": "inbox", "reason": "incident 42", "until": "30m"},
        follow=True,
    )
    body = response.content.decode()
    assert "binding &#x27;inbox&#x27; in s: paused by alice at 2026-01-05 12:00: incident 42" in body
    assert 'id="pause-banner"' in body
    events_page = page.get(reverse("event-list")).content.decode()
    assert "Paused: binding &#x27;inbox&#x27; in s (paused by alice" in events_page
    page.post(reverse("flow-resume"), {"kind": "binding", "scope": "s", "name": "inbox"})
    assert not Pause.objects.filter(ended_at__isnull=True).exists()
    assert 'id="pause-banner"' not in page.get(reverse("flow")).content.decode()


def test_a_refused_pause_shows_why_and_stores_nothing(page):
    response = page.post(reverse("flow-pause"), {"kind": "route", "scope": "s", "name": "nope"}, follow=True)
    assert "scope s declares no route &#x27;nope&#x27;" in response.content.decode()
    assert not Pause.objects.exists()


def test_the_page_lists_schedules_with_their_next_fire_and_fires_one_now(page):
    body = page.get(reverse("flow")).content.decode()
    assert 'id="schedule-s-tick"' in body and "every 3600 s" in body and "2026-01-05T13:00:00" in body
    page.post(reverse("flow-fire"), {"scope": "s", "name": "tick"})
    assert len(fired_events()) == 1
    page.post(reverse("flow-pause"), {"kind": "schedule", "scope": "s", "name": "tick"})
    body = page.get(reverse("flow")).content.decode()
    assert "fired now by alice" in body and 'badge-refused">paused</span> paused by alice' in body


def test_a_viewer_sees_the_page_without_its_controls(client, clock, monkeypatch):
    monkeypatch.setattr(conduit_site.console.views.flow, "clock", clock)
    apply_schedule(clock, every=3600)
    client.force_login(user_with_role("viewer"))
    body = client.get(reverse("flow")).content.decode()
    assert 'id="flow-schedules"' in body and "Fire now" not in body and 'id="pause-form"' not in body
    assert client.post(reverse("flow-fire"), {"scope": "s", "name": "tick"}).status_code == 403
