"""Trace from anywhere. "Trace this Event" on the Event page (which shows the raw
envelope too) and on dead letters, prefilled with the Event's raw envelope; a refused trace (400)
replaces the previous result; the candidate's id is shown; verdict badges differ by verdict."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.urls import reverse

from causal.services import event_envelope
from routing.acceptance.envelopes import parse_envelope
from routing.acceptance.raw import raw_envelope
from routing.acceptance.services import event_accept
from routing.models import Disposition
from tests.routing.factories import CHANGED, RouteRecordFactory, apply_config, user_with_role

pytestmark = pytest.mark.django_db

HTMX_RESULT = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "trace-result"}


@pytest.fixture
def console(client):
    client.force_login(user_with_role("viewer", username="vera"))
    return client


@pytest.fixture
def event(clock):
    apply_config()
    payload = {
        "specversion": "1.0",
        "id": "gh-1",
        "source": "github",
        "type": "github.pull_request.opened",
        "scope": "acme",
        "subject": "PR 7",
        "time": "2026-01-05T11:00:00Z",
        "correlation": ["pr:acme/api#7"],
        "traceparent": "00-abc",
        "data": {"repository": "acme/api", "number": 7, "title": "ünïcode"},
    }
    return event_accept(payload=payload, clock=clock, may_address_work=True).event


def test_the_raw_envelope_offers_the_same_envelope_again(event):
    raw = raw_envelope(event)
    assert raw["traceparent"] == "00-abc" and raw["time"] == "2026-01-05T11:00:00Z"
    assert "datacontenttype" not in raw and "work_id" not in raw
    assert parse_envelope(raw) == event_envelope(event)


def test_the_event_page_shows_the_raw_envelope_and_trace_this_event(console, event):
    page = console.get(reverse("event-detail", args=[event.seq])).content.decode()

    assert f'<a href="/trace/?event={event.seq}" id="trace-this-event">Trace this Event</a>' in page
    shown = re.search(r'<pre class="data" id="event-raw-envelope"[^>]*>(.*?)</pre>', page, re.S).group(1)
    assert "&quot;id&quot;: &quot;gh-1&quot;" in shown and "ünïcode" in shown


def test_the_trace_page_is_prefilled_with_the_events_raw_envelope_and_traces_it(console, event):
    page = console.get(reverse("trace"), {"event": event.seq}).content.decode()

    assert f'Prefilled with the raw envelope of <a href="/events/{event.seq}/">Event #{event.seq}</a>' in page
    textarea = re.search(r'<textarea name="event"[^>]*>(.*?)</textarea>', page, re.S).group(1)
    offered = json.loads(textarea.replace("&quot;", '"').replace("&#x27;", "'").replace("&amp;", "&"))
    assert offered == raw_envelope(event)

    traced = console.post(reverse("trace"), {"event": json.dumps(offered)}, **HTMX_RESULT)
    assert traced.status_code == 200
    assert '<span class="badge badge-effect badge-start">start</span>' in traced.content.decode()


@pytest.mark.parametrize("seq", ["999", "x1"])
def test_an_unknown_event_to_prefill_is_404(console, event, seq):
    assert console.get(reverse("trace"), {"event": seq}).status_code == 404


def test_dead_letters_link_each_event_to_its_trace(client, clock):
    apply_config()
    client.force_login(user_with_role("operator", username="olga"))
    record = RouteRecordFactory(disposition=Disposition.FAILED, policy="failed", event__route_state="failed")

    page = client.get(reverse("dead-letters")).content.decode()

    assert f'<a href="/trace/?event={record.event.seq}" class="trace-link"' in page


def test_a_refused_trace_is_a_400_the_page_swaps_over_the_previous_result(console, event):
    response = console.post(
        reverse("trace"), {"event": '{"source": "s", "type": "t", "scope": "nowhere"}'}, **HTMX_RESULT
    )

    assert response.status_code == 400
    body = response.content.decode()
    # The partial's root names the statuses the console's script swaps in (static/js/console.js).
    assert body.lstrip().startswith('<section id="trace-result" aria-live="polite" data-swap-statuses="400">')
    assert "Refused (scope)" in body
    script = (Path(django_settings.BASE_DIR) / "static/js/console.js").read_text()
    assert "data-swap-statuses" in script and "shouldSwap = true" in script


def test_a_trace_against_a_candidate_names_the_candidates_id(console, event):
    candidate = apply_config(CHANGED, candidate=True)

    response = console.post(
        reverse("trace"),
        {
            "generation": f"candidate:{candidate.pk}",
            "event": '{"source": "m", "type": "alert.x", "scope": "acme"}',
        },
        **HTMX_RESULT,
    )

    body = response.content.decode()
    assert f'<dd>candidate {candidate.pk} <span class="badge badge-candidate">not applied</span></dd>' in body
    live = console.post(
        reverse("trace"), {"event": '{"source": "m", "type": "alert.x", "scope": "acme"}'}, **HTMX_RESULT
    )
    assert "<dd>generation 1</dd>" in live.content.decode()


def test_verdict_badges_differ_by_verdict(console, event):
    response = console.post(
        reverse("trace"),
        {"event": '{"source": "m", "type": "chat.message", "scope": "acme", "data": {"thread": "t"}}'},
    )
    body = response.content.decode()
    assert 'class="badge badge-verdict badge-verdict-skip">skip<' in body  # prs declines
    assert 'class="badge badge-verdict badge-verdict-match">match<' in body  # chat matches
    assert 'class="badge badge-verdict badge-verdict-not_reached">not_reached<' in body  # after the match
    css = (Path(django_settings.BASE_DIR) / "static/css/setup.css").read_text()
    looks = {
        verdict: re.search(rf"\.badge-verdict-{verdict} \{{([^}}]*)\}}", css).group(1).strip()
        for verdict in ("match", "skip", "not_reached", "bypassed", "error")
    }
    assert len(set(looks.values())) == 5, looks
