"""The home page's trends and counts, the heartbeat banner on every page, and Doctor's own
refresh."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from causal.models import RouteState
from conduit_site.console.templatetags import console_health
from conduit_site.console.views import doctor as doctor_views
from conduit_site.console.views import home as home_views
from routing.engine.heartbeat import HEARTBEATS_NAMESPACE as ROUTE_HEARTBEATS
from tests.causal.factories import EventFactory, KVFactory
from tests.conduit_site.console.views.consolekit import count_queries, text
from tests.routing.factories import GenerationFactory, RouteRecordFactory, UserFactory
from tests.worklife.factories import WorkFactory
from worklife.heartbeat import HEARTBEATS_NAMESPACE as WORK_HEARTBEATS

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 1, 5, 12, 30, 20, tzinfo=UTC)


@pytest.fixture
def fixed_clocks(clock, monkeypatch):
    clock.set(NOW)
    monkeypatch.setattr(home_views, "clock", clock)
    monkeypatch.setattr(doctor_views, "clock", clock)
    monkeypatch.setattr(console_health, "clock", clock)
    return clock


def beat(namespace, *, at=NOW, **value):
    return KVFactory(
        namespace=namespace, key=f"host:{namespace}", updated_at=at, value={"at": at.isoformat(), **value}
    )


def both_loops_alive(at=NOW):
    beat(ROUTE_HEARTBEATS, at=at, passes=3)
    beat(WORK_HEARTBEATS, at=at, slots=4, stopped=False)


def chart(body: str, chart_id: str) -> str:
    match = re.search(rf'<figure class="chart" id="{chart_id}">(.*?)</figure>', body, re.S)
    assert match, chart_id
    return match.group(1)


def table_row(body: str, span: str, iso: str) -> list[str]:
    """The cells of the span's data table for the bucket starting at ``iso``."""
    table = re.search(
        rf'<div class="visually-hidden"><table id="trends-{span}-table">(.*?)</table>', body, re.S
    )
    assert table, span
    match = re.search(
        rf'<tr><th scope="row"><time datetime="{iso}">[^<]*</time></th>(.*?)</tr>', table.group(1)
    )
    assert match, iso
    return re.findall(r"<td>([^<]*)</td>", match.group(1))


def table_rows(body: str, span: str) -> int:
    table = re.search(
        rf'<div class="visually-hidden"><table id="trends-{span}-table">(.*?)</table>', body, re.S
    )
    return len(re.findall(r'<tr><th scope="row">', table.group(1)))


# --- trends -------------------------------------------------------------------------------------


@pytest.mark.usefixtures("fixed_clocks")
def test_home_draws_eight_accessible_charts_with_their_data(console):
    both_loops_alive()
    minute = datetime(2026, 1, 5, 12, 25, tzinfo=UTC)
    EventFactory.create_batch(3, accepted_at=minute + timedelta(seconds=5))
    RouteRecordFactory(
        event=EventFactory(accepted_at=minute, route_state="routed", routed_at=minute + timedelta(seconds=2)),
        decided_at=minute + timedelta(seconds=2),
    )
    RouteRecordFactory(
        event=EventFactory(accepted_at=minute, route_state="failed"),
        decided_at=minute + timedelta(seconds=3),
        policy="failed",
        disposition="failed",
    )

    body = console.get(reverse("console-home")).content.decode()

    ids = re.findall(r'<figure class="chart" id="([^"]+)">', body)
    assert ids == [
        f"chart-{kind}-{span}"
        for span in ("hour", "day")
        for kind in ("events", "attempts", "latency", "backlog")
    ]
    events = chart(body, "chart-events-hour")
    # The SVG names itself (title and desc) and is drawn without a script.
    assert re.search(
        r'<svg viewBox="0 0 640 180" role="img" aria-labelledby="chart-events-hour-svg-title chart-events-hour-svg-desc"',
        events,
    )
    assert '<title id="chart-events-hour-svg-title">Events per minute, in the last hour</title>' in events
    assert (
        "Events in the last hour: 5 accepted, peaking at 5 a minute 5 min ago; 1 routed, 0 unmatched, 1 dead-lettered."
        in events
    )
    assert "<script" not in body.split("</head>")[1]
    # Each series is a polyline with a point a bucket, its class naming the series.
    series = re.search(
        r'<g class="chart-series series-accepted" data-series="accepted"><polyline points="([^"]+)"/>', events
    )
    assert series and len(series.group(1).split()) == 60
    # The data table: a row a minute; counts, attempts, latency p50 and p99, backlog.
    assert table_row(body, "hour", "2026-01-05T12:25:00Z") == [
        "5",
        "1",
        "0",
        "1",
        "0",
        "0",
        "0",
        "2.0 s",
        "2.0 s",
        "3",
    ]
    assert table_row(body, "hour", "2026-01-05T12:24:00Z") == [
        "0",
        "0",
        "0",
        "0",
        "0",
        "0",
        "0",
        "—",
        "—",
        "0",
    ]
    assert table_row(body, "hour", "2026-01-05T12:30:00Z")[-1] == "3"  # the three still unrouted
    assert table_rows(body, "hour") == 60
    assert table_rows(body, "day") == 72
    # 5 Events in the 20-minute bucket from 12:20 (the table counts; the chart draws 0.25 a minute).
    assert table_row(body, "day", "2026-01-05T12:20:00Z")[0] == "5"
    assert "Events per minute, averaged over 20 minutes, in the last day" in chart(body, "chart-events-day")


@pytest.mark.usefixtures("fixed_clocks")
def test_home_lists_parked_work_once_under_needs_attention_beside_dead_letters_and_doctor_warnings(console):
    both_loops_alive()
    for _ in range(2):
        RouteRecordFactory(event=EventFactory(route_state="failed"), policy="failed", disposition="failed")
    RouteRecordFactory(event=EventFactory(route_state="skipped"), policy="skipped", disposition="skipped")
    WorkFactory(parked_at=NOW - timedelta(minutes=3), failures=5)

    body = console.get(reverse("console-home")).content.decode()

    assert '<span class="num" id="dead-letters-count">3</span>' in body
    assert '<span class="num" id="parked-count">1</span>' in body
    # The parked Work is doctor's one warning, listed once under "Needs attention": on its own line.
    attention = re.search(r'<section class="card" id="attention-summary">(.*?)</section>', body, re.S).group(
        1
    )
    assert attention.count("Parked Work") == 1
    assert '<span class="num" id="doctor-warnings-count">0</span>' in attention
    assert "#check-parked_work" not in attention


@pytest.mark.usefixtures("fixed_clocks")
def test_dead_letters_count_is_capped(console, monkeypatch):
    from conduit_site.console import trends

    both_loops_alive()
    for _ in range(3):
        RouteRecordFactory(event=EventFactory(route_state="failed"), policy="failed", disposition="failed")
    assert trends.dead_letters_count(cap=2) == (2, True)
    assert trends.dead_letters_count(cap=3) == (3, False)
    monkeypatch.setattr(trends, "COUNT_CAP", 2)
    body = console.get(reverse("console-home")).content.decode()
    assert '<span class="num" id="dead-letters-count">2+</span>' in body


# --- the heartbeat banner -----------------------------------------------------------------------


PAGES = ("console-home", "event-list", "work-list", "dead-letters", "config-list", "doctor")


@pytest.mark.usefixtures("fixed_clocks")
@pytest.mark.parametrize("page", PAGES)
def test_no_banner_while_both_loops_beat(console, page):
    both_loops_alive(at=NOW - timedelta(seconds=59))
    body = console.get(reverse(page)).content.decode()
    assert 'id="heartbeat-banner"' not in body


@pytest.mark.usefixtures("fixed_clocks")
@pytest.mark.parametrize("page", PAGES)
def test_banner_on_every_page_without_a_route_loop_heartbeat(console, page):
    beat(WORK_HEARTBEATS, slots=2, stopped=False)
    beat(ROUTE_HEARTBEATS, at=NOW - timedelta(seconds=61))  # too old
    body = console.get(reverse(page)).content.decode()
    banner = re.search(
        r'<p class="heartbeat-banner" id="heartbeat-banner" role="alert">(.*?)</p>', body, re.S
    )
    assert banner, page
    assert "No route loop heartbeat in the last 60 s: accepted Events are not being routed." in banner.group(
        1
    )
    assert f'<a href="{reverse("doctor")}">See Doctor</a>' in banner.group(1)
    assert "work loop" not in banner.group(1)


@pytest.mark.usefixtures("fixed_clocks")
def test_banner_names_a_stopped_or_missing_work_loop(console):
    beat(ROUTE_HEARTBEATS)
    beat(WORK_HEARTBEATS, slots=2, stopped=True)  # fresh, but it said it stopped
    body = console.get(reverse("event-list")).content.decode()
    assert "No work loop heartbeat in the last 60 s: Work is not being run." in body


@pytest.mark.usefixtures("fixed_clocks")
def test_banner_names_both_loops_when_neither_beats(console):
    body = console.get(reverse("work-list")).content.decode()
    assert (
        "No route loop and no work loop heartbeat in the last 60 s: accepted Events are not being "
        "routed and Work is not being run." in body
    )


@pytest.mark.usefixtures("fixed_clocks")
def test_no_banner_before_sign_in(client):
    body = client.get(reverse("login")).content.decode()
    assert "heartbeat-banner" not in body


@pytest.mark.usefixtures("fixed_clocks")
def test_banner_costs_one_query(console, django_assert_num_queries):
    from conduit_site.doctor import loops_alive

    both_loops_alive()
    with django_assert_num_queries(1):
        assert loops_alive(now=NOW).ok


# --- Doctor refreshes itself ---------------------------------------------------------------------


@pytest.mark.usefixtures("fixed_clocks")
def test_doctor_checks_poll_themselves(console):
    body = console.get(reverse("doctor")).content.decode()
    assert re.search(
        r'<section id="doctor-checks" hx-get="/doctor/" hx-trigger="every 10s" hx-target="this" hx-swap="outerHTML">',
        body,
    )
    # What the poll asks for is the checks alone.
    partial = console.get(
        reverse("doctor"), HTTP_HX_REQUEST="true", HTTP_HX_TARGET="doctor-checks"
    ).content.decode()
    assert partial.lstrip().startswith('<section id="doctor-checks"') and "<html" not in partial


@pytest.mark.usefixtures("fixed_clocks")
def test_home_says_which_latency_buckets_wait_for_a_later_page(console, monkeypatch):
    from conduit_site.console import trends

    both_loops_alive()
    for minute in (10, 11):
        decided = datetime(2026, 1, 5, 12, minute, 30, tzinfo=UTC)
        RouteRecordFactory(
            event=EventFactory(
                accepted_at=decided - timedelta(seconds=1), route_state="routed", routed_at=decided
            ),
            decided_at=decided,
        )
    monkeypatch.setattr(trends, "RANK_BUDGET", 0)
    latency = chart(console.get(reverse("console-home")).content.decode(), "chart-latency-hour")
    assert '<p class="muted chart-note">The 41 oldest buckets are not ranked yet' in latency
    latency = chart(console.get(reverse("console-home")).content.decode(), "chart-latency-hour")
    assert '<p class="muted chart-note">The 40 oldest buckets are not ranked yet' in latency


@pytest.mark.usefixtures("fixed_clocks")
def test_the_home_card_names_doctors_warnings_in_words(client, clock, monkeypatch):
    from conduit_site.console.views import doctor as doctor_views
    from conduit_site.console.views import home as home_views
    from conduit_site.supervision.restarts import restart_record

    clock.set(NOW)
    monkeypatch.setattr(home_views, "clock", clock)
    monkeypatch.setattr(doctor_views, "clock", clock)
    both_loops_alive()
    restart_record(child="work_loop", status=-9, restarts=1, clock=clock, host="web-1")
    client.force_login(UserFactory())

    card = client.get("/").content.decode()
    card = card[card.index('id="attention-summary"') :]
    card = card[: card.index("</section>")]
    assert "Restarted processes</a></p>" in card and "supervision<" not in card


@pytest.mark.usefixtures("fixed_clocks")
def test_each_chart_point_has_a_tooltip_with_its_values(client, clock, monkeypatch):
    from datetime import UTC, datetime, timedelta

    from conduit_site.console.views import doctor as doctor_views
    from conduit_site.console.views import home as home_views

    clock.set(NOW)
    monkeypatch.setattr(home_views, "clock", clock)
    monkeypatch.setattr(doctor_views, "clock", clock)
    both_loops_alive()
    minute = datetime(2026, 1, 5, 12, 25, tzinfo=UTC)
    EventFactory.create_batch(3, accepted_at=minute + timedelta(seconds=5))
    client.force_login(UserFactory())

    body = client.get("/").content.decode()

    events = chart(body, "chart-events-hour")
    titles = re.findall(r'<rect class="chart-hit" [^>]*><title>([^<]*)</title></rect>', events)
    assert len(titles) == 60
    # The bucket of 12:25, five before the current one (12:30), by its age as the axis says it.
    assert "−5 min: accepted 3, routed 0, unmatched 0, dead-lettered 0 (Events per minute)" in titles
    assert titles[-1].startswith("now: ")
    days = re.findall(r'<rect class="chart-hit"', chart(body, "chart-backlog-day"))
    assert len(days) == 72
    # The same figures stay in the span's table for screen readers.
    assert '<table id="trends-hour-table">' in body


# --- the home page and the base layout (D4) -------------------------------------------------------


def test_d4_base_layout_loads_vendored_htmx_and_puts_csrf_in_hx_headers(signed_in):
    body = text(signed_in.get(reverse("console-home")))
    assert '<script src="/static/htmx/htmx.min.js" defer></script>' in body
    assert '<script src="/static/htmx/ext/ws.min.js" defer></script>' in body
    assert re.search(r"<body hx-headers='\{\"X-CSRFToken\": \"[A-Za-z0-9]+\"\}'>", body)
    assert "http://" not in body and "https://" not in body


def test_d4_home_counts_unrouted_events_work_by_status_and_names_the_live_generation(signed_in):
    EventFactory.create_batch(3)
    EventFactory(route_state=RouteState.ROUTED)
    WorkFactory.create_batch(2, status="running")
    WorkFactory(status="completed")
    GenerationFactory(number=1)
    GenerationFactory(number=2)
    GenerationFactory(kind="candidate", number=None)

    body = text(signed_in.get(reverse("console-home")))

    assert re.search(r"Unrouted Events</h2>\s*<div class=\"figure\">3</div>", body)
    assert re.search(r"badge-running\">running</span></a><span class=\"num\">2</span>", body)
    assert re.search(r"badge-completed\">completed</span></a><span class=\"num\">1</span>", body)
    assert re.search(r"badge-ready\">ready</span></a><span class=\"num\">0</span>", body)
    assert "generation 2, applied" in body
    for name in ("event-list", "work-list", "config-list"):
        assert f'href="{reverse(name)}' in body


def test_d4_list_pages_and_home_query_counts_are_independent_of_history(signed_in):
    def counts():
        return [
            count_queries(signed_in, reverse("work-list")),
            count_queries(signed_in, reverse("config-list")),
            count_queries(signed_in, reverse("console-home")),
        ]

    WorkFactory.create_batch(5)
    GenerationFactory.create_batch(5)
    small = counts()
    WorkFactory.create_batch(55)
    GenerationFactory.create_batch(55)
    assert counts() == small
