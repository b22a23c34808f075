"""The console's Event page kept whole and live, finding Events and Work
with the CLI's own filters, and the lists' totals and paging both ways."""

from __future__ import annotations

import io
import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from causal.models import RouteState
from causal.selectors import DiagnosticFilter, ListTotal, count_capped, diagnostics_total
from conduit_site.console.views import controls as control_views
from controls import events as controls
from routing.config.selectors import generations_total
from routing.engine.decide import Effect
from routing.engine.selectors import DeadLetterFilter, dead_letters_total
from routing.records.selectors import UNDELIVERED_OUTCOMES
from tests.causal.factories import CausalDiagnosticFactory, EventFactory
from tests.controls.controlkit import holding_work
from tests.routing import sample_handlers
from tests.routing.factories import GenerationFactory, RouteRecordFactory, UserFactory, live_scopes
from tests.routing.routerkit import accept, apply, drain, router
from tests.worklife.factories import CorrelationKeyFactory, WorkFactory, WorkInputFactory

HTMX = {"HTTP_HX_REQUEST": "true"}
T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def handlers(test_handlers):
    """Every test here routes with the test handlers registered (tests/conftest.py)."""


@pytest.fixture
def operator():
    user = UserFactory(username="operator")
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="routing", codename__in=["skip_event", "reroute_event"]
        )
    )
    return user


@pytest.fixture
def console(client, operator, clock, monkeypatch):
    monkeypatch.setattr(control_views, "clock", clock)
    client.force_login(operator)
    return client


def text(response) -> str:
    return response.content.decode()


def part(body: str, tag: str, element_id: str) -> str:
    """The element ``<tag id="element_id" …>…</tag>`` of ``body`` (first one, not nested)."""
    match = re.search(rf'<{tag} id="{element_id}"[^>]*>(.*?)</{tag}>', body, re.S)
    assert match, f"no {tag}#{element_id} in {body[:3000]}"
    return match.group(0)


def rows(body: str, prefix: str = "event") -> list[int]:
    return [int(s) for s in re.findall(rf'<tr id="{prefix}-(\d+)"', body)]


def failing_event(clock, name: str):
    """An Event whose route keeps failing: unrouted, with a failure counted."""
    sample_handlers.BROKEN.add(name)
    event = accept(clock, "x.thing", {}, id=name)
    r = router(clock)
    try:
        drain(r)
    finally:
        r.close()
    return event


# --- the Event page, whole and live -----------------------------------------------------------------


@pytest.mark.django_db
def test_skip_on_the_event_page_updates_heading_state_route_and_chain_at_once(console, clock):
    apply(clock)
    event = failing_event(clock, "whole")
    page = text(console.get(reverse("event-detail", args=[event.seq])))
    assert "badge-unrouted" in part(page, "h1", "event-heading")

    response = console.post(reverse("event-skip", args=[event.seq]), HTTP_HX_TARGET="event-route", **HTMX)
    assert response.status_code == 200
    body = text(response)
    # The target first, then every other part of the page out of band, all saying skipped.
    assert body.strip().startswith('<section id="event-route">')
    assert "<strong>skipped</strong>" in part(body, "section", "event-route")
    heading = part(body, "h1", "event-heading")
    assert 'hx-swap-oob="true"' in heading and "badge-skipped" in heading and "unrouted" not in heading
    state_box = part(body, "section", "event-state")
    assert (
        'hx-swap-oob="true"' in state_box
        and "badge-skipped" in state_box
        and "unrouted_reason</dt><dd>—" in state_box
    )
    chain = part(body, "section", "event-chain")
    assert 'hx-swap-oob="true"' in chain
    assert "badge-skipped" in re.search(rf'<tr id="chain-{event.seq}".*?</tr>', chain, re.S).group(0)
    # The control's message sits outside the parts live updates replace.
    result = part(body, "div", "event-control-result")
    assert f"Event #{event.seq} skipped by operator" in result and 'hx-swap-oob="true"' in result


@pytest.mark.django_db
def test_a_rerouted_event_links_to_its_copy_instead_of_offering_reroute(console, clock):
    apply(clock)
    event = failing_event(clock, "copied")
    controls.event_skip(seq=event.seq, user="alice", clock=clock)
    before = text(console.get(reverse("event-detail", args=[event.seq])))
    assert f'hx-post="{reverse("event-reroute", args=[event.seq])}"' in before

    response = console.post(reverse("event-reroute", args=[event.seq]), HTTP_HX_TARGET="event-route", **HTMX)
    assert response.status_code == 200
    copy_seq = controls.reroute_copies([event])[event.seq]
    for body in (text(response), text(console.get(reverse("event-detail", args=[event.seq])))):
        route = part(body, "section", "event-route")
        assert f'hx-post="{reverse("event-reroute", args=[event.seq])}"' not in route
        assert f'rerouted as <a href="{reverse("event-detail", args=[copy_seq])}">#{copy_seq}</a>' in route
        assert f"#{copy_seq}" in part(body, "h1", "event-heading")
        assert f"#{copy_seq}</a> (its copy" in part(body, "section", "event-state")


@pytest.mark.django_db
def test_unmatched_and_dropped_events_are_not_shown_as_routed(console):
    # The policies named without importing the decision are the decision's own.
    assert set(UNDELIVERED_OUTCOMES) == {Effect.UNMATCHED, Effect.DROP}
    unmatched = EventFactory(route_state=RouteState.ROUTED)
    RouteRecordFactory(event=unmatched, policy="unmatched")
    dropped = EventFactory(route_state=RouteState.ROUTED)
    RouteRecordFactory(event=dropped, policy="drop")
    delivered = EventFactory(route_state=RouteState.ROUTED)
    RouteRecordFactory(event=delivered, policy="queue")
    body = text(console.get(reverse("event-list")))
    assert 'badge-unmatched">unmatched' in part(body, "tr", f"event-{unmatched.seq}")
    assert 'badge-dropped">dropped' in part(body, "tr", f"event-{dropped.seq}")
    assert 'badge-routed">routed' in part(body, "tr", f"event-{delivered.seq}")
    page = text(console.get(reverse("event-detail", args=[unmatched.seq])))
    assert 'badge-unmatched">unmatched' in part(page, "h1", "event-heading")


# --- find, with the CLI's filters ----------------------------------------------------------------


def cli_seqs(**options) -> list[int]:
    out = io.StringIO()
    arguments = [f"--{k}" if v == "" else f"--{k}={v}" for k, v in options.items()]
    call_command("events", "list", "--json", *arguments, stdout=out)
    return [item["conduit"]["seq"] for item in json.loads(out.getvalue())["events"]]


@pytest.mark.django_db
def test_event_list_filters_as_events_list_does(console):
    pr = EventFactory(scope="acme/web", type="github.pull_request.opened", accepted_at=T0)
    push = EventFactory(scope="acme", type="github.push", accepted_at=T0 + timedelta(hours=1))
    deep = EventFactory(scope="acme/web/x", type="slack.message", accepted_at=T0 + timedelta(hours=2))
    # Types and scopes compare case-sensitively, as routes match them.
    EventFactory(scope="ACME/web", type="GitHub.push", accepted_at=T0)
    other = EventFactory(
        scope="acmeco", type="github.push", subject="PR 7", accepted_at=T0 + timedelta(hours=3)
    )
    unmatched = EventFactory(
        scope="ops", type="ops.alert", envelope_id="alert-1", route_state=RouteState.ROUTED
    )
    RouteRecordFactory(event=unmatched, policy="unmatched")

    def listed(params: dict[str, str], cli: dict[str, str]) -> list[int]:
        response = console.get(reverse("event-list"), params)
        assert response.status_code == 200, text(response)
        shown = rows(text(response))
        # One code path: the page lists what the CLI lists for the same filters.
        assert shown == cli_seqs(**cli)
        return shown

    assert listed({"type": "github.*"}, {"type": "github.*"}) == [other.seq, push.seq, pr.seq]
    assert listed({"scope": "acme", "subtree": "1"}, {"scope": "acme", "subtree": ""}) == [
        deep.seq,
        push.seq,
        pr.seq,
    ]
    assert listed({"scope": "acme"}, {"scope": "acme"}) == [push.seq]
    since, until = (T0 + timedelta(hours=1)).isoformat(), (T0 + timedelta(hours=3)).isoformat()
    assert listed({"since": since, "until": until}, {"since": since, "until": until}) == [deep.seq, push.seq]
    assert listed({"since": "2026-01-05T13:00"}, {"since": "2026-01-05T13:00"})[-1] == push.seq
    assert listed({"q": "alert-1"}, {"query": "alert-1"}) == [unmatched.seq]
    assert listed({"q": "PR 7"}, {"query": "PR 7"}) == [other.seq]
    assert listed({"q": f"#{deep.seq}"}, {"query": f"#{deep.seq}"}) == [deep.seq]
    assert listed({"policy": "unmatched"}, {"policy": "unmatched"}) == [unmatched.seq]
    assert listed(
        {"scope": "acme", "subtree": "1", "type": "github.*"},
        {"scope": "acme", "subtree": "", "type": "github.*"},
    ) == [
        push.seq,
        pr.seq,
    ]


@pytest.mark.django_db
def test_bad_filters_name_their_field_and_list_nothing(console):
    response = console.get(reverse("event-list"), {"since": "last week", "route_state": "lost"})
    assert response.status_code == 400
    body = text(response)
    assert (
        "since: expected an ISO 8601 time like 2026-01-05T12:00:00Z" in body
        and "&#x27;last week&#x27;" in body
    )
    assert "route_state: Select a valid choice" in body
    refused = console.get(reverse("event-list"), {"subtree": "1"})
    assert refused.status_code == 400 and "subtree: needs a scope" in text(refused)
    backwards = console.get(reverse("event-list"), {"since": "2026-01-06", "until": "2026-01-05"})
    assert backwards.status_code == 400 and "until: must be later than since" in text(backwards)


@pytest.mark.django_db
def test_event_list_offers_known_types_scopes_and_policies(console):
    live_scopes("acme", "acme/web")
    EventFactory(scope="ops", type="ops.alert")
    EventFactory.create_batch(3, scope="acme", type="github.push")
    body = text(console.get(reverse("event-list")))
    types = part(body, "datalist", "event-types")
    assert re.findall(r'<option value="([^"]+)">', types) == ["github.push", "ops.alert"]
    scopes = part(body, "datalist", "scope-paths")
    assert re.findall(r'<option value="([^"]+)">', scopes) == ["acme", "acme/web", "ops"]
    policies = re.findall(r'<option value="([^"]+)">', part(body, "datalist", "route-policies"))
    assert {"unmatched", "drop", "queue", "start", "skipped", "failed"} <= set(policies)


@pytest.mark.django_db
def test_work_list_filters_by_binding_status_parked_and_key(console):
    agent = WorkFactory(scope="acme", binding="agent")
    WorkFactory(scope="acme", binding="shell")
    parked = WorkFactory(scope="acme", binding="agent", status="ready", parked_at=T0)
    CorrelationKeyFactory(work=agent, scope="acme", key="pr:acme/web#42")

    def listed(**params) -> list[int]:
        response = console.get(reverse("work-list"), params)
        assert response.status_code == 200, text(response)
        shown = rows(text(response), "work")
        out = io.StringIO()
        options = [f"--{k}={v}" for k, v in params.items()]
        call_command("work", "list", "--json", *options, stdout=out)
        assert shown == [w["id"] for w in json.loads(out.getvalue())["work"]]
        return shown

    assert listed(binding="agent") == [parked.pk, agent.pk]
    assert listed(binding="agent", status="parked") == [parked.pk]
    assert listed(key="pr:acme/web#42") == [agent.pk]
    assert listed(key="pr:acme/web#42", scope="acme") == [agent.pk]
    assert listed(key="pr:acme/web#42", scope="other") == []
    assert listed(key="nobody-owns-this") == []
    body = text(console.get(reverse("work-list")))
    assert 'name="binding"' in body and 'name="key"' in body


# --- totals and paging ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_totals_are_exact_up_to_the_cap_then_say_plus():
    EventFactory.create_batch(7)
    from causal.models import Event

    assert count_capped(Event.objects.all(), cap=10) == ListTotal(7, capped=False)
    assert count_capped(Event.objects.all(), cap=5) == ListTotal(5, capped=True)
    assert str(ListTotal(10_000, capped=True)) == "10,000+"
    assert str(ListTotal(1234, capped=False)) == "1,234"


@pytest.mark.django_db
def test_event_list_shows_its_total_and_jumps_to_newest_and_oldest(console):
    events = EventFactory.create_batch(120, scope="acme")
    seqs = [e.seq for e in events]
    EventFactory(scope="elsewhere")
    newest = text(console.get(reverse("event-list"), {"scope": "acme"}))
    assert "120 Events</span>" in newest
    assert rows(newest) == seqs[::-1][:50]
    oldest_url = reverse("event-list") + "?scope=acme&amp;oldest=1"
    assert f'<a href="{oldest_url}"' in newest

    oldest = text(console.get(reverse("event-list"), {"scope": "acme", "oldest": "1"}))
    assert rows(oldest) == seqs[:50]
    assert "120 Events, oldest first" in oldest
    assert f'<a href="{oldest_url}"' not in oldest  # on it already
    newer = re.search(r'<a href="([^"]+)"[^>]*rel="next">Newer', oldest).group(1).replace("&amp;", "&")
    assert newer == f"{reverse('event-list')}?scope=acme&oldest=1&after={seqs[49]}"
    second = text(console.get(newer))
    assert rows(second) == seqs[50:100]
    assert f'ws-connect="/ws/events/?scope=acme&amp;oldest=1&amp;after={seqs[49]}"' in second
    assert "← Newest" in second
    mixed = console.get(reverse("event-list"), {"before": seqs[10], "oldest": "1"})
    assert mixed.status_code == 400 and "before: pages a newest-first list" in text(mixed)


@pytest.mark.django_db
def test_work_list_shows_its_total_and_jumps_to_the_oldest(console):
    works = WorkFactory.create_batch(55, scope="acme")
    body = text(console.get(reverse("work-list"), {"scope": "acme"}))
    assert "55 Work</span>" in body and rows(body, "work") == [w.pk for w in works][::-1][:50]
    oldest = text(console.get(reverse("work-list"), {"scope": "acme", "oldest": "1"}))
    assert rows(oldest, "work") == [w.pk for w in works][:50]
    later = text(console.get(reverse("work-list"), {"scope": "acme", "oldest": "1", "after": works[49].pk}))
    assert rows(later, "work") == [w.pk for w in works][50:]


@pytest.mark.django_db
def test_work_page_input_reads_newest_first_with_its_total_and_stays_live_paged(console):
    work = WorkFactory()
    inputs = [item.seq for item in WorkInputFactory.create_batch(60, work=work)]
    url = reverse("work-detail", args=[work.pk])
    first = text(console.get(url))
    assert "60 inputs, in acceptance order" in first
    assert rows(first, "input") == inputs[:50]
    assert f'<a href="{url}?input_order=newest">Show newest first</a>' in first

    newest = text(console.get(url, {"input_order": "newest"}))
    assert rows(newest, "input") == inputs[::-1][:50]
    assert "60 inputs, newest first" in newest
    next_url = f"{url}?input_order=newest&amp;input_before={inputs[10]}"
    assert f'<a href="{next_url}" rel="next">Earlier input →</a>' in newest
    earlier = text(console.get(url, {"input_order": "newest", "input_before": inputs[10]}))
    assert rows(earlier, "input") == inputs[:10][::-1]
    assert f'ws-connect="/ws/work/{work.pk}/?input_order=newest&amp;input_before={inputs[10]}"' in earlier
    mixed = console.get(url, {"input_order": "newest", "input_after": inputs[3]})
    assert mixed.status_code == 400 and "input_after" in text(mixed)


def count_queries(client, url, params=None) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url, params or {})
    assert response.status_code == 200, text(response)
    return len(queries)


@pytest.mark.django_db
def test_filtered_list_query_counts_are_pinned_and_do_not_grow(console, django_assert_max_num_queries):
    events = {
        "q": "subject 1",
        "scope": "acme",
        "subtree": "1",
        "type": "github.*",
        "policy": "queue",
        "since": "2026-01-01",
    }
    work = {"scope": "acme", "status": "ready", "binding": "agent", "key": "k"}

    def grow(n):
        for event in EventFactory.create_batch(n, scope="acme/web", type="github.push", subject="subject 1"):
            RouteRecordFactory(event=event, policy="queue")
        for item in WorkFactory.create_batch(n, scope="acme", binding="agent"):
            CorrelationKeyFactory(work=item, scope="acme")

    grow(3)
    # The session, its user, the permission check (4); the Events list: its seqs and rows, the
    # failures, the total and the three lists to pick from (7); the Work list: its page and
    # total (2); the heartbeat banner (1 a page).
    with django_assert_max_num_queries(12):
        small_events = count_queries(console, reverse("event-list"), events)
    with django_assert_max_num_queries(7):
        small_work = count_queries(console, reverse("work-list"), work)
    grow(60)
    with django_assert_max_num_queries(12):
        assert count_queries(console, reverse("event-list"), events) == small_events
    with django_assert_max_num_queries(7):
        assert count_queries(console, reverse("work-list"), work) == small_work


@pytest.mark.django_db
def test_the_work_page_history_links_a_rerouted_event_to_its_copy(console, clock):
    apply(clock)
    r = router(clock)
    try:
        work_id, stuck, _later = holding_work(clock, r)
    finally:
        r.close()
    controls.event_skip(seq=stuck.seq, user="alice", clock=clock)  # recorded on the Work it holds
    url = reverse("work-detail", args=[work_id])
    before = part(text(console.get(url)), "tr", f"history-{stuck.seq}")
    assert f'hx-post="{reverse("event-reroute", args=[stuck.seq])}"' in before
    copy_seq = controls.event_reroute(seq=stuck.seq, user="alice", clock=clock).copy_seq
    after = part(text(console.get(url)), "tr", f"history-{stuck.seq}")
    assert f'hx-post="{reverse("event-reroute", args=[stuck.seq])}"' not in after
    assert f'rerouted as <a href="{reverse("event-detail", args=[copy_seq])}">#{copy_seq}</a>' in after


# --- every list shows its total and jumps to its newest and oldest page -----------------------------


def newest_and_oldest(console, url_name: str, prefix: str, keys: list[int], noun: str, params=None):
    """The list at ``url_name`` counts ``keys`` (ascending), shows them newest first, jumps to
    the oldest page and pages on from there, newer each page."""
    params = params or {}
    url = reverse(url_name)
    newest = text(console.get(url, params))
    assert f"{len(keys)} {noun}</span>" in newest
    assert rows(newest, prefix) == keys[::-1][:50]
    oldest_link = re.search(r'<a href="([^"]+)"[^>]*>Oldest ⇥</a>', newest).group(1).replace("&amp;", "&")
    oldest = text(console.get(oldest_link))
    assert rows(oldest, prefix) == keys[:50]
    assert f"{len(keys)} {noun}, oldest first" in oldest and "Oldest ⇥" not in oldest and "← Newest" in oldest
    newer = re.search(r'<a href="([^"]+)"[^>]*rel="next">Newer', oldest).group(1).replace("&amp;", "&")
    assert rows(text(console.get(newer)), prefix) == keys[50:100]
    mixed = console.get(url, {**params, "before": keys[10], "oldest": "1"})
    assert mixed.status_code == 400 and "pages a newest-first list" in text(mixed)


@pytest.mark.django_db
def test_dead_letters_show_their_total_and_jump_to_the_oldest(console):
    records = [
        RouteRecordFactory(event__scope="acme", disposition="failed", reason="handler_failed")
        for _ in range(55)
    ]
    RouteRecordFactory(event__scope="elsewhere", disposition="failed")
    RouteRecordFactory(event__scope="acme", disposition="queued")  # not a dead letter
    seqs = sorted(r.event_id for r in records)
    newest_and_oldest(console, "dead-letters", "dead", seqs, "dead letters", {"scope": "acme"})
    assert dead_letters_total(DeadLetterFilter(scope="acme"), cap=10) == ListTotal(10, capped=True)


@pytest.mark.django_db
def test_causal_refusals_show_their_total_and_jump_to_the_oldest(console):
    ids = [d.pk for d in CausalDiagnosticFactory.create_batch(55, kind="rate_exceeded", root_seq=7)]
    CausalDiagnosticFactory(kind="depth_exceeded", root_seq=8)
    newest_and_oldest(console, "causal-diagnostics", "diagnostic", ids, "refusals", {"kind": "rate_exceeded"})
    assert diagnostics_total(DiagnosticFilter(root_seq=7), cap=50) == ListTotal(50, capped=True)
    assert diagnostics_total(DiagnosticFilter(root_seq=8)) == ListTotal(1, capped=False)


@pytest.mark.django_db
def test_configuration_generations_show_their_total_and_jump_to_the_oldest(console):
    ids = [g.pk for g in GenerationFactory.create_batch(55)]
    newest_and_oldest(console, "config-list", "generation", ids, "generations")
    assert generations_total(cap=5) == ListTotal(5, capped=True)
