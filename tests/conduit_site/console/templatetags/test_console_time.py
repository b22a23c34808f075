"""Timestamps on the console: every one a ``<time datetime>`` in UTC to the
second, with the zone named, relative ages where recency matters; the browser's rendering is
in tests/browser/test_home_browser.py."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.template import Context, Template, TemplateSyntaxError
from django.urls import reverse

from conduit_site.console.templatetags.console_time import timetag
from tests.causal.factories import CausalDiagnosticFactory, EventFactory
from tests.routing.factories import GenerationFactory, RouteRecordFactory, UserFactory, live_scopes
from tests.worklife.factories import AttemptFactory, WorkFactory, WorkInputFactory

pytestmark = pytest.mark.django_db

AT = datetime(2026, 1, 5, 12, 0, 7, 123456, tzinfo=UTC)
# A clock time (12:00:07 and the like) or a date with one, outside any <time> element.
BARE_TIME = re.compile(r"\d{1,2}:\d{2}(:\d{2})?|\d{4}-\d{2}-\d{2}")


def test_timetag_is_a_time_element_in_utc_to_the_second():
    assert timetag(AT) == '<time datetime="2026-01-05T12:00:07.123456Z">2026-01-05 12:00:07 UTC</time>'
    # Another zone is shown as UTC.
    berlin = AT.astimezone(timezone(timedelta(hours=1)))
    assert timetag(berlin) == timetag(AT)
    assert (
        timetag(AT.replace(microsecond=0))
        == '<time datetime="2026-01-05T12:00:07Z">2026-01-05 12:00:07 UTC</time>'
    )


def test_timetag_ago_marks_a_relative_age_and_none_is_a_dash():
    assert timetag(AT, "ago") == (
        '<time datetime="2026-01-05T12:00:07.123456Z" data-ago>2026-01-05 12:00:07 UTC</time>'
    )
    assert timetag(None) == "—"


def test_timetag_refuses_naive_times_and_unknown_styles():
    with pytest.raises(TemplateSyntaxError):
        timetag(AT.replace(tzinfo=None))
    with pytest.raises(TemplateSyntaxError):
        timetag(AT, "relative")
    with pytest.raises(TemplateSyntaxError):
        timetag("2026-01-05")


def test_timetag_is_loaded_in_every_template():
    rendered = Template("<p>{{ when|timetag:'ago' }}</p>").render(Context({"when": AT}))
    assert (
        rendered
        == '<p><time datetime="2026-01-05T12:00:07.123456Z" data-ago>2026-01-05 12:00:07 UTC</time></p>'
    )


def outside_time_elements(body: str) -> str:
    main = body.split('<main id="main" tabindex="-1">', 1)[1]
    main = re.sub(r"<time datetime=\"[^\"]+\"( data-ago)?>[^<]*</time>", "", main)
    # Payloads (an envelope's own "time", data) are shown as they are, not as console times.
    main = re.sub(r"<(pre|textarea)[^>]*>.*?</\1>", "", main, flags=re.S)
    # Attribute values (ids, hrefs, SVG coordinates) are not shown text.
    return re.sub(r"<[^>]+>", " ", main)


@pytest.fixture
def pages(client):
    client.force_login(UserFactory(username="operator", is_superuser=True))
    live_scopes("acme")
    work = WorkFactory(created_at=AT, updated_at=AT, parked_at=AT, failures=5, retry_at=AT)
    event = EventFactory(accepted_at=AT, time=AT, route_state="routed", routed_at=AT)
    RouteRecordFactory(event=event, work=work, decided_at=AT)
    dead = EventFactory(accepted_at=AT, route_state="failed", routed_at=AT)
    RouteRecordFactory(event=dead, policy="failed", disposition="failed", decided_at=AT)
    attempt = AttemptFactory(work=work, started_at=AT, ended_at=AT, state="failed")
    WorkInputFactory(work=work, event=event, attempt=attempt)
    unrouted = EventFactory(accepted_at=AT, correlation=[], work_id=work.pk, retry_at=AT)
    CausalDiagnosticFactory(at=AT, root_seq=event.seq, minute=AT)
    candidate = GenerationFactory(kind="candidate", number=None, created_at=AT)
    return {
        "setup": [],
        "candidate-detail": [candidate.pk],
        "console-home": [],
        "event-list": [],
        "event-detail": [event.seq],
        "work-list": [],
        "work-detail": [work.pk],
        "dead-letters": [],
        "config-list": [],
        "doctor": [],
        "causal-root": [event.seq],
        "causal-diagnostics": [],
        "unrouted": [unrouted.seq],
    }


def test_every_page_shows_its_timestamps_as_time_elements(client, pages):
    for name, args in pages.items():
        if name == "unrouted":
            name = "event-detail"
        body = client.get(reverse(name, args=args)).content.decode()
        assert "<time datetime=" in body, name
        bare = BARE_TIME.search(outside_time_elements(body))
        assert bare is None, (name, bare and bare.string[max(bare.start() - 80, 0) : bare.end() + 40])


def test_lists_show_relative_ages(client, pages):
    for name in ("event-list", "work-list", "dead-letters", "causal-diagnostics", "setup"):
        body = client.get(reverse(name)).content.decode()
        assert (
            '<time datetime="2026-01-05T12:00:07.123456Z" data-ago>2026-01-05 12:00:07 UTC</time>' in body
        ), name
