"""Doctor (R23): Events unrouted after ten minutes with their failure counts, the route loop's
heartbeat, abandoned handler calls and causal refusals, through the functions, the CLI, the
JSON API and the console page (one code path)."""

from __future__ import annotations

import io
import json
import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command
from django.urls import reverse

from causal.models import KV
from routing import api_controls, controls, doctor
from routing.loop import HEARTBEATS_NAMESPACE, RouteLoop
from routing.router import RouterOptions
from routing.views import doctor as doctor_views
from tests.causal.factories import CausalDiagnosticFactory
from tests.routing import sample_handlers
from tests.routing.factories import UserFactory, api_token_with_secret
from tests.routing.routerkit import SCRIPTED_ONLY, accept, apply, drain, router

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def handlers(test_handlers):
    """Every test here routes with the test handlers registered (tests/conftest.py)."""


@pytest.fixture(autouse=True)
def fake_clocks(clock, monkeypatch):
    monkeypatch.setattr(api_controls, "clock", clock)
    monkeypatch.setattr(doctor_views, "clock", clock)


@pytest.fixture
def live(clock):
    return apply(clock)


def check(report, name):
    return next(c for c in report.checks if c.name == name)


def stuck_work(clock):
    """A Work, an Event for it that keeps failing, and a later Event waiting behind it."""
    r = router(clock)
    opened = accept(clock, "github.pull_request.opened", {"repo": "acme/api", "number": 1})
    r.route(opened.seq)
    sample_handlers.BROKEN.add("stuck")
    stuck = accept(clock, "x.comment", {}, correlation=["pr:acme/api#1"], id="stuck")
    later = accept(clock, "github.pull_request.edited", {"repo": "acme/api", "number": 1})
    drain(r)
    r.close()
    return stuck, later


# --- the checks ------------------------------------------------------------------------------------


def test_r23_routing_check_warns_about_events_unrouted_after_ten_minutes_with_failures(clock, live):
    stuck, later = stuck_work(clock)
    clock.advance(minutes=9)
    recent = accept(clock, "x.other", {"behaviour": "hang"})  # unrouted, but only 1 minute old soon
    clock.advance(minutes=1)
    # Exactly ten minutes after acceptance is not "more than ten minutes".
    assert check(doctor.doctor(clock=clock), "routing").ok

    clock.advance(seconds=1)
    report = doctor.doctor(clock=clock)
    routing = check(report, "routing")
    assert not routing.ok and not report.ok
    assert routing.total == 2 and [i.seq for i in routing.items] == [stuck.seq, later.seq]
    first, second = routing.items
    assert (first.failures, first.last_code, first.waiting_on) == (1, "handler_failed", None)
    assert first.last_error == "route scripted: upstream is restarting"
    assert first.retry_at is not None and first.age_seconds == 601
    assert (second.failures, second.waiting_on, second.retry_at) == (0, stuck.seq, None)
    assert "waiting behind" in second.reason
    assert "2 Events are still unrouted 10 min after acceptance" in routing.summary
    assert f"oldest #{stuck.seq}" in routing.summary and "1 with route failures" in routing.summary
    assert recent.seq not in [i.seq for i in routing.items]
    item = routing.as_dict()["items"][0]
    assert item["seq"] == stuck.seq and item["failures"] == 1 and item["last_code"] == "handler_failed"
    assert item["retry_at"].endswith("Z") and item["waiting_on"] is None
    assert "1 failure, last handler_failed" in first.text and f"waits behind #{stuck.seq}" in second.text


def test_r23_routing_check_lists_at_most_the_limit_but_counts_all(clock, live):
    for n in range(4):
        accept(clock, "x.wait", {"behaviour": "hang"}, id=f"w{n}")
    clock.advance(minutes=11)
    routing = doctor.check_unrouted(now=clock(), limit=3)
    assert routing.total == 4 and len(routing.items) == 3


def test_r23_route_loop_check_warns_about_a_stale_heartbeat_while_events_are_unrouted(clock):
    apply(clock, SCRIPTED_ONLY)
    # No loop ever ran, nothing unrouted: nothing to warn about.
    assert check(doctor.doctor(clock=clock), "route_loop").ok
    event = accept(clock, "x", {"behaviour": "fail"})
    never = check(doctor.doctor(clock=clock), "route_loop")
    assert not never.ok and "no route loop has ever recorded a heartbeat" in never.summary

    loop = RouteLoop(clock=clock, options=RouterOptions(route_timeout=2.0))
    try:
        loop.step()
    finally:
        loop.close()
    fresh = check(doctor.doctor(clock=clock), "route_loop")
    assert fresh.ok and loop.owner in fresh.summary

    clock.advance(seconds=61)
    stale = check(doctor.doctor(clock=clock), "route_loop")
    assert not stale.ok
    assert f"{loop.owner} (61 s ago)" in stale.summary and "1 Event is unrouted" in stale.summary
    assert [beat.loop for beat in stale.items] == [loop.owner]
    assert stale.items[0].passes == 1

    # Once nothing is unrouted an idle (or stopped) loop is no warning.
    controls.event_skip(seq=event.seq, user="ops", clock=clock)
    assert check(doctor.doctor(clock=clock), "route_loop").ok


def test_r23_handler_calls_check_warns_about_abandoned_calls_of_a_live_loop(clock):
    apply(clock, SCRIPTED_ONLY)
    accept(clock, "x", {"behaviour": "hang"})
    loop = RouteLoop(clock=clock, options=RouterOptions(route_timeout=0.2))
    try:
        loop.step()  # the handler never returns before its deadline: its call is abandoned
    finally:
        sample_handlers.RELEASE.set()
        loop.close()
    calls = check(doctor.doctor(clock=clock), "handler_calls")
    assert not calls.ok
    assert calls.items[0].loop == loop.owner and calls.items[0].abandoned_calls == 1
    assert "1 handler call abandoned at the deadline" in calls.summary
    # A loop that stopped beating is the route_loop check's business, not this one's.
    clock.advance(seconds=120)
    assert check(doctor.doctor(clock=clock), "handler_calls").ok


def test_r23_causal_check_warns_about_roots_refused_in_the_last_hour(clock):
    CausalDiagnosticFactory(kind="rate_exceeded", root_seq=7, at=clock() - timedelta(minutes=59))
    CausalDiagnosticFactory(kind="depth_exceeded", root_seq=7, at=clock() - timedelta(minutes=5))
    CausalDiagnosticFactory(kind="depth_exceeded", root_seq=8, at=clock() - timedelta(hours=2))
    causal = check(doctor.doctor(clock=clock), "causal")
    assert not causal.ok and causal.total == 1
    (root,) = causal.items
    assert (root.root_seq, root.refusals, root.kinds) == (7, 2, {"rate_exceeded": 1, "depth_exceeded": 1})
    assert "refused 2 derived Events under 1 root in the last hour" in causal.summary
    clock.advance(hours=2)
    assert check(doctor.doctor(clock=clock), "causal").ok


def test_r23_a_healthy_system_is_ok(clock, live):
    drain(router(clock))
    report = doctor.doctor(clock=clock)
    assert report.ok and [c.name for c in report.checks] == [
        "routing",
        "route_loop",
        "handler_calls",
        "causal",
    ]
    assert report.as_dict()["ok"] is True


def test_r23_doctor_reads_a_fixed_number_of_queries(clock, live, django_assert_max_num_queries):
    for n in range(30):
        accept(clock, "x.wait", {"behaviour": "hang"}, id=f"q{n}")
    clock.advance(minutes=11)
    with django_assert_max_num_queries(8):
        report = doctor.doctor(clock=clock)
    assert check(report, "routing").total == 30


# --- CLI, API, page: one code path ------------------------------------------------------------------


def test_r23_cli_doctor_exits_non_zero_when_a_check_warns(clock, live, monkeypatch):
    from routing.management.commands import doctor as doctor_command

    monkeypatch.setattr(doctor_command, "system_clock", clock)
    drain(router(clock))
    out = io.StringIO()
    call_command("doctor", stdout=out)  # every check passes: exit status 0
    assert out.getvalue().startswith("[ok] routing: no Event is unrouted 10 min after acceptance")

    stuck, _ = stuck_work(clock)
    clock.advance(minutes=11)
    out = io.StringIO()
    with pytest.raises(CommandError) as failed:
        call_command("doctor", stdout=out)
    assert failed.value.returncode == 1 and "routing" in str(failed.value)
    text = out.getvalue()
    assert text.startswith("[warn] routing: 2 Events are still unrouted")
    assert f"    #{stuck.seq} x.comment in acme, unrouted for 11 min; 1 failure, last handler_failed" in text
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("doctor", "--json", stdout=out)
    body = json.loads(out.getvalue())
    assert body["ok"] is False and body["checks"][0]["items"][0]["seq"] == stuck.seq


def test_r23_api_doctor_is_200_with_ok_and_checks(client, clock, live):
    assert client.get(reverse("api-doctor")).status_code == 401
    _, secret = api_token_with_secret(user__username="mon")
    headers = {"Authorization": f"Bearer {secret}"}
    accept(clock, "x.wait", {"behaviour": "hang"})
    clock.advance(minutes=11)
    response = client.get(reverse("api-doctor"), headers=headers)
    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is False and body["at"] == "2026-01-05T12:11:00Z"
    assert [c["name"] for c in body["checks"]] == ["routing", "route_loop", "handler_calls", "causal"]
    assert body["checks"][0]["status"] == "warn" and body["checks"][0]["total"] == 1
    assert client.post(reverse("api-doctor"), headers=headers).status_code == 405


def test_r23_doctor_page_shows_the_checks(client, clock, live):
    url = reverse("doctor")
    assert client.get(url)["Location"] == f"{reverse('login')}?next={url}"
    ops = UserFactory(username="ops")
    ops.user_permissions.add(*Permission.objects.filter(codename__in=["skip_event", "reroute_event"]))
    client.force_login(ops)
    stuck, _ = stuck_work(clock)
    clock.advance(minutes=11)
    page = client.get(url).content.decode()
    assert f'href="{url}" aria-current="page">Doctor</a>' in page
    section = re.search(
        r'<section class="doctor-check" id="check-routing">(.*?)</section>', page, re.S
    ).group(1)
    assert "badge-failed" in section and "2 Events are still unrouted" in section
    stuck_row = re.search(rf'<tr id="stuck-{stuck.seq}">(.*?)</tr>', section, re.S).group(1)
    assert "11 min" in stuck_row and "<code>handler_failed</code>" in stuck_row
    assert f'href="{reverse("event-skip", args=[stuck.seq])}?next={url}"' in stuck_row
    client.force_login(UserFactory(username="viewer"))  # no control permissions: no control links
    assert reverse("event-skip", args=[stuck.seq]) not in client.get(url).content.decode()
    partial = client.get(url, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="doctor-checks").content.decode()
    assert partial.strip().startswith('<section id="doctor-checks">')


def test_r23_heartbeats_keep_what_doctor_reads(clock, live):
    loop = RouteLoop(clock=clock, options=RouterOptions(route_timeout=2.0))
    try:
        loop.step()
    finally:
        loop.close()
    value = KV.objects.get(namespace=HEARTBEATS_NAMESPACE, key=loop.owner).value
    assert set(value) >= {"at", "generation", "passes", "routed", "abandoned_calls", "abandoned_total"}
