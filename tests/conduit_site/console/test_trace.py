"""The trace page: a filter limits the routes asked (R37); "Trace this Event"
traces a routed Event as new, saying first that routing already decided it, with every route's
verdict."""

from __future__ import annotations

import re
from html import unescape

import pytest
from django.urls import reverse

from causal.models import Event
from routing.acceptance.services import event_accept
from routing.engine.options import RouterOptions
from routing.engine.router import build_router
from routing.models import RouteRecord
from tests.routing.factories import CHANGED, apply_config, user_with_role

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
