"""The dead letters page: failed and skipped Events, filtered and keyset paginated, rerouted
several at a time, each with its own control Event in its own transaction (R16, R20, R22)."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from causal.models import Event
from causal.selectors import ListTotal
from conduit_site.console.views import dead_letters as dead_letter_views
from controls import events as controls
from routing.engine.selectors import DeadLetterFilter, dead_letters_total
from routing.models import RouteRecord
from tests.causal.factories import EventFactory
from tests.conduit_site.console.views.consolekit import newest_and_oldest
from tests.routing import sample_handlers
from tests.routing.factories import RouteRecordFactory, UserFactory
from tests.routing.routerkit import HANDLERS, accept, apply, drain, router
from tests.worklife.factories import WorkFactory

URL = "/dead-letters/"
REROUTE_URL = "/dead-letters/reroute/"


@pytest.fixture
def handlers(settings, clock, monkeypatch):
    settings.CONDUIT_ROUTE_HANDLERS = dict(HANDLERS)
    sample_handlers.BROKEN.clear()
    sample_handlers.CALLS.clear()
    monkeypatch.setattr(dead_letter_views, "clock", clock)


@pytest.fixture
def operator():
    user = UserFactory(username="operator")
    user.user_permissions.add(
        Permission.objects.get(content_type__app_label="routing", codename="reroute_event")
    )
    return user


@pytest.fixture
def console(client, operator):
    client.force_login(operator)
    return client


def dead_letters(clock):
    """A failed Event (a handler panic, with its stack) on a Work, a failed invalid one, a
    skipped one and a routed one."""
    apply(clock)
    r = router(clock)
    opened = accept(clock, "github.pull_request.opened", {"repo": "acme/api", "number": 1})
    r.route(opened.seq)
    work_id = RouteRecord.objects.get(event=opened).work_id
    panic = accept(clock, "x.crash", {"behaviour": "panic"}, correlation=["pr:acme/api#1"], id="panic")
    invalid = accept(clock, "x.bad", {"behaviour": "invalid"}, scope="acme/web", id="invalid")
    sample_handlers.BROKEN.add("skipme")
    skipped = accept(clock, "x.skip", {}, id="skipme")
    drain(r)
    r.close()
    controls.event_skip(seq=skipped.seq, user="alice", clock=clock)
    return work_id, opened, panic, invalid, skipped


def row(body: str, seq: int) -> str:
    match = re.search(rf'<tr id="dead-{seq}">(.*?)</tr>', body, re.S)
    assert match, f"no dead letter #{seq}"
    return match.group(1)


def rows(body: str) -> list[int]:
    return [int(seq) for seq in re.findall(r'<tr id="dead-(\d+)">', body)]


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_r16_dead_letters_list_failed_and_skipped_events_with_error_attempts_and_work(console, clock):
    work_id, opened, panic, invalid, skipped = dead_letters(clock)
    body = console.get(URL).content.decode()
    assert rows(body) == [skipped.seq, invalid.seq, panic.seq]  # newest first; routed ones are not here
    crash = row(body, panic.seq)
    assert "handler_panic" in crash and "badge-failed" in crash
    # The error's first line, the whole of it (with the stack) on expand.
    summary = re.search(r"<summary>(.*?)</summary>", crash).group(1)
    assert summary == "route scripted: RuntimeError: handler bug: boom"
    assert "Traceback (most recent call last)" in crash
    assert f'<a href="{reverse("work-detail", args=[work_id])}">Work {work_id}</a>' in crash
    assert '<td class="num">1</td>' in crash  # attempts
    assert f'<input type="checkbox" name="seq" value="{panic.seq}"' in crash
    assert "skipped by alice" in row(body, skipped.seq) and "badge-skipped" in row(body, skipped.seq)
    assert f'href="{URL}" aria-current="page">Dead letters</a>' in body


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_r16_dead_letters_filter_by_scope_route_code_and_disposition(console, clock):
    _, _, panic, invalid, skipped = dead_letters(clock)
    assert rows(console.get(URL, {"scope": "acme/web"}).content.decode()) == [invalid.seq]
    assert rows(console.get(URL, {"code": "handler_panic"}).content.decode()) == [panic.seq]
    assert rows(console.get(URL, {"code": "skipped by alice"}).content.decode()) == [skipped.seq]
    assert rows(console.get(URL, {"disposition": "failed"}).content.decode()) == [invalid.seq, panic.seq]
    # A skipped Event keeps the route that failed on it.
    assert rows(console.get(URL, {"route": "scripted", "scope": "acme"}).content.decode()) == [
        skipped.seq,
        panic.seq,
    ]
    assert rows(
        console.get(URL, {"route": "scripted", "disposition": "failed", "scope": "acme"}).content.decode()
    ) == [panic.seq]
    assert "No dead letters match these filters" in console.get(URL, {"route": "nope"}).content.decode()
    bad = console.get(URL, {"disposition": "routed"})
    assert bad.status_code == 400 and "disposition: Select a valid choice" in bad.content.decode()
    partial = console.get(
        URL, {"scope": "acme/web"}, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="dead-letter-list"
    )
    assert partial.content.decode().strip().startswith('<section id="dead-letter-list" ')


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_r16_dead_letters_are_keyset_paginated_at_a_fixed_query_count(console, django_assert_max_num_queries):
    work = WorkFactory()

    def grow(n):
        for _ in range(n):
            RouteRecordFactory(
                event=EventFactory(route_state="failed"),
                work=work,
                policy="failed",
                reason="handler_failed",
                disposition="failed",
                error="route x: down\nmore",
                attempts=5,
            )

    grow(5)
    with django_assert_max_num_queries(8):
        small = console.get(URL)
    grow(55)
    with django_assert_max_num_queries(8):
        first = console.get(URL)
    assert len(rows(small.content.decode())) == 5
    body = first.content.decode()
    page = rows(body)
    assert len(page) == 50 and page == sorted(page, reverse=True)
    next_url = re.search(r'<a href="([^"]+)"[^>]*rel="next"', body).group(1).replace("&amp;", "&")
    assert next_url == f"{URL}?before={page[-1]}"
    rest = rows(console.get(next_url).content.decode())
    assert len(rest) == 10 and max(rest) < min(page)


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_r22_dead_letters_reroute_several_each_with_its_own_control_event(console, clock):
    _, _, panic, invalid, skipped = dead_letters(clock)
    controls.event_reroute(seq=invalid.seq, user="alice", clock=clock)  # rerouted already
    before = rows(console.get(URL).content.decode())
    assert f'value="{invalid.seq}"' not in row(console.get(URL).content.decode(), invalid.seq)

    response = console.post(
        REROUTE_URL,
        {"seq": [panic.seq, invalid.seq, skipped.seq, 999999], "scope": "acme"},
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="dead-letter-list",
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert body.strip().startswith('<section id="dead-letter-list" ')
    copies = {e.envelope_id: e.seq for e in Event.objects.filter(envelope_id__startswith="reroute/")}
    outcome = {int(s): text for s, text in re.findall(r'<li id="outcome-(\d+)">(.*?)</li>', body, re.S)}
    assert (
        f'rerouted as <a href="{reverse("event-detail", args=[copies["reroute/panic"]])}">'
        in outcome[panic.seq]
    )
    assert f"#{copies['reroute/skipme']}</a>" in outcome[skipped.seq]
    assert f"already rerouted as the copy #{copies['reroute/invalid']}" in outcome[invalid.seq]
    assert "no Event has seq 999999" in outcome[999999]
    # Each Event rerouted has its own control Event; the refused ones none.
    controls_by_event = sorted(
        e.data["event"] for e in Event.objects.filter(type="core.manual.reroute_event")
    )
    assert controls_by_event == sorted([invalid.seq, panic.seq, skipped.seq])
    # The list keeps the filters it was posted with (scope acme: not acme/web's invalid Event).
    assert rows(body) == [s for s in before if s != invalid.seq]
    assert "rerouted as" in row(body, panic.seq)


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_r22_dead_letters_reroute_refuses_bad_selections(console, clock):
    dead_letters(clock)
    empty = console.post(REROUTE_URL, {})
    assert empty.status_code == 400 and "seq: select at least one Event to reroute" in empty.content.decode()
    bad = console.post(REROUTE_URL, {"seq": ["abc"]})
    assert bad.status_code == 400 and "seq: abc is not an Event seq" in bad.content.decode()
    too_many = console.post(REROUTE_URL, {"seq": [str(n) for n in range(1, controls.MAX_BATCH + 2)]})
    assert too_many.status_code == 400 and f"at most {controls.MAX_BATCH} Events" in too_many.content.decode()
    assert not Event.objects.filter(envelope_id__startswith="reroute/").exists()


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_r20_dead_letters_reroute_needs_sign_in_the_permission_and_csrf(clock):
    _, _, panic, _, _ = dead_letters(clock)
    anonymous = Client()
    assert anonymous.get(URL)["Location"] == f"{reverse('login')}?next={URL}"
    assert anonymous.post(REROUTE_URL, {"seq": [panic.seq]})["Location"].startswith(reverse("login"))

    viewer = Client(enforce_csrf_checks=True)
    viewer.force_login(UserFactory(username="viewer"))
    page = viewer.get(URL).content.decode()
    assert "Reroute selected" not in page
    token = viewer.cookies["csrftoken"].value
    assert viewer.post(REROUTE_URL, {"seq": [panic.seq], "csrfmiddlewaretoken": token}).status_code == 403

    operator = UserFactory(username="op2")
    operator.user_permissions.add(
        Permission.objects.get(content_type__app_label="routing", codename="reroute_event")
    )
    permitted = Client(enforce_csrf_checks=True)
    permitted.force_login(operator)
    assert "Reroute selected" in permitted.get(URL).content.decode()
    assert permitted.post(REROUTE_URL, {"seq": [panic.seq]}).status_code == 403  # no CSRF token
    assert not Event.objects.filter(envelope_id__startswith="reroute/").exists()
    token = permitted.cookies["csrftoken"].value
    assert permitted.post(REROUTE_URL, {"seq": [panic.seq], "csrfmiddlewaretoken": token}).status_code == 200
    assert Event.objects.filter(envelope_id="reroute/panic").exists()


@pytest.mark.usefixtures("handlers")
@pytest.mark.django_db
def test_dead_letters_reroute_bad_selection_with_htmx_is_the_list_marked_to_swap_400(console, clock):
    dead_letters(clock)
    page = console.get(URL).content.decode()
    assert '<section id="dead-letter-list" data-swap-statuses="409 400">' in page
    response = console.post(REROUTE_URL, {}, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="dead-letter-list")
    assert response.status_code == 400
    body = response.content.decode().strip()
    # The swap target itself carries the mark (static/js/console.js swaps it in) and the message.
    assert body.startswith('<section id="dead-letter-list" data-swap-statuses="409 400">')
    assert re.search(r'role="alert">[^<]*seq: select at least one Event to reroute', body)


# --- totals, paging both ways and the CLI's own filters -------------------------------------------


@pytest.mark.usefixtures("routing_handlers")
@pytest.mark.django_db
def test_dead_letters_show_their_total_and_jump_to_the_oldest(operator_console):
    records = [
        RouteRecordFactory(event__scope="acme", disposition="failed", reason="handler_failed")
        for _ in range(55)
    ]
    RouteRecordFactory(event__scope="elsewhere", disposition="failed")
    RouteRecordFactory(event__scope="acme", disposition="queued")  # not a dead letter
    seqs = sorted(r.event_id for r in records)
    newest_and_oldest(operator_console, "dead-letters", "dead", seqs, "dead letters", {"scope": "acme"})
    assert dead_letters_total(DeadLetterFilter(scope="acme"), cap=10) == ListTotal(10, capped=True)
