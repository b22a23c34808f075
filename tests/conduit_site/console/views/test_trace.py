"""The trace page: a filter limits the routes asked (R37); "Trace this Event"
traces a routed Event as new, saying first that routing already decided it, with every route's
verdict."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.urls import reverse

from causal.models import Event
from causal.services import event_envelope
from routing.acceptance.envelopes import parse_envelope
from routing.acceptance.raw import raw_envelope
from routing.acceptance.services import event_accept
from routing.engine.options import RouterOptions
from routing.engine.router import build_router
from routing.models import Disposition, RouteRecord
from tests.routing.factories import CHANGED, RouteRecordFactory, apply_config, user_with_role

pytestmark = pytest.mark.django_db

HTMX_RESULT = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "trace-result"}
ROUTES = ["prs", "chat", "stop", "notes", "noise"]  # scope acme of the default test configuration


@pytest.fixture
def console(client):
    apply_config()
    client.force_login(user_with_role("viewer", username="vera"))
    return client


def accept(clock, n: int = 7) -> Event:
    payload = {
        "specversion": "1.0",
        "id": f"gh-{n}",
        "source": "github",
        "type": "github.pull_request.opened",
        "scope": "acme",
        "data": {"repository": "acme/api", "number": n},
    }
    return event_accept(payload=payload, clock=clock).event


def route(clock, event: Event) -> None:
    router = build_router(clock=clock, options=RouterOptions(workers=1))
    try:
        router.route(event.seq)
    finally:
        router.close()


def verdict_rows(html: str) -> list[tuple[str, str]]:
    table = re.search(r'<table class="list trace-verdicts">(.*?)</table>', html, re.S).group(1)
    return re.findall(r'<tr class="verdict-(\w+)"><td>([^<]*)</td>', table)


def test_r37_trace_filter_limits_the_routes_evaluated_on_the_page(console):
    chat = '{"source": "m", "type": "chat.message", "scope": "acme", "data": {"thread": "t"}}'
    page = console.get(reverse("trace")).content.decode()
    assert '<input type="text" name="filter" id="id_filter"' in page

    limited = console.post(reverse("trace"), {"event": chat, "filter": "noise, prs"}, **HTMX_RESULT)
    body = limited.content.decode()
    assert limited.status_code == 200
    assert verdict_rows(body) == [("skip", "prs"), ("skip", "noise")]
    assert "only the routes asked: prs, noise" in body and "badge-unmatched" in body

    unknown = console.post(reverse("trace"), {"event": chat, "filter": "chats"}, **HTMX_RESULT)
    assert unknown.status_code == 400
    assert (
        "Refused (filter): unknown route &#x27;chats&#x27; in scope acme; its routes are: "
        + ", ".join(ROUTES)
        in unknown.content.decode()
    )


def test_trace_this_event_traces_a_routed_event_as_new_saying_first_it_was_routed(console, clock):
    event = accept(clock)
    route(clock, event)
    record = RouteRecord.objects.get(event=event)

    page = console.get(reverse("trace"), {"event": event.seq})

    assert page.status_code == 200
    html = page.content.decode()
    recorded = re.search(r'<p class="trace-recorded">(.*?)</p>', html, re.S).group(1)
    assert f"Event #{event.seq}</a> was already routed</strong> on <time" in recorded
    assert f"to start on Work {record.work_id} via prs/agent" in recorded
    assert "this is what the live configuration (generation 1) would do with it now" in recorded
    assert html.index('class="trace-recorded"') < html.index('class="trace-effect"')  # up front
    assert verdict_rows(html) == [("match", "prs")] + [("not_reached", r) for r in ROUTES[1:]]
    # As new: its key is owned by the Work routing started for it, which it now joins.
    assert '<span class="badge badge-effect badge-queue">queue</span>' in html
    assert "duplicate" not in html and "The scope has no routes" not in html
    assert "already routed: routing decides an Event once" not in html  # no longer a footnote


def test_trace_this_event_against_a_candidate_traces_it_as_new_not_a_duplicate(console, clock):
    event = accept(clock)
    route(clock, event)
    candidate = apply_config(CHANGED, candidate=True)

    page = console.get(reverse("trace"), {"event": event.seq, "generation": f"candidate:{candidate.pk}"})

    html = page.content.decode()
    assert page.status_code == 200 and "badge-duplicate" not in html
    assert f"this is what candidate {candidate.pk} would do with it now" in html
    assert verdict_rows(html) and f'value="candidate:{candidate.pk}" selected' in html
    # The form posts the same envelope: the same trace, the same reason up front.
    envelope = unescape(re.search(r"<textarea[^>]*>(.*?)</textarea>", html, re.S).group(1))
    form = {"event": envelope, "generation": ""}
    again = console.post(reverse("trace"), form, **HTMX_RESULT).content.decode()
    assert "this is what the live configuration (generation 1) would do with it now" in again
    assert verdict_rows(again)[0] == ("match", "prs")


def test_trace_this_event_of_an_unrouted_event_traces_it_as_routing_will(console, clock):
    event = accept(clock)

    html = console.get(reverse("trace"), {"event": event.seq, "filter": "noise,prs"}).content.decode()

    assert 'class="trace-recorded"' not in html
    assert f"its source and id are accepted Event #{event.seq}" in html
    assert verdict_rows(html) == [("match", "prs"), ("not_reached", "noise")]
    assert '<span class="badge badge-effect badge-start">start</span>' in html
    assert 'name="filter" id="id_filter" value="noise,prs"' in html


def test_the_candidate_pages_trace_of_a_routed_event_is_traced_as_new_not_a_duplicate(console, clock):
    event = accept(clock)
    route(clock, event)
    candidate = apply_config(CHANGED, candidate=True)
    prefilled = console.get(reverse("candidate-detail", args=[candidate.pk]), {"event": event.seq})
    envelope = unescape(
        re.search(r"<textarea[^>]*>(.*?)</textarea>", prefilled.content.decode(), re.S).group(1)
    )
    assert 'name="filter" id="id_filter"' in prefilled.content.decode()

    traced = console.post(
        reverse("candidate-trace", args=[candidate.pk]),
        {"event": envelope, "generation": f"candidate:{candidate.pk}", "filter": "prs"},
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="candidate-trace-result",
    )

    html = traced.content.decode()
    assert traced.status_code == 200 and "badge-duplicate" not in html
    assert f"this is what candidate {candidate.pk} would do with it now" in html
    assert verdict_rows(html) == [("match", "prs")]


# Trace from anywhere. "Trace this Event" on the Event page (which shows the raw
# envelope too) and on dead letters, prefilled with the Event's raw envelope; a refused trace (400)
# replaces the previous result; the candidate's id is shown; verdict badges differ by verdict.
HTMX_RESULT = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "trace-result"}


@pytest.fixture
def viewer_client(client):
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


def test_the_event_page_shows_the_raw_envelope_and_trace_this_event(viewer_client, event):
    page = viewer_client.get(reverse("event-detail", args=[event.seq])).content.decode()

    assert f'<a href="/trace/?event={event.seq}" id="trace-this-event">Trace this Event</a>' in page
    shown = re.search(r'<pre class="data" id="event-raw-envelope"[^>]*>(.*?)</pre>', page, re.S).group(1)
    assert "&quot;id&quot;: &quot;gh-1&quot;" in shown and "ünïcode" in shown


def test_the_trace_page_is_prefilled_with_the_events_raw_envelope_and_traces_it(viewer_client, event):
    page = viewer_client.get(reverse("trace"), {"event": event.seq}).content.decode()

    assert f'Prefilled with the raw envelope of <a href="/events/{event.seq}/">Event #{event.seq}</a>' in page
    textarea = re.search(r'<textarea name="event"[^>]*>(.*?)</textarea>', page, re.S).group(1)
    offered = json.loads(textarea.replace("&quot;", '"').replace("&#x27;", "'").replace("&amp;", "&"))
    assert offered == raw_envelope(event)

    traced = viewer_client.post(reverse("trace"), {"event": json.dumps(offered)}, **HTMX_RESULT)
    assert traced.status_code == 200
    assert '<span class="badge badge-effect badge-start">start</span>' in traced.content.decode()


@pytest.mark.parametrize("seq", ["999", "x1"])
def test_an_unknown_event_to_prefill_is_404(viewer_client, event, seq):
    assert viewer_client.get(reverse("trace"), {"event": seq}).status_code == 404


def test_dead_letters_link_each_event_to_its_trace(client, clock):
    apply_config()
    client.force_login(user_with_role("operator", username="olga"))
    record = RouteRecordFactory(disposition=Disposition.FAILED, policy="failed", event__route_state="failed")

    page = client.get(reverse("dead-letters")).content.decode()

    assert f'<a href="/trace/?event={record.event.seq}" class="trace-link"' in page


def test_a_refused_trace_is_a_400_the_page_swaps_over_the_previous_result(viewer_client, event):
    response = viewer_client.post(
        reverse("trace"), {"event": '{"source": "s", "type": "t", "scope": "nowhere"}'}, **HTMX_RESULT
    )

    assert response.status_code == 400
    body = response.content.decode()
    # The partial's root names the statuses the console's script swaps in (static/js/console.js).
    assert body.lstrip().startswith('<section id="trace-result" aria-live="polite" data-swap-statuses="400">')
    assert "Refused (scope)" in body
    script = (Path(django_settings.BASE_DIR) / "static/js/console.js").read_text()
    assert "data-swap-statuses" in script and "shouldSwap = true" in script


def test_a_trace_against_a_candidate_names_the_candidates_id(viewer_client, event):
    candidate = apply_config(CHANGED, candidate=True)

    response = viewer_client.post(
        reverse("trace"),
        {
            "generation": f"candidate:{candidate.pk}",
            "event": '{"source": "m", "type": "alert.x", "scope": "acme"}',
        },
        **HTMX_RESULT,
    )

    body = response.content.decode()
    assert f'<dd>candidate {candidate.pk} <span class="badge badge-candidate">not applied</span></dd>' in body
    live = viewer_client.post(
        reverse("trace"), {"event": '{"source": "m", "type": "alert.x", "scope": "acme"}'}, **HTMX_RESULT
    )
    assert "<dd>generation 1</dd>" in live.content.decode()


def test_verdict_badges_differ_by_verdict(viewer_client, event):
    response = viewer_client.post(
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
