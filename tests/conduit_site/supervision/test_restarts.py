"""What serve restarted, as doctor and the console's banner show it."""

from __future__ import annotations

import io
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from conduit_site.console.templatetags import console_health
from conduit_site.doctor import check_supervision, loops_alive
from conduit_site.supervision.restarts import restart_record, restarts_recent
from routing.engine.heartbeat import HEARTBEATS_NAMESPACE as ROUTE_HEARTBEATS
from tests.causal.factories import KVFactory
from tests.routing.factories import UserFactory
from worklife.heartbeat import HEARTBEATS_NAMESPACE as WORK_HEARTBEATS

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 1, 5, 12, 30, 20, tzinfo=UTC)


@pytest.fixture(autouse=True)
def fixed_clock(clock, monkeypatch):
    clock.set(NOW)
    monkeypatch.setattr(console_health, "clock", clock)
    return clock


@pytest.fixture
def console(client):
    client.force_login(UserFactory(username="operator"))
    return client


def both_loops_alive():
    KVFactory(namespace=ROUTE_HEARTBEATS, key="h:r", updated_at=NOW, value={"at": NOW.isoformat()})
    KVFactory(
        namespace=WORK_HEARTBEATS, key="h:w", updated_at=NOW, value={"at": NOW.isoformat(), "stopped": False}
    )


def test_a_restart_is_recorded_once_a_child_and_counted(clock):
    restart_record(child="work_loop", status=-9, restarts=1, clock=clock, host="web-1")
    clock.advance(5)
    restart_record(child="work_loop", status=-9, restarts=2, clock=clock, host="web-1")
    restart_record(child="route_loop", status=3, restarts=1, clock=clock, host="web-1")

    found = {item.child: item for item in restarts_recent(now=clock())}
    assert found["work_loop"].restarts == 2 and found["work_loop"].status_text == "signal 9"
    assert found["route_loop"].status_text == "status 3"
    # Older than the window: no longer shown.
    assert restarts_recent(now=clock() + timedelta(minutes=16)) == []


def test_doctor_warns_about_recent_restarts(clock):
    assert check_supervision(now=clock()).ok
    restart_record(child="work_loop", status=-9, restarts=1, clock=clock, host="web-1")

    check = check_supervision(now=clock())
    assert not check.ok
    assert "work_loop on web-1 (1 restart, last exit signal 9)" in check.summary
    assert check.as_dict()["items"][0]["child"] == "work_loop"
    assert check_supervision(now=clock() + timedelta(minutes=16)).ok


def test_doctor_text_lists_a_restarted_child_and_exits_with_the_warning_status(clock, monkeypatch):
    from conduit_site.management.commands import doctor as doctor_command

    monkeypatch.setattr(doctor_command, "system_clock", clock)
    both_loops_alive()
    restart_record(child="work_loop", status=-9, restarts=2, clock=clock, host="web-1")
    out = io.StringIO()
    with pytest.raises(CommandError) as failed:
        call_command("doctor", stdout=out)
    assert failed.value.returncode == doctor_command.A_CHECK_WARNS
    assert "supervision" in str(failed.value)
    text = out.getvalue()
    assert "[warn] supervision: serve restarted 1 process in the last 15 min" in text
    assert "    work_loop on web-1: 2 restarts, last exit signal 9 at 2026-01-05T12:30:20+00:00" in text


def test_banner_names_restarted_children_in_the_same_query(clock, django_assert_num_queries):
    both_loops_alive()
    with django_assert_num_queries(1):
        assert loops_alive(now=NOW).restarted == 0
    restart_record(child="route_loop", status=-9, restarts=2, clock=clock, host="web-1")
    with django_assert_num_queries(1):
        assert loops_alive(now=NOW).restarted == 1


def test_banner_shows_a_restart_on_pages_and_on_its_polled_url(console, clock):
    both_loops_alive()
    body = console.get(reverse("event-list")).content.decode()
    assert 'id="restart-banner"' not in body
    assert f'hx-get="{reverse("console-health")}" hx-trigger="every 15s"' in body

    restart_record(child="route_loop", status=-9, restarts=2, clock=clock, host="web-1")
    for url in (reverse("event-list"), reverse("console-health")):
        body = console.get(url, headers={"HX-Request": "true"}).content.decode()
        banner = re.search(
            r'<p class="heartbeat-banner" id="restart-banner" role="status">(.*?)</p>', body, re.S
        )
        assert banner, url
        assert "<code>route_loop</code> on web-1 (2 times, last exit signal 9)" in banner.group(1)


def test_banner_url_needs_a_sign_in(client):
    response = client.get(reverse("console-health"))
    assert response.status_code == 302
