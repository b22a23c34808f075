"""Operator controls: skip and reroute (R20–R22) through the service, the JSON API, the CLI and
the console (the Work page's rows and the Event page, with htmx and without JavaScript)."""

from __future__ import annotations

import contextlib
import io
import json
import re
import threading
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.test import Client
from django.urls import reverse

from causal.models import KV, Event, EventKey, RouteState
from causal.services import Envelope, event_accept_in_tx
from conduit_site.api import controls as api_controls
from conduit_site.console.views import controls as control_views
from controls import events as controls
from routing.engine.failures import FAILURES_NAMESPACE
from routing.engine.options import RouterOptions
from routing.engine.router import build_router
from routing.models import RouteRecord
from tests.controls.controlkit import HTMX, events_command, holding_work, pr
from tests.routing import sample_handlers
from tests.routing.factories import UserFactory, api_token_with_secret
from tests.routing.routerkit import accept, apply, drain, router, state

PASSWORD = "a-long-console-password-1"


@pytest.fixture(autouse=True)
def handlers(test_handlers):
    """Every test here routes with the test handlers registered (tests/conftest.py)."""


@pytest.fixture(autouse=True)
def fake_clocks(clock, monkeypatch):
    """The API and the console act at the test's clock."""
    monkeypatch.setattr(api_controls, "clock", clock)
    monkeypatch.setattr(control_views, "clock", clock)


def grant(user, *codenames: str):
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="routing", codename__in=codenames)
    )
    return user


def failure_entry(seq):
    return (
        KV.objects.filter(namespace=FAILURES_NAMESPACE, key=str(seq)).values_list("value", flat=True).first()
    )


def control_events(kind: str):
    return list(Event.objects.filter(source="core.manual", type=f"core.manual.{kind}").order_by("seq"))


# --- skip (R21) ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_r21_skip_routes_an_unrouted_event_as_skipped_on_the_work_it_targets(clock, live):
    r = router(clock)
    work_id, stuck, later = holding_work(clock, r)
    stuck.refresh_from_db()
    assert stuck.retry_at is not None and failure_entry(stuck.seq)["count"] == 1
    later.refresh_from_db()
    assert later.waiting_on_id == stuck.seq

    clock.advance(1)
    result = controls.event_skip(seq=stuck.seq, user=UserFactory(username="alice"), clock=clock)

    assert (result.action, result.outcome, result.route_state, result.work_id) == (
        "skip_event",
        "skipped",
        "skipped",
        work_id,
    )
    stuck.refresh_from_db()
    assert stuck.route_state == RouteState.SKIPPED and stuck.routed_at == clock()
    assert (stuck.waiting_on_id, stuck.retry_at, stuck.claimed_by, stuck.claimed_until) == (
        None,
        None,
        "",
        None,
    )
    record = RouteRecord.objects.get(event=stuck)
    assert (record.disposition, record.policy, record.reason, record.work_id) == (
        "skipped",
        "skipped",
        "skipped by alice",
        work_id,
    )
    assert (record.attempts, record.route, record.decided_by) == (1, "scripted", "alice")
    assert "upstream is restarting" in record.error
    assert failure_entry(stuck.seq) is None
    # The control Event names the Event and the user, and is settled at once (never routed by
    # user routes).
    (control,) = control_events("skip_event")
    assert control.seq == result.control_seq
    assert control.data == {"event": stuck.seq, "envelope_id": "stuck", "source": "tests", "by": "alice"}
    assert (control.accepted_by, control.route_state, control.scope) == ("alice", "routed", "acme")
    control_record = RouteRecord.objects.get(event=control)
    assert (control_record.policy, control_record.reason, control_record.disposition) == (
        "control",
        "skip_event",
        "routed",
    )
    # The Work takes its later input on the next pass.
    drain(r)
    assert state(later) == RouteState.ROUTED
    assert RouteRecord.objects.get(event=later).work_id == work_id
    r.close()


@pytest.mark.django_db
def test_r21_skip_without_an_explicit_target_records_no_work(clock, live):
    sample_handlers.BROKEN.add("lonely")
    lonely = accept(clock, "x.thing", {}, id="lonely")
    r = router(clock)
    drain(r)
    result = controls.event_skip(seq=lonely.seq, user="cli", clock=clock)
    record = RouteRecord.objects.get(event=lonely)
    assert (result.work_id, record.work_id, record.reason) == (None, None, "skipped by cli")
    r.close()


@pytest.mark.django_db
def test_r21_skip_of_a_settled_event_is_refused_and_changes_nothing(clock, live):
    noise = accept(clock, "noise.ping")
    r = router(clock)
    drain(r)
    before = list(RouteRecord.objects.values_list("pk", "policy", "reason"))
    events = Event.objects.count()
    with pytest.raises(controls.ControlRefused) as refused:
        controls.event_skip(seq=noise.seq, user="alice", clock=clock)
    assert refused.value.details() == {
        "error": "wrong_state",
        "message": f"Event #{noise.seq} is already routed: only an unrouted Event can be skipped",
        "seq": noise.seq,
        "route_state": "routed",
        "copy_seq": None,
    }
    assert list(RouteRecord.objects.values_list("pk", "policy", "reason")) == before
    assert Event.objects.count() == events
    r.close()


@pytest.mark.django_db
@pytest.mark.parametrize("service", [controls.event_skip, controls.event_reroute])
def test_r20_a_control_on_an_unknown_seq_is_not_found(clock, live, service):
    with pytest.raises(Event.DoesNotExist, match="no Event has seq 999999"):
        service(seq=999999, user="alice", clock=clock)
    assert not Event.objects.exists()


# --- reroute (R22) ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_r22_reroute_of_an_unrouted_event_forgets_its_failures_and_the_next_pass_tries_it(clock, live):
    r = router(clock)
    work_id, stuck, later = holding_work(clock, r)
    sample_handlers.BROKEN.clear()
    calls = sample_handlers.CALLS.count("stuck")

    result = controls.event_reroute(seq=stuck.seq, user="bob", clock=clock)

    assert (result.outcome, result.route_state, result.failures, result.copy_seq) == (
        "failures_forgotten",
        "unrouted",
        1,
        None,
    )
    stuck.refresh_from_db()
    assert (stuck.route_state, stuck.retry_at, stuck.waiting_on_id) == ("unrouted", None, None)
    assert "failures forgotten by bob" in stuck.unrouted_reason
    assert failure_entry(stuck.seq) is None
    (control,) = control_events("reroute_event")
    assert control.data["event"] == stuck.seq and control.data["by"] == "bob"
    assert RouteRecord.objects.get(event=control).reason == "reroute_event"
    # Still within the backoff it had: the next pass tries it at once, and the Work goes on.
    drain(r)
    assert sample_handlers.CALLS.count("stuck") == calls + 1
    assert state(stuck) == state(later) == RouteState.ROUTED
    assert RouteRecord.objects.get(event=stuck).work_id == work_id
    r.close()


@pytest.mark.django_db
def test_r22_reroute_of_a_failed_event_accepts_a_copy_that_routes_like_new_input(clock, live):
    r = router(clock, max_route_failures=1, route_failure_window=timedelta(0))
    opened = pr(clock, 1)
    r.route(opened.seq)
    work_id = RouteRecord.objects.get(event=opened).work_id
    with transaction.atomic():
        parent = event_accept_in_tx(
            envelope=Envelope(id="root", source="tests", type="noise.root", scope="acme"), clock=clock
        ).event
        original = event_accept_in_tx(
            envelope=Envelope(
                id="bad",
                source="tests",
                type="x.comment",
                scope="acme",
                subject="pr 1",
                data={"keys": [], "text": "hello"},
                extensions={"traceparent": "00-abc"},
                correlation=("pr:acme/api#1",),
                work_id=work_id,
            ),
            clock=clock,
            parent=parent,
        ).event
    sample_handlers.BROKEN.add("bad")
    drain(r)
    assert state(original) == RouteState.FAILED
    assert RouteRecord.objects.get(event=original).work_id == work_id

    clock.advance(5)
    result = controls.event_reroute(seq=original.seq, user="carol", clock=clock)

    copy = Event.objects.get(seq=result.copy_seq)
    assert (result.outcome, result.route_state, result.work_id) == ("copied", "failed", work_id)
    assert (copy.envelope_id, copy.source, copy.type, copy.scope, copy.subject) == (
        "reroute/bad",
        "tests",
        "x.comment",
        "acme",
        "pr 1",
    )
    assert (copy.data, copy.extensions, copy.correlation) == (
        original.data,
        original.extensions,
        original.correlation,
    )
    assert (copy.work_id, copy.execution_id, copy.parent_id, copy.root_id, copy.depth) == (
        work_id,
        None,
        parent.seq,
        parent.seq,
        1,
    )
    assert (copy.accepted_by, copy.accepted_at, copy.route_state) == ("carol", clock(), "unrouted")
    assert list(EventKey.objects.filter(event=copy).values_list("key", flat=True)) == ["pr:acme/api#1"]
    assert state(original) == RouteState.FAILED  # history stays
    (control,) = control_events("reroute_event")
    assert control.data == {"event": original.seq, "envelope_id": "bad", "source": "tests", "by": "carol"}
    # The copy is new input: it routes (its id is not broken) onto the same Work.
    drain(r)
    copy_record = RouteRecord.objects.get(event=copy)
    assert (copy_record.policy, copy_record.work_id) == ("queue", work_id)
    # A second reroute is refused, naming the copy; nothing is stored.
    events = Event.objects.count()
    with pytest.raises(controls.ControlRefused) as refused:
        controls.event_reroute(seq=original.seq, user="carol", clock=clock)
    assert refused.value.copy_seq == copy.seq
    assert f"#{copy.seq}" in refused.value.message and "reroute/bad" in refused.value.message
    assert Event.objects.count() == events
    r.close()


@pytest.mark.django_db
def test_r22_reroute_of_a_skipped_event_accepts_a_copy(clock, live):
    sample_handlers.BROKEN.add("once")
    event = accept(clock, "x.thing", {}, id="once")
    r = router(clock)
    drain(r)
    controls.event_skip(seq=event.seq, user="alice", clock=clock)
    result = controls.event_reroute(seq=event.seq, user="alice", clock=clock)
    assert result.outcome == "copied" and result.route_state == "skipped"
    drain(r)
    assert RouteRecord.objects.get(event_id=result.copy_seq).policy == "start"
    assert len(control_events("skip_event")) == len(control_events("reroute_event")) == 1
    r.close()


@pytest.mark.django_db
def test_r22_reroute_of_an_event_routed_normally_is_refused(clock, live):
    opened = pr(clock, 1)
    r = router(clock)
    r.route(opened.seq)
    events = Event.objects.count()
    with pytest.raises(controls.ControlRefused, match=r"routed normally \(policy start\)"):
        controls.event_reroute(seq=opened.seq, user="alice", clock=clock)
    assert Event.objects.count() == events
    r.close()


# --- transactions and concurrency ------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_r21_concurrent_skips_settle_the_event_once(clock, live):
    sample_handlers.BROKEN.add("contested")
    event = accept(clock, "x.thing", {}, id="contested")
    r = router(clock)
    drain(r)
    r.close()
    barrier = threading.Barrier(2)
    results: list[object] = []

    def skip(name):
        try:
            barrier.wait(5)
            results.append(controls.event_skip(seq=event.seq, user=name, clock=clock))
        except controls.ControlRefused as refused:
            results.append(refused)
        finally:
            connection.close()

    threads = [threading.Thread(target=skip, args=(name,)) for name in ("alice", "bob")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(type(r).__name__ for r in results) == ["ControlRefused", "ControlResult"]
    assert RouteRecord.objects.filter(event=event).count() == 1
    assert len(control_events("skip_event")) == 1


@contextlib.contextmanager
def routing_in_background(r, event, envelope_id: str):
    """Route ``event`` on another thread and yield (a dict whose ``value`` is the outcome, once
    the block ends) while its handler, which waits for ``RELEASE``, is running: the router
    holds no transaction then. The handler is released and the router closed on the way out."""
    outcome = {}

    def route():
        try:
            outcome["value"] = r.route(event.seq)
        finally:
            connection.close()

    thread = threading.Thread(target=route)
    thread.start()
    try:
        for _ in range(400):
            if envelope_id in sample_handlers.CALLS:
                break
            threading.Event().wait(0.01)
        assert envelope_id in sample_handlers.CALLS
        yield outcome
    finally:
        sample_handlers.RELEASE.set()
        thread.join(30)
        r.close()


@pytest.mark.django_db(transaction=True)
def test_r21_a_skip_while_the_router_evaluates_wins_and_the_router_decides_nothing(clock):
    apply(clock)
    event = accept(clock, "x.thing", {"behaviour": "hang"}, id="slow")
    r = build_router(clock=clock, options=RouterOptions(route_timeout=20.0))
    with routing_in_background(r, event, "slow") as outcome:
        controls.event_skip(seq=event.seq, user="alice", clock=clock)
    assert outcome["value"].settled
    assert state(event) == RouteState.SKIPPED
    (record,) = RouteRecord.objects.filter(event=event)
    assert record.reason == "skipped by alice"


@pytest.mark.django_db(transaction=True)
def test_r22_a_reroute_while_the_router_evaluates_is_not_undone_by_its_commit(clock):
    """The router counts a failure from the failure entry as it is at commit: failures an
    operator forgot while the handler ran stay forgotten (a stale count would give up here)."""
    apply(clock)
    sample_handlers.RELEASE.set()
    event = accept(clock, "x.thing", {"behaviour": "slow-fail"}, id="slow")
    options = RouterOptions(route_timeout=20.0, max_route_failures=2, route_failure_window=timedelta(0))
    r = build_router(clock=clock, options=options)
    assert r.route(event.seq).error.attempts == 1
    sample_handlers.RELEASE.clear()
    sample_handlers.CALLS.clear()
    clock.advance(3)  # past the backoff: the next call asks the handler again
    with routing_in_background(r, event, "slow") as outcome:
        controls.event_reroute(seq=event.seq, user="alice", clock=clock)
    assert not outcome["value"].settled, "the router gave up on failures the operator forgot"
    assert state(event) == RouteState.UNROUTED
    assert failure_entry(event.seq)["count"] == 1


# --- JSON API -------------------------------------------------------------------------------------


def api_post(client, url, secret=None):
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    return client.post(url, headers=headers)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "action,url_name", [("skip_event", "api-event-skip"), ("reroute_event", "api-event-reroute")]
)
def test_r20_api_controls_need_a_token_and_their_own_permission(client, clock, live, action, url_name):
    sample_handlers.BROKEN.add("api")
    event = accept(clock, "x.thing", {}, id="api")
    drain(router(clock))
    url = reverse(url_name, args=[event.seq])
    assert api_post(client, url).status_code == 401
    token, secret = api_token_with_secret(user__username="dave")
    # The other control's permission is not enough.
    other = "reroute_event" if action == "skip_event" else "skip_event"
    grant(token.user, other)
    refused = api_post(client, url, secret)
    assert refused.status_code == 403, refused.content
    assert refused.json()["error"] == "forbidden" and f"routing.{action}" in refused.json()["message"]
    assert state(event) == RouteState.UNROUTED and not control_events(action)

    grant(token.user, action)
    response = api_post(client, url, secret)
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["action"], body["seq"], body["by"]) == (action, event.seq, "dave")
    assert body["control_seq"] == control_events(action)[0].seq
    assert body["message"]
    assert client.get(url, headers={"Authorization": f"Bearer {secret}"}).status_code == 405


@pytest.mark.django_db
def test_r20_api_wrong_state_is_409_and_unknown_seq_is_404(client, clock, live):
    opened = pr(clock, 1)
    drain(router(clock))
    token, secret = api_token_with_secret(user__username="erin")
    grant(token.user, "skip_event", "reroute_event")
    for name in ("api-event-skip", "api-event-reroute"):
        response = api_post(client, reverse(name, args=[opened.seq]), secret)
        assert response.status_code == 409, response.content
        body = response.json()
        assert (body["error"], body["seq"], body["route_state"]) == ("wrong_state", opened.seq, "routed")
        missing = api_post(client, reverse(name, args=[999999]), secret)
        assert missing.status_code == 404 and missing.json()["error"] == "not_found"
    assert not control_events("skip_event") and not control_events("reroute_event")


# --- CLI (in process; the subprocess run is in test_route_failures) ---------------------------------


@pytest.mark.django_db
def test_r20_cli_skip_and_reroute_record_the_actor_without_a_permission_check(clock, live):
    sample_handlers.BROKEN.update({"c1", "c2"})
    first = accept(clock, "x.thing", {}, id="c1")
    second = accept(clock, "x.thing", {}, id="c2")
    drain(router(clock))
    UserFactory(username="frank")  # no permission at all: the CLI is trusted host access

    out = events_command("skip", str(first.seq), "--as", "frank")
    assert out.startswith(f"Event #{first.seq} skipped by frank")
    assert RouteRecord.objects.get(event=first).decided_by == "frank"

    body = json.loads(events_command("reroute", str(second.seq), "--json"))
    assert (body["outcome"], body["by"], body["seq"]) == ("failures_forgotten", "cli", second.seq)

    copied = json.loads(events_command("reroute", str(first.seq), "--json"))
    assert copied["outcome"] == "copied" and copied["copy_seq"]


@pytest.mark.django_db
def test_r20_cli_refusals_exit_non_zero_and_name_the_problem(clock, live):
    opened = pr(clock, 1)
    drain(router(clock))
    with pytest.raises(CommandError, match=rf"SEQ: Event #{opened.seq} is already routed"):
        events_command("skip", str(opened.seq))
    out = io.StringIO()
    with pytest.raises(CommandError, match="SEQ: no Event has seq 999999"):
        call_command("events", "reroute", "999999", "--json", stdout=out)
    assert json.loads(out.getvalue())["error"] == "not_found"
    with pytest.raises(CommandError, match="--as: no user named 'ghost'"):
        events_command("skip", str(opened.seq), "--as", "ghost")
    assert not control_events("skip_event")


# --- console --------------------------------------------------------------------------------------


@pytest.fixture
def operator():
    user = UserFactory(username="operator")
    user.set_password(PASSWORD)
    user.save()
    return grant(user, "skip_event", "reroute_event")


def row(body: str, row_id: str) -> str:
    match = re.search(rf'<tr id="{row_id}"[^>]*>(.*?)</tr>', body, re.S)
    assert match, f"no row {row_id} in {body[:2000]}"
    return match.group(1)


@pytest.mark.django_db
def test_d4_work_page_rows_offer_skip_and_reroute_by_state(console, clock, live):
    r = router(clock)
    work_id, stuck, later = holding_work(clock, r)
    page = console.get(reverse("work-detail", args=[work_id])).content.decode()
    controls_cell = row(page, f"unrouted-{stuck.seq}")
    assert f'hx-post="{reverse("event-skip", args=[stuck.seq])}"' in controls_cell
    assert f'hx-post="{reverse("event-reroute", args=[stuck.seq])}"' in controls_cell
    assert 'hx-confirm="Skip Event' in controls_cell and 'hx-target="closest tr"' in controls_cell
    # Without JavaScript the button is a link to the confirmation page, coming back here.
    assert f'href="{reverse("event-skip", args=[stuck.seq])}?next=/work/{work_id}/' in controls_cell
    # A routed input row has no control.
    opened_row = row(
        page, f"input-{RouteRecord.objects.filter(work_id=work_id).order_by('event_id').first().event_id}"
    )
    assert "hx-post" not in opened_row
    r.close()


@pytest.mark.django_db
def test_d4_a_user_without_the_permissions_sees_no_controls(client, clock, live):
    r = router(clock)
    work_id, stuck, _ = holding_work(clock, r)
    client.force_login(UserFactory(username="viewer"))
    page = client.get(reverse("work-detail", args=[work_id])).content.decode()
    assert "hx-post" not in row(page, f"unrouted-{stuck.seq}")
    r.close()


@pytest.mark.django_db
def test_d4_live_updates_of_the_work_page_keep_the_controls_by_permission(clock, live, operator):
    from conduit_site.console.consumers import WorkConsumer

    r = router(clock)
    work_id, stuck, _ = holding_work(clock, r)
    r.close()
    consumer = WorkConsumer()
    consumer.work_id = work_id
    consumer.user = operator
    fragment = consumer.render()
    cell = row(fragment, f"unrouted-{stuck.seq}")
    assert f'hx-post="{reverse("event-skip", args=[stuck.seq])}"' in cell
    assert f'href="{reverse("event-skip", args=[stuck.seq])}?next=/work/{work_id}/"' in cell
    consumer.user = UserFactory(username="viewer")
    assert "hx-post" not in row(consumer.render(), f"unrouted-{stuck.seq}")


@pytest.mark.django_db
def test_r20_work_page_skip_with_htmx_swaps_the_row_with_its_new_state(console, clock, live):
    r = router(clock)
    work_id, stuck, _ = holding_work(clock, r)
    response = console.post(
        reverse("event-skip", args=[stuck.seq]),
        HTTP_HX_TARGET=f"unrouted-{stuck.seq}",
        HTTP_HX_CURRENT_URL=f"http://testserver/work/{work_id}/",
        **HTMX,
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert body.strip().startswith(f'<tr id="unrouted-{stuck.seq}"')
    swapped = row(body, f"unrouted-{stuck.seq}")
    assert '<span class="badge badge-skipped">skipped</span>' in swapped
    assert "skipped (skipped by operator)" in swapped and f"Work {work_id}" in swapped
    assert 'colspan="2"' in swapped  # the unrouted table: seq, type, why, accepted, controls
    # Skipped: no skip button any more, a reroute one (a copy) coming back to the Work page.
    assert "event-skip" not in swapped and reverse("event-skip", args=[stuck.seq]) not in swapped
    assert f'hx-post="{reverse("event-reroute", args=[stuck.seq])}"' in swapped
    assert f"?next=/work/{work_id}/" in swapped
    assert state(stuck) == RouteState.SKIPPED
    assert RouteRecord.objects.get(event=stuck).decided_by == "operator"
    r.close()


@pytest.mark.django_db
def test_r22_history_row_reroute_with_htmx_names_the_copy(console, clock, live):
    sample_handlers.BROKEN.add("hist")
    r = router(clock)
    opened = pr(clock, 1)
    r.route(opened.seq)
    work_id = RouteRecord.objects.get(event=opened).work_id
    stuck = accept(clock, "x.comment", {}, correlation=["pr:acme/api#1"], id="hist")
    drain(r)
    controls.event_skip(seq=stuck.seq, user="alice", clock=clock)
    page = console.get(reverse("work-detail", args=[work_id])).content.decode()
    assert f'hx-post="{reverse("event-reroute", args=[stuck.seq])}"' in row(page, f"history-{stuck.seq}")

    response = console.post(
        reverse("event-reroute", args=[stuck.seq]), HTTP_HX_TARGET=f"history-{stuck.seq}", **HTMX
    )
    assert response.status_code == 200
    swapped = row(response.content.decode(), f"history-{stuck.seq}")
    copy_seq = Event.objects.get(envelope_id="reroute/hist").seq
    assert f'rerouted as <a href="{reverse("event-detail", args=[copy_seq])}">#{copy_seq}</a>' in swapped
    assert 'colspan="7"' in swapped

    again = console.post(
        reverse("event-reroute", args=[stuck.seq]), HTTP_HX_TARGET=f"history-{stuck.seq}", **HTMX
    )
    assert again.status_code == 409
    refused = row(again.content.decode(), f"history-{stuck.seq}")
    assert f"already rerouted as the copy #{copy_seq}" in refused and 'role="alert"' in refused
    r.close()


@pytest.mark.django_db
def test_r20_event_page_controls_swap_the_route_section(console, clock, live):
    sample_handlers.BROKEN.add("page")
    event = accept(clock, "x.thing", {}, id="page")
    drain(router(clock))
    page = console.get(reverse("event-detail", args=[event.seq])).content.decode()
    section = re.search(r'<section id="event-route">(.*?)</section>', page, re.S).group(1)
    assert 'hx-target="#event-route"' in section
    assert f'hx-post="{reverse("event-skip", args=[event.seq])}"' in section

    response = console.post(reverse("event-skip", args=[event.seq]), HTTP_HX_TARGET="event-route", **HTMX)
    assert response.status_code == 200
    body = response.content.decode()
    assert body.strip().startswith('<section id="event-route">')
    assert "<strong>skipped</strong>" in body and "skipped by operator" in body
    assert f"Event #{event.seq} skipped by operator" in body


@pytest.mark.django_db
def test_r20_console_without_javascript_confirms_then_redirects_back(console, clock, live):
    sample_handlers.BROKEN.add("nojs")
    event = accept(clock, "x.thing", {}, id="nojs")
    drain(router(clock))
    url = reverse("event-skip", args=[event.seq])
    confirm = console.get(url + "?next=/dead-letters/")
    assert confirm.status_code == 200
    body = confirm.content.decode()
    assert f'<form method="post" action="{url}" id="control-form">' in body
    assert 'name="csrfmiddlewaretoken"' in body and 'name="next" value="/dead-letters/"' in body
    assert state(event) == RouteState.UNROUTED  # a GET changes nothing

    done = console.post(url, {"next": "/dead-letters/"})
    assert done.status_code == 302 and done["Location"] == "/dead-letters/"
    assert state(event) == RouteState.SKIPPED
    # An off-site next is ignored: back to the Event page.
    reroute = console.post(reverse("event-reroute", args=[event.seq]), {"next": "https://evil.example/"})
    assert reroute.status_code == 302 and reroute["Location"] == reverse("event-detail", args=[event.seq])

    # The confirmation page of a control the Event no longer takes says why (409), with no form.
    stale = console.get(url)
    assert stale.status_code == 409
    assert "only an unrouted Event can be skipped" in stale.content.decode()
    assert "control-form" not in stale.content.decode()
    refused = console.post(url)
    assert refused.status_code == 409


@pytest.mark.django_db
@pytest.mark.parametrize("url_name", ["event-skip", "event-reroute"])
def test_r20_console_controls_need_sign_in_their_permission_and_csrf(clock, live, url_name):
    sample_handlers.BROKEN.add("guard")
    event = accept(clock, "x.thing", {}, id="guard")
    drain(router(clock))
    url = reverse(url_name, args=[event.seq])
    anonymous = Client(enforce_csrf_checks=True)
    anonymous.get(reverse("login"))  # sets the CSRF cookie
    for response in (
        anonymous.get(url),
        anonymous.post(url, {"csrfmiddlewaretoken": anonymous.cookies["csrftoken"].value}),
    ):
        assert response.status_code == 302 and response["Location"] == f"{reverse('login')}?next={url}"

    viewer = Client(enforce_csrf_checks=True)
    viewer.force_login(UserFactory(username="viewer"))
    viewer.get(reverse("console-home"))  # sets the CSRF cookie
    token = viewer.cookies["csrftoken"].value
    assert viewer.get(url).status_code == 403
    assert viewer.post(url, {"csrfmiddlewaretoken": token}, **HTMX).status_code == 403

    user = grant(UserFactory(username="permitted"), url_name.replace("event-", "") + "_event")
    permitted = Client(enforce_csrf_checks=True)
    permitted.force_login(user)
    permitted.get(reverse("console-home"))
    assert permitted.post(url, **HTMX).status_code == 403  # no CSRF token
    assert state(event) == RouteState.UNROUTED and not Event.objects.filter(source="core.manual").exists()
    token = permitted.cookies["csrftoken"].value
    ok = permitted.post(url, HTTP_X_CSRFTOKEN=token, HTTP_HX_TARGET=f"unrouted-{event.seq}", **HTMX)
    assert ok.status_code == 200
    assert Event.objects.filter(source="core.manual").count() == 1


# --- a refused control shows the server's message, with and without JavaScript ----

SWAP_MARK = re.compile(r'data-swap-statuses="([^"]*)"')


def controls_swap_409(body: str, seq: int) -> bool:
    """Whether every htmx skip/reroute control of Event ``seq`` in ``body`` marks 409 for
    swapping on itself: htmx fires beforeSwap on the target (its row or the route section), so
    static/js/console.js finds the mark through the requesting element."""
    tags = re.findall(rf'<a [^>]*hx-post="/events/{seq}/(?:skip|reroute)/"[^>]*>', body)
    return bool(tags) and all("409" in SWAP_MARK.search(tag).group(1).split() for tag in tags)


@pytest.mark.django_db
def test_event_page_skip_and_reroute_refusals_show_the_message_with_and_without_javascript(
    console, clock, live
):
    sample_handlers.BROKEN.add("refused")
    event = accept(clock, "x.thing", {}, id="refused")
    drain(router(clock))
    page = console.get(reverse("event-detail", args=[event.seq])).content.decode()
    assert controls_swap_409(page, event.seq)
    controls.event_skip(seq=event.seq, user="alice", clock=clock)  # someone else, meanwhile
    skip = reverse("event-skip", args=[event.seq])

    htmx = console.post(skip, HTTP_HX_TARGET="event-route", **HTMX)
    assert htmx.status_code == 409
    assert htmx.content.decode().strip().startswith('<section id="event-route">')
    assert re.search(r'role="alert"[^>]*>[^<]*only an unrouted Event can be skipped', htmx.content.decode())
    plain = console.post(skip)
    assert plain.status_code == 409
    assert re.search(r'role="alert"[^>]*>[^<]*only an unrouted Event can be skipped', plain.content.decode())

    page = console.get(reverse("event-detail", args=[event.seq])).content.decode()
    assert controls_swap_409(page, event.seq)  # the Reroute the skipped Event now offers
    copy = controls.event_reroute(seq=event.seq, user="alice", clock=clock)
    reroute = reverse("event-reroute", args=[event.seq])
    htmx = console.post(reroute, HTTP_HX_TARGET="event-route", **HTMX)
    assert htmx.status_code == 409
    assert f"already rerouted as the copy #{copy.copy_seq}" in htmx.content.decode()
    plain = console.post(reroute)
    assert plain.status_code == 409
    assert f"already rerouted as the copy #{copy.copy_seq}" in plain.content.decode()


@pytest.mark.django_db
def test_work_page_row_refusals_show_the_message_with_and_without_javascript(console, clock, live):
    r = router(clock)
    work_id, stuck, later = holding_work(clock, r)
    r.close()
    page = console.get(reverse("work-detail", args=[work_id])).content.decode()
    assert controls_swap_409(page, later.seq) and controls_swap_409(page, stuck.seq)
    controls.event_skip(seq=later.seq, user="alice", clock=clock)
    skip = reverse("event-skip", args=[later.seq])

    htmx = console.post(
        skip,
        HTTP_HX_TARGET=f"unrouted-{later.seq}",
        HTTP_HX_CURRENT_URL=f"http://testserver/work/{work_id}/",
        **HTMX,
    )
    assert htmx.status_code == 409
    refused = row(htmx.content.decode(), f"unrouted-{later.seq}")
    assert 'role="alert"' in refused and "only an unrouted Event can be skipped" in refused
    plain = console.post(skip, {"next": f"/work/{work_id}/"})
    assert plain.status_code == 409 and "only an unrouted Event can be skipped" in plain.content.decode()
