"""Doctor (R23): Events unrouted after ten minutes with their failure counts, the route loop's
heartbeat, abandoned handler calls and causal refusals, through the functions, the CLI, the
JSON API and the console page (one code path)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command
from django.urls import reverse

from causal.models import KV
from conduit_site import doctor
from conduit_site.api import controls as api_controls
from conduit_site.console.views import doctor as doctor_views
from controls import events as controls
from routing.engine.configurations import LiveConfigurations
from routing.engine.heartbeat import HEARTBEATS_NAMESPACE
from routing.engine.loop import RouteLoop
from routing.engine.options import RouterOptions
from tests.causal.factories import CausalDiagnosticFactory, KVFactory
from tests.routing import sample_handlers
from tests.routing.factories import UserFactory, api_token_with_secret
from tests.routing.routerkit import SCRIPTED_ONLY, accept, apply, drain, router
from tests.worklife.factories import AttemptFactory, WorkFactory, WorkInputFactory
from worklife.attempts import attempt_fail
from worklife.executors.isolation import isolation
from worklife.heartbeat import HEARTBEATS_NAMESPACE as WORK_HEARTBEATS_NAMESPACE
from worklife.lifecycle import work_cancel_in_tx
from worklife.models import Work
from worklife.runner import WorkRunner

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
        fresh = check(doctor.doctor(clock=clock), "route_loop")
        assert fresh.ok and loop.owner in fresh.summary

        clock.advance(seconds=61)
        stale = check(doctor.doctor(clock=clock), "route_loop")
        assert not stale.ok
        assert f"{loop.owner} (61 s ago)" in stale.summary and "1 Event is unrouted" in stale.summary
        assert [beat.loop for beat in stale.items] == [loop.owner]
        assert stale.items[0].passes == 1
    finally:
        loop.close()

    # Once nothing is unrouted an idle (or stopped) loop is no warning.
    controls.event_skip(seq=event.seq, user="ops", clock=clock)
    assert check(doctor.doctor(clock=clock), "route_loop").ok


def test_r23_a_route_loop_that_exited_is_not_counted_as_alive(clock):
    """A ``route_loop --once`` pass writes its heartbeat and exits: doctor does not count it
    as a live route loop, and names it as stopped."""
    apply(clock, SCRIPTED_ONLY)
    accept(clock, "x", {"behaviour": "fail"})
    loop = RouteLoop(clock=clock, options=RouterOptions(route_timeout=2.0))
    try:
        loop.step()
        assert check(doctor.doctor(clock=clock), "route_loop").ok
    finally:
        loop.close()
    stopped = check(doctor.doctor(clock=clock), "route_loop")
    assert not stopped.ok and stopped.total == 1
    assert f"{loop.owner} (0 s ago, stopped)" in stopped.summary and "1 Event is unrouted" in stopped.summary
    assert stopped.items[0].stopped and "stopped" in stopped.items[0].text
    assert stopped.as_dict()["items"][0]["stopped"] is True


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
        "work_loop",
        "parked_work",
        "supervision",
        "live_updates",
        "pauses",
    ]
    assert report.as_dict()["ok"] is True


def test_r23_doctor_reads_a_fixed_number_of_queries(clock, live, django_assert_max_num_queries):
    for n in range(30):
        accept(clock, "x.wait", {"behaviour": "hang"}, id=f"q{n}")
        WorkFactory(parked_at=clock(), failures=5)
        WorkInputFactory(work=WorkFactory())
        KVFactory(namespace=WORK_HEARTBEATS_NAMESPACE, key=f"host:{n}", value={"at": clock().isoformat()})
    clock.advance(minutes=11)
    # 7 for the routing checks; 3 for work_loop (ready Work, the pauses holding some back,
    # heartbeats), 2 for parked_work, 1 for supervision (serve's restarts), 1 for live_updates (no
    # web process reads the outbox), 1 for pauses.
    with django_assert_max_num_queries(15):
        report = doctor.doctor(clock=clock)
    assert check(report, "routing").total == 30
    assert check(report, "parked_work").total == 30 and check(report, "work_loop").total == 10


def test_work_loop_check_warns_when_no_work_loop_beats_while_work_is_ready(clock, live):
    # Nothing ready to run and no work_loop ever: nothing to warn about.
    assert check(doctor.doctor(clock=clock), "work_loop").ok
    # Its binding is not in the configuration: the work_loop's dispatch is refused.
    WorkInputFactory(work=WorkFactory(binding="gone"), binding="gone")
    WorkFactory(parked_at=clock(), pending_run=True)  # parked: an operator's business, not a loop's
    WorkFactory(pending_run=True, failures=1, retry_at=clock() + timedelta(seconds=30))  # backing off
    never = check(doctor.doctor(clock=clock), "work_loop")
    assert not never.ok and never.summary == (
        "no work loop has ever recorded a heartbeat and 1 Work is ready to run (pending input or a due "
        "retry): is `manage.py work_loop` running?"
    )

    runner = WorkRunner(clock=clock, configurations=LiveConfigurations(), slots=2, lease_seconds=30)
    runner.step()  # its dispatch is refused (the Work is held 30 s), and it beats
    alive = check(doctor.doctor(clock=clock), "work_loop")
    assert alive.ok and alive.summary == f"1 work loop alive: {runner.owner} (0 s ago, running 0 of 2)"
    (beat,) = alive.items
    assert (beat.loop, beat.slots, beat.refused, beat.stopped) == (runner.owner, 2, 1, False)
    assert beat.as_dict()["at"] == "2026-01-05T12:00:00Z" and "1 refused" in beat.text

    # 61 s later its beat is stale, and both the refused Work and the one whose backoff ended
    # are due again.
    clock.advance(seconds=61)
    stale = check(doctor.doctor(clock=clock), "work_loop")
    assert not stale.ok
    assert stale.summary == (
        "no work loop heartbeat newer than 60 s while 2 Work are ready to run (pending input or a due "
        f"retry); last heartbeats: {runner.owner} (61 s ago)"
    )
    assert [item.loop for item in stale.items] == [runner.owner]

    # A loop that stopped is no loop, however fresh its last beat.
    runner.shutdown(grace=0)
    stopped = check(doctor.doctor(clock=clock), "work_loop")
    assert not stopped.ok and f"{runner.owner} (0 s ago, stopped)" in stopped.summary

    # Once nothing is ready to run a missing loop is no warning.
    for work in Work.objects.filter(status="ready", parked_at__isnull=True):
        work_cancel_in_tx(work_id=work.pk, clock=clock)
    idle = check(doctor.doctor(clock=clock), "work_loop")
    assert (
        idle.ok
        and idle.summary == f"no Work is waiting for a work loop; last heartbeat 0 s ago from {runner.owner}"
    )


def test_w5_parked_work_is_listed_by_doctor(clock, settings):
    settings.CONDUIT_MAX_ATTEMPTS = 2
    assert check(doctor.doctor(clock=clock), "parked_work").summary == "no Work is parked"
    first = WorkFactory(scope="acme/web")
    for number in (1, 2):
        attempt = AttemptFactory(work=first, number=number, lease_epoch=number)
        attempt_fail(attempt_id=attempt.pk, lease_epoch=number, error="exit status 1\nTraceback", clock=clock)
    clock.advance(minutes=5)
    second = WorkFactory(parked_at=clock(), failures=7, last_error="attempt 7 lost: its lease lapsed")
    WorkFactory(status="cancelled", parked_at=clock())  # cancelled: no longer parked

    parked = check(doctor.doctor(clock=clock), "parked_work")
    assert not parked.ok and parked.total == 2
    assert parked.summary == (
        "2 Work are parked after too many failures in a row, waiting for an operator to retry or "
        f"cancel them (longest parked: Work {first.pk}, 5 min ago)"
    )
    one, two = parked.items
    assert (one.work_id, one.scope, one.failures) == (first.pk, "acme/web", 2)
    assert one.last_error == "attempt 2 failed: exit status 1 Traceback"
    assert (
        one.text
        == f"Work {first.pk} in acme/web: parked after 2 failures (attempt 2 failed: exit status 1 Traceback)"
    )
    assert two.as_dict() == {
        "work_id": second.pk,
        "scope": "acme",
        "failures": 7,
        "last_error": "attempt 7 lost: its lease lapsed",
        "parked_at": "2026-01-05T12:05:00Z",
    }
    assert doctor.check_parked_work(now=clock(), limit=1).items == (one,)


# --- CLI, API, page: one code path ------------------------------------------------------------------


def test_r23_cli_doctor_exits_non_zero_when_a_check_warns(clock, live, monkeypatch):
    from conduit_site.management.commands import doctor as doctor_command

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


def test_doctor_exit_code_is_0_when_all_pass_and_1_when_a_check_warns(clock, live, monkeypatch):
    from conduit_site.management.commands import doctor as doctor_command

    monkeypatch.setattr(doctor_command, "system_clock", clock)
    call_command("doctor", "--exit-code", stdout=io.StringIO())  # returns: exit status 0
    stuck_work(clock)
    clock.advance(minutes=11)

    with pytest.raises(CommandError) as warned:
        call_command("doctor", "--exit-code", stdout=io.StringIO())

    assert warned.value.returncode == 1


@pytest.mark.parametrize(
    ("database_url", "reason"),
    [
        ("postgres://conduit@127.0.0.1:1/nowhere", "connection"),
        ("sqlite:///{tmp}/never-migrated.sqlite3", "no such table"),
    ],
)
def test_doctor_exit_code_is_2_when_it_cannot_read_the_database(tmp_path, database_url, reason):
    env = {
        **os.environ,
        "DATABASE_URL": database_url.format(tmp=tmp_path),
        "CONDUIT_VAR_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "conduit_site.settings",
    }
    env.pop("TEST_DATABASE_NAME", None)

    result = subprocess.run(
        [sys.executable, "manage.py", "doctor", "--exit-code"],
        cwd=django_settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode == 2, result.stderr
    assert "doctor: cannot read the database (" in result.stderr and reason in result.stderr
    assert "Traceback" not in result.stderr


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
    assert [c["name"] for c in body["checks"]] == [
        "routing",
        "route_loop",
        "handler_calls",
        "causal",
        "work_loop",
        "parked_work",
        "supervision",
        "live_updates",
        "pauses",
    ]
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
    assert partial.strip().startswith('<section id="doctor-checks"')


def test_doctor_says_what_the_work_of_each_work_loop_cannot_reach(client, clock, live, monkeypatch):
    from conduit_site.management.commands import doctor as doctor_command

    monkeypatch.setattr(doctor_command, "system_clock", clock)
    runner = WorkRunner(clock=clock, configurations=LiveConfigurations(), slots=3, lease_seconds=30)
    runner.step()
    said = isolation().describe()
    assert said.startswith("children run as nobody, in a mount namespace hiding ") or os.geteuid() != 0
    out = io.StringIO()
    call_command("doctor", stdout=out)
    assert f"{runner.owner}: last heartbeat 0 s ago" in out.getvalue()
    assert f"lost); isolation: {said}" in out.getvalue()
    _, secret = api_token_with_secret(user__username="mon")
    body = client.get(reverse("api-doctor"), headers={"Authorization": f"Bearer {secret}"}).json()
    loops = next(c for c in body["checks"] if c["name"] == "work_loop")["items"]
    assert [(beat["loop"], beat["isolation"]) for beat in loops] == [(runner.owner, said)]


def test_doctor_cli_api_and_page_show_work_loops_and_parked_work(client, clock, live, monkeypatch):
    from conduit_site.management.commands import doctor as doctor_command

    monkeypatch.setattr(doctor_command, "system_clock", clock)
    runner = WorkRunner(clock=clock, configurations=LiveConfigurations(), slots=3, lease_seconds=30)
    runner.step()
    parked = WorkFactory(parked_at=clock(), failures=5, last_error="attempt 5 failed: boom")

    out = io.StringIO()
    with pytest.raises(CommandError) as failed:
        call_command("doctor", stdout=out)
    assert "parked_work" in str(failed.value) and "work_loop" not in str(failed.value)
    text = out.getvalue()
    assert f"[ok] work_loop: 1 work loop alive: {runner.owner}" in text
    assert f"    {runner.owner}: last heartbeat 0 s ago (running 0 of 3 slots;" in text
    assert "[warn] parked_work: 1 Work is parked after too many failures in a row" in text
    assert f"    Work {parked.pk} in acme: parked after 5 failures (attempt 5 failed: boom)" in text

    _, secret = api_token_with_secret(user__username="mon")
    body = client.get(reverse("api-doctor"), headers={"Authorization": f"Bearer {secret}"}).json()
    checks = {c["name"]: c for c in body["checks"]}
    assert checks["work_loop"]["ok"] and checks["work_loop"]["items"][0]["loop"] == runner.owner
    assert checks["work_loop"]["items"][0]["slots"] == 3
    assert (
        checks["parked_work"]["status"] == "warn"
        and checks["parked_work"]["items"][0]["work_id"] == parked.pk
    )

    client.force_login(UserFactory(username="ops"))
    page = client.get(reverse("doctor")).content.decode()
    loops = re.search(
        r'<section class="doctor-check" id="check-work_loop">(.*?)</section>', page, re.S
    ).group(1)
    assert f"<code>{runner.owner}</code>: last heartbeat 0 s ago (running 0 of 3 slots" in loops
    section = re.search(
        r'<section class="doctor-check" id="check-parked_work">(.*?)</section>', page, re.S
    ).group(1)
    assert "badge-failed" in section
    parked_row = re.search(rf'<tr id="parked-{parked.pk}">(.*?)</tr>', section, re.S).group(1)
    assert (
        f'href="{reverse("work-detail", args=[parked.pk])}"' in parked_row
        and "attempt 5 failed: boom" in parked_row
    )
    assert f'href="{reverse("work-list")}?status=parked"' in section
    runner.shutdown(grace=0)


def test_r23_heartbeats_keep_what_doctor_reads(clock, live):
    loop = RouteLoop(clock=clock, options=RouterOptions(route_timeout=2.0))
    try:
        loop.step()
    finally:
        loop.close()
    value = KV.objects.get(namespace=HEARTBEATS_NAMESPACE, key=loop.owner).value
    assert set(value) >= {"at", "generation", "passes", "routed", "abandoned_calls", "abandoned_total"}


# --- doctor names what keeps failing; the log says it once ------------------------------------


def test_doctor_names_an_event_whose_route_keeps_failing_at_once(clock):
    apply(clock, SCRIPTED_ONLY)
    event = accept(clock, "x", {"behaviour": "fail"})
    r = router(clock)
    r.route(event.seq)
    assert check(doctor.doctor(clock=clock), "routing").ok  # one failure, young: not yet
    clock.advance(minutes=1)
    r.route(event.seq)
    r.close()
    routing = check(doctor.doctor(clock=clock), "routing")
    assert not routing.ok and [item.seq for item in routing.items] == [event.seq]
    assert "keep failing" in routing.summary and "2 failures, last handler_failed (keeps failing)" in (
        routing.items[0].text
    )


def test_a_failing_pass_is_logged_once_with_a_count_and_doctor_names_its_events(clock, caplog, monkeypatch):
    apply(clock, SCRIPTED_ONLY)
    event = accept(clock, "x", {"behaviour": "ok"})
    loop = RouteLoop(clock=clock, options=RouterOptions(route_timeout=2.0))
    try:
        loop.step()  # builds the router
        loop.router.last_window = (event.seq,)
        caplog.set_level("INFO", logger="conduit.routing.loop")
        for _ in range(25):
            loop.pass_failed(RuntimeError("the same trouble"))
        failed = [r for r in caplog.records if r.msg.startswith("route_loop.pass_failed")]
        assert [(r.msg, getattr(r, "count", 1)) for r in failed] == [
            ("route_loop.pass_failed", 1),
            ("route_loop.pass_failed.repeated", 10),
        ]
        assert failed[0].exc_info is not None

        beat = check(doctor.doctor(clock=clock), "route_loop")
        assert not beat.ok and "route loop passes keep failing" in beat.summary
        assert (
            "25 passes in a row failed" in beat.summary and "RuntimeError: the same trouble" in beat.summary
        )
        assert f"its window held Events #{event.seq}" in beat.summary

        loop.pass_failed(ValueError("another trouble"))
        messages = [
            (r.msg, getattr(r, "count", None))
            for r in caplog.records
            if r.msg.startswith("route_loop.pass_failed")
        ][len(failed) :]
        assert messages[:2] == [("route_loop.pass_failed.repeated", 25), ("route_loop.pass_failed", None)]
        loop.step()
        assert check(doctor.doctor(clock=clock), "route_loop").ok
    finally:
        loop.close()


def test_every_doctor_check_has_a_label_people_read():
    from conduit_site.api.openapi.controls import SCHEMAS
    from conduit_site.doctor import CHECK_LABELS, Check

    names = SCHEMAS["DoctorCheck"]["properties"]["name"]["enum"]
    assert sorted(CHECK_LABELS) == sorted(names)
    assert Check("parked_work", "warn", "").label == "Parked Work"
    assert all("_" not in label for label in CHECK_LABELS.values())


def test_doctor_says_when_a_web_process_has_not_sent_open_pages_a_change_committed_long_ago(clock):
    from conduit_site.live import READERS_NAMESPACE
    from tests.infra.factories import LiveChangeFactory

    read = LiveChangeFactory(at=clock() - timedelta(minutes=2))
    KVFactory(namespace=READERS_NAMESPACE, key="web-a:101", value={"position": read.pk}, updated_at=clock())
    LiveChangeFactory(at=clock() - timedelta(seconds=3))
    assert check(doctor.doctor(clock=clock), "live_updates").ok  # a change of 3 s ago is on its way

    LiveChangeFactory(at=clock() - timedelta(seconds=40))
    stale = KVFactory(namespace=READERS_NAMESPACE, key="web-b:102", value={"position": 0}, updated_at=clock())
    stale.updated_at = clock() - timedelta(minutes=5)  # a web process that stopped: not counted
    stale.save()
    live_updates = check(doctor.doctor(clock=clock), "live_updates")
    assert not live_updates.ok and live_updates.total == 1
    (behind,) = live_updates.items
    assert behind.process == "web-a:101" and behind.waited_seconds == 40.0
    assert "live updates are behind in 1 web process" in live_updates.summary
    assert behind.text == (
        f"web-a:101: the oldest change its pages have not been sent was committed 40 s ago "
        f"(read up to position {read.pk})"
    )


@pytest.mark.django_db
def test_doctor_warns_while_a_pause_is_in_force_naming_who_why_and_until(clock):
    from worklife.models import PauseKind
    from worklife.pauses import PauseTarget, pause_create, pause_end

    target = PauseTarget(PauseKind.BINDING, "acme", "triage")
    assert doctor.check_pauses(now=clock()).ok
    pause_create(target=target, paused_by="alice", reason="incident 42", until=None, clock=clock)
    check = doctor.check_pauses(now=clock())
    assert not check.ok and check.total == 1
    assert check.items[0].text == "binding 'triage' in acme: paused by alice at 2026-01-05 12:00: incident 42"
    assert check.as_dict()["items"][0]["kind"] == "binding"
    pause_end(target=target, ended_by="alice", clock=clock)
    assert doctor.check_pauses(now=clock()).ok
