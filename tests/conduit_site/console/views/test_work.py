"""The console shows the Work engine: the Work page's attempts, waits,
timers, intents and children and its one line saying why the Work is not running; parked and
backing-off Work in the Work list; running and parked Work on the home page."""

from __future__ import annotations

import io
import json
import re
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from causal.models import Event
from conduit_site.console.views import home as home_views
from conduit_site.console.views import work as work_views
from controls import events as controls
from routing.models import RouteRecord
from tests.causal.factories import EventFactory
from tests.conduit_site.console.views.consolekit import (
    CAP_T0,
    count_queries,
    htmx,
    part,
    row_seqs,
    text,
)
from tests.controls.controlkit import holding_work
from tests.routing import sample_handlers
from tests.routing.factories import RouteRecordFactory
from tests.routing.routedkit import pr, route_all
from tests.routing.routerkit import accept, apply, router
from tests.worklife.factories import (
    T0,
    AttemptFactory,
    CorrelationKeyFactory,
    DependencySubscriptionFactory,
    IntentFactory,
    TimerFactory,
    WaitFactory,
    WorkFactory,
    WorkInputFactory,
)
from worklife.selectors import WorkFilter, work_counts, work_filtered

pytestmark = pytest.mark.django_db


@pytest.fixture
def fake_clock(clock, monkeypatch):
    monkeypatch.setattr(work_views, "clock", clock)


def page(console, work) -> str:
    response = console.get(reverse("work-detail", args=[work.pk]))
    assert response.status_code == 200
    return response.content.decode()


def section(body: str, element_id: str) -> str:
    """The markup of the section ``element_id`` (up to the first ``</section>``: a nested
    section ends it)."""
    match = re.search(rf'<section[^>]* id="{element_id}"[^>]*>(.*?)</section>', body, re.S)
    assert match, element_id
    return match.group(1)


def row(body: str, element_id: str) -> str:
    match = re.search(rf'<tr id="{element_id}">(.*?)</tr>', body, re.S)
    assert match, element_id
    return match.group(1)


# --- the Work page ----------------------------------------------------------------------------


@pytest.mark.usefixtures("fake_clock")
def test_work_page_shows_each_attempt_with_its_lease_outcome_error_and_output(console):
    work = WorkFactory(status="running")
    failed = AttemptFactory(
        work=work,
        number=1,
        state="failed",
        binding="agent",
        executor="command",
        generation=3,
        lease_epoch=1,
        ended_at=T0 + timedelta(seconds=7),
        exit_status=2,
        error="exit status 2: ValueError: bad input",
        stdout_tail="reading input\nstep 3 of 4",
        stderr_tail="Traceback (most recent call last):\nValueError: bad input",
    )
    done = AttemptFactory(
        work=work, number=2, state="succeeded", lease_epoch=2, result={"summary": "ok", "n": 2}
    )
    running = AttemptFactory(
        work=work,
        number=3,
        lease_epoch=3,
        lease_until=T0 + timedelta(seconds=30),
        lease_owner="host-a:4242:ab12cd34",
        pid=5151,
    )
    body = page(console, work)

    first = row(body, f"attempt-{failed.pk}")
    assert "badge-failed" in first and "agent" in first and "(command)" in first and ">3<" in first
    assert "epoch 1" in first and "until" not in first  # an ended attempt's lease is over
    assert (
        '2026-01-05 12:00:00 UTC</time> – <time datetime="2026-01-05T12:00:07Z">2026-01-05 12:00:07 UTC</time>'
        in first
        and "exit status 2" in first
    )
    # The column holds the range, and says so: "Started" above "5 s ago – 12:00:07" read as two starts.
    assert "<th>Started – ended</th>" in section(body, "work-attempts")
    assert '<details class="attempt-error"><summary>error: exit status 2: ValueError: bad input' in first
    output = re.search(r'<details class="attempt-output">(.*?)</details>', first, re.S).group(1)
    assert "step 3 of 4" in output and "Traceback (most recent call last):" in output

    second = row(body, f"attempt-{done.pk}")
    assert "badge-succeeded" in second
    assert "result <code>{&quot;n&quot;: 2, &quot;summary&quot;: &quot;ok&quot;}</code>" in second

    third = row(body, f"attempt-{running.pk}")
    assert (
        "badge-running" in third
        and 'epoch 3, until <time datetime="2026-01-05T12:00:30Z">2026-01-05 12:00:30 UTC</time>' in third
    )
    assert "host-a:4242:ab12cd34 pid 5151" in third
    # Newest first.
    attempts = section(body, "work-attempts")
    assert [int(pk) for pk in re.findall(r'<tr id="attempt-(\d+)">', attempts)] == [
        running.pk,
        done.pk,
        failed.pk,
    ]


@pytest.mark.usefixtures("fake_clock")
def test_work_page_shows_waits_timers_intents_and_children(console):
    work = WorkFactory(status="waiting")
    attempt = AttemptFactory(work=work, number=1, state="waiting", lease_epoch=4)
    woke = EventFactory(type="approval.given")
    blocked_by = EventFactory(type="approval.again")
    old = WaitFactory(work=work, attempt=attempt, name="first", state="woken", woken_by=woke)
    wait = WaitFactory(
        work=work,
        attempt=attempt,
        name="approval",
        match={"type": "approval.*", "keys": ["pr:acme/web#1"]},
        timeout_at=T0 + timedelta(hours=1),
        blocked_reason="depth_exceeded",
        blocked_event=blocked_by,
    )
    fired = EventFactory(type="reminder.due")
    timer = TimerFactory(work=work, type="reminder.due", state="fired", fired_event=fired)
    pending_timer = TimerFactory(work=work, type="deadline", due_at=T0 + timedelta(days=1))
    injected = EventFactory(type="chat.message")
    intent = IntentFactory(attempt=attempt, event=injected, state="confirmed", confirmed_at=T0)
    child = WorkFactory(parent=work, status="ready", parked_at=T0)
    body = page(console, work)

    assert "woken" in row(body, f"wait-{old.pk}") and f"#{woke.seq}" in row(body, f"wait-{old.pk}")
    waiting = row(body, f"wait-{wait.pk}")
    assert "approval" in waiting and "badge-active" in waiting
    assert (
        "{&quot;keys&quot;: [&quot;pr:acme/web#1&quot;], &quot;type&quot;: &quot;approval.*&quot;}" in waiting
    )
    assert "2026-01-05 13:00:00 UTC" in waiting
    assert (
        "depth_exceeded" in waiting and f'href="{reverse("event-detail", args=[blocked_by.seq])}"' in waiting
    )

    assert f'href="{reverse("event-detail", args=[fired.seq])}"' in row(body, f"timer-{timer.pk}")
    assert "badge-pending" in row(body, f"timer-{pending_timer.pk}")
    assert "2026-01-06 12:00:00 UTC" in row(body, f"timer-{pending_timer.pk}")

    injected_row = row(body, f"intent-{intent.pk}")
    assert "inject" in injected_row and "badge-confirmed" in injected_row and "chat.message" in injected_row
    assert "1@4" in injected_row and "2026-01-05 12:00:00 UTC" in injected_row

    children = section(body, "work-children")
    assert f'href="{reverse("work-detail", args=[child.pk])}"' in children and "badge-parked" in children
    why = re.search(r'<dd id="work-why"[^>]*>(.*?)</dd>', body, re.S).group(1)
    assert "waiting on wait approval (blocked: depth_exceeded)" in why and f'href="#wait-{wait.pk}"' in why


@pytest.mark.usefixtures("fake_clock")
def test_r42_work_page_shows_the_scope_a_wait_also_waits_on(console):
    work = WorkFactory(status="waiting")
    plain = WaitFactory(work=work, name="own", state="timed_out")
    across = WaitFactory(work=work, name="build", match={"type": "ci.build.*"})
    DependencySubscriptionFactory(wait=across, scope="ci", match={"type": "ci.build.*"})
    body = page(console, work)
    assert 'data-subscribed="ci">also in scope ci' in row(body, f"wait-{across.pk}")
    assert "data-subscribed" not in row(body, f"wait-{plain.pk}")


@pytest.mark.usefixtures("fake_clock")
def test_work_page_says_why_the_work_is_not_running(console, clock):
    parked = WorkFactory(
        failures=5, parked_at=T0, pending_run=True, last_error="attempt 5 failed: exit status 1"
    )
    AttemptFactory(work=parked, number=5, state="failed")
    body = page(console, parked)
    assert (
        '<dd id="work-why" data-reason="parked">parked after 5 failures (attempt 5 failed: exit status 1)'
        in body
    )
    assert '<dt>status</dt><dd><span class="badge badge-parked"' in body
    assert "<dt>failures</dt><dd>5 in a row" in body

    backing_off = WorkFactory(
        failures=1,
        pending_run=True,
        retry_at=clock() + timedelta(seconds=2),
        last_error="attempt 1 failed: boom",
    )
    AttemptFactory(work=backing_off, number=1, state="failed")
    body = page(console, backing_off)
    assert (
        'data-reason="backing_off">backing off until 2026-01-05 12:00:02 UTC after 1 failure: attempt 1 failed: boom'
        in body
    )
    clock.advance(seconds=3)
    assert 'data-reason="claimable">ready to run (a retry' in page(console, backing_off)

    held = WorkFactory()
    event = EventFactory(work_id=held.pk)
    body = page(console, held)
    assert f"held by unrouted #{event.seq}" in body
    assert f'<a href="{reverse("event-detail", args=[event.seq])}">see #{event.seq}</a>' in body


@pytest.mark.usefixtures("fake_clock")
def test_engine_partial_answers_an_htmx_request_alone(console):
    work = WorkFactory()
    AttemptFactory(work=work, number=1, state="failed", error="only-in-the-engine")
    response = console.get(
        reverse("work-detail", args=[work.pk]), HTTP_HX_REQUEST="true", HTTP_HX_TARGET="work-engine"
    )
    body = response.content.decode()
    assert body.strip().startswith('<section id="work-engine">')
    assert "only-in-the-engine" in body and "work-summary" not in body and "<html" not in body
    assert "HX-Request" in response["Vary"]
    assert "work-engine" in work_views.LIVE_PARTIALS


@pytest.mark.usefixtures("fake_clock")
def test_engine_partial_query_count_is_independent_of_history(console, django_assert_max_num_queries):
    work = WorkFactory(status="waiting")

    def grow(n):
        for _ in range(n):
            attempt = AttemptFactory(work=work, state="failed", stdout_tail="x" * 100)
            event = EventFactory()
            WaitFactory(work=work, attempt=attempt, state="woken", woken_by=event)
            TimerFactory(work=work)
            IntentFactory(attempt=attempt, event=event, state="superseded")

    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            response = console.get(
                reverse("work-detail", args=[work.pk]), HTTP_HX_REQUEST="true", HTTP_HX_TARGET="work-engine"
            )
        assert response.status_code == 200
        return len(queries)

    grow(3)
    # Session and user (2), the permission check (the login's and its groups' permissions: 2),
    # the Work (1), attempts, waits, timers, intents (1 each).
    with django_assert_max_num_queries(9):
        small = count()
    grow(40)
    assert count() == small
    body = page(console, work)
    assert len(re.findall(r'<tr id="attempt-', body)) == 20 and "Older attempts are not shown." in body


# --- the Work list ------------------------------------------------------------------------------


@pytest.mark.usefixtures("fake_clock")
def test_work_list_shows_parked_and_backing_off_work_and_filters_parked(console, clock):
    parked = WorkFactory(parked_at=T0, failures=5, last_error="attempt 5 failed: boom")
    backing_off = WorkFactory(failures=2, retry_at=clock() + timedelta(seconds=8))
    retried = WorkFactory(failures=1, retry_at=clock() - timedelta(seconds=1))  # its backoff is over
    running = WorkFactory(status="running")

    body = console.get(reverse("work-list")).content.decode()
    assert '<span class="badge badge-parked" title="attempt 5 failed: boom">parked</span>' in row(
        body, f"work-{parked.pk}"
    )
    assert (
        'badge-backing_off">backing off</span> <span class="muted" title="">· next try <time'
        ' datetime="2026-01-05T12:00:08Z" data-ago data-countdown title="2026-01-05 12:00:08 UTC">in 8 s</time>'
        in row(body, f"work-{backing_off.pk}")
    )
    for quiet in (retried, running):
        assert "parked" not in row(body, f"work-{quiet.pk}") and "backing off" not in row(
            body, f"work-{quiet.pk}"
        )

    filtered = console.get(reverse("work-list"), {"status": "parked"}).content.decode()
    assert [int(pk) for pk in re.findall(r'<tr id="work-(\d+)">', filtered)] == [parked.pk]
    assert '<option value="parked" selected>parked</option>' in filtered


# --- home ---------------------------------------------------------------------------------------


@pytest.mark.usefixtures("fake_clock")
def test_home_counts_running_and_parked_work(console, django_assert_max_num_queries):
    WorkFactory.create_batch(3, status="running")
    WorkFactory.create_batch(2, parked_at=T0, failures=5)
    WorkFactory()
    # Session and user (2), the permission check (2), unrouted Events (1), Work by status and
    # parked (1), the live generation (1); and the heartbeat banner (2: the loops, the pauses in
    # force), doctor's checks (at most 15: live updates, and the pauses for the work loop's check
    # and for their own), dead letters (1), the trends (5) and the live-update outbox's position
    # (1): at most 28 in all, however many Work are parked.
    with django_assert_max_num_queries(28):
        body = console.get(reverse("console-home")).content.decode()
    card = section(body, "work-engine-summary")
    assert re.search(
        r'status=running"><span class="badge badge-running">running</span></a><span class="num">3<', card
    )
    assert re.search(
        r'status=parked"><span class="badge badge-parked">parked</span></a><span class="num">2<', card
    )
    WorkFactory.create_batch(20, parked_at=T0)
    with django_assert_max_num_queries(28):
        console.get(reverse("console-home"))


# Work states as people read them: backing off and parked replace "ready" on
# the Work list and the Work page, the status filter and the home card agree, and the input table
# says which attempts an input was presented to.


@pytest.fixture
def fake_clocks(clock, monkeypatch):
    monkeypatch.setattr(work_views, "clock", clock)
    monkeypatch.setattr(home_views, "clock", clock)


@pytest.fixture
def states(clock):
    return {
        "parked": WorkFactory(parked_at=T0, failures=5, last_error="attempt 5 failed: boom"),
        "backing_off": WorkFactory(failures=2, retry_at=clock() + timedelta(seconds=4)),
        "ready": WorkFactory(failures=1, retry_at=clock() - timedelta(seconds=1)),  # backoff over
        "fresh": WorkFactory(),
        "running": WorkFactory(status="running"),
    }


@pytest.mark.usefixtures("fake_clock")
@pytest.mark.usefixtures("fake_clocks")
def test_work_list_shows_backing_off_with_a_countdown_and_parked_not_ready(console, states):
    body = console.get(reverse("work-list")).content.decode()
    backing = row(body, f"work-{states['backing_off'].pk}")
    assert 'badge-backing_off">backing off</span>' in backing
    assert (
        '· next try <time datetime="2026-01-05T12:00:04Z" data-ago data-countdown title="2026-01-05 12:00:04 UTC">in 4 s</time>'
        in backing
    )
    assert "badge-ready" not in backing
    parked = row(body, f"work-{states['parked'].pk}")
    assert 'badge-parked" title="attempt 5 failed: boom">parked</span>' in parked
    assert "badge-ready" not in parked and ">ready<" not in parked
    assert 'badge-ready">ready</span>' in row(body, f"work-{states['ready'].pk}")


@pytest.mark.usefixtures("fake_clock")
@pytest.mark.usefixtures("fake_clocks")
def test_status_ready_excludes_parked_and_backing_off_with_filters_for_them(console, states, clock):
    def listed(status: str) -> set[int]:
        body = console.get(reverse("work-list"), {"status": status}).content.decode()
        return {int(pk) for pk in re.findall(r'<tr id="work-(\d+)">', body)}

    assert listed("ready") == {states["ready"].pk, states["fresh"].pk}
    assert listed("parked") == {states["parked"].pk}
    assert listed("backing_off") == {states["backing_off"].pk}
    assert {w.pk for w in work_filtered(WorkFilter(status="ready"), now=clock())} == listed("ready")
    # Once the backoff is over, the Work is ready again.
    assert {w.pk for w in work_filtered(WorkFilter(status="ready"), now=clock() + timedelta(seconds=5))} == {
        states["ready"].pk,
        states["fresh"].pk,
        states["backing_off"].pk,
    }


@pytest.mark.usefixtures("fake_clock")
@pytest.mark.usefixtures("fake_clocks")
def test_home_card_counts_parked_and_backing_off_apart_from_ready(
    console, states, clock, django_assert_max_num_queries
):
    counts = work_counts(now=clock())
    assert (counts.by_status["ready"], counts.parked, counts.backing_off) == (2, 1, 1)
    with django_assert_max_num_queries(28):
        body = console.get(reverse("console-home")).content.decode()
    for state, label, n in (
        ("ready", "ready", 2),
        ("parked", "parked", 1),
        ("backing_off", "backing off", 1),
    ):
        assert re.search(
            rf'status={state}"><span class="badge badge-{state}">{label}</span></a><span class="num">{n}<',
            body,
        ), state


@pytest.mark.usefixtures("fake_clock")
@pytest.mark.usefixtures("fake_clocks")
def test_input_table_says_which_attempts_an_input_was_presented_to(
    console, clock, django_assert_max_num_queries
):
    work = WorkFactory(failures=3, retry_at=clock() + timedelta(seconds=4))
    first = AttemptFactory(work=work, number=1, state="failed")
    for number in range(2, 15):
        AttemptFactory(work=work, number=number, state="failed")
    retried = WorkInputFactory(work=work, state="consumed", attempt=first)
    done = WorkFactory()
    ok = AttemptFactory(work=done, number=1, state="failed")
    AttemptFactory(work=done, number=2, state="succeeded")
    AttemptFactory(work=done, number=3, state="failed")
    early = WorkInputFactory(work=done, state="consumed", attempt=ok)

    body = console.get(reverse("work-detail", args=[work.pk])).content.decode()
    assert '<th class="hide-narrow">Presented to</th>' in body
    assert "attempts 1–14" in row(body, f"input-{retried.seq}")
    body = console.get(reverse("work-detail", args=[done.pk])).content.decode()
    # Presented to 1 (failed) and again to 2, which succeeded: never to 3.
    assert "attempts 1–2" in row(body, f"input-{early.seq}")


# --- the Work list and page (D4) ------------------------------------------------------------------


def test_d4_work_list_filters_by_scope_and_status_and_pages(signed_in):
    ready = WorkFactory.create_batch(55, scope="acme", status="ready")
    done = WorkFactory(scope="acme", status="completed")
    WorkFactory(scope="other", status="ready")

    def ids(**params):
        response = signed_in.get(reverse("work-list"), params)
        assert response.status_code == 200
        return [int(s) for s in re.findall(r'<tr id="work-(\d+)">', text(response))], text(response)

    assert ids(status="completed")[0] == [done.pk]
    first, body = ids(scope="acme", status="ready")
    assert first == [w.pk for w in reversed(ready)][:50]
    second, _ = ids(scope="acme", status="ready", before=first[-1])
    assert second == [w.pk for w in reversed(ready)][50:]
    assert signed_in.get(reverse("work-list"), {"status": "sleeping"}).status_code == 400
    partial = signed_in.get(reverse("work-list"), {"status": "completed"}, **htmx("work-list"))
    # The list with its live connection (the filter's), holding the rows live updates swap.
    assert (
        text(partial)
        .strip()
        .startswith(
            '<section id="work-list" aria-live="polite" hx-ext="ws" ws-connect="/ws/work/?status=completed&amp;outbox='
        )
    )
    assert '<div id="work-rows">' in text(partial)


def test_d4_work_page_shows_links_keys_attempts_input_in_acceptance_order_and_history(signed_in):
    parent = WorkFactory()
    predecessor = WorkFactory(status="completed")
    work = WorkFactory(parent=parent, predecessor=predecessor, status="running", scope="acme")
    successor = WorkFactory(predecessor=work)
    CorrelationKeyFactory(work=work, key="pr:acme/web#42")
    AttemptFactory(work=work, number=1, state="failed")
    AttemptFactory(work=work, number=2, state="running")
    first, second, third = (EventFactory(scope="acme", route_state="routed") for _ in range(3))
    # Input rows written out of acceptance order still read in acceptance order.
    for event in (third, first, second):
        WorkInputFactory(work=work, event=event)
    RouteRecordFactory(event=first, work=work, policy="start", reason="matched")
    RouteRecordFactory(event=second, work=work, policy="queue", reason="matched")
    failed = EventFactory(scope="acme", route_state="failed")
    RouteRecordFactory(event=failed, work=work, policy="failed", reason="handler_panic", disposition="failed")
    held = EventFactory(
        scope="acme", correlation=["pr:acme/web#42"], unrouted_reason="retrying: handler_failed"
    )

    response = signed_in.get(reverse("work-detail", args=[work.pk]))
    body = text(response)
    assert response.status_code == 200
    for linked in (parent, predecessor, successor):
        assert f'href="{reverse("work-detail", args=[linked.pk])}"' in body
    assert "pr:acme/web#42" in body
    assert '<tr id="attempt-' in body and "badge-failed" in body
    inputs = re.search(r'<section id="work-input">(.*?)</section>', body, re.S).group(1)
    assert [int(s) for s in re.findall(r'<tr id="input-(\d+)">', inputs)] == [
        first.seq,
        second.seq,
        third.seq,
    ]
    history = re.search(r'<section id="work-history">(.*?)</section>', body, re.S).group(1)
    assert [int(s) for s in re.findall(r'<tr id="history-(\d+)">', history)] == [
        failed.seq,
        second.seq,
        first.seq,
    ]
    assert "handler_panic" in history
    unrouted = re.search(r'<section id="work-unrouted">(.*?)</section>', body, re.S).group(1)
    assert f'<tr id="unrouted-{held.seq}">' in unrouted and "retrying: handler_failed" in unrouted
    # Every Event row carries the (empty, for now) event-controls cell.
    assert body.count('<td class="event-controls">') == 3 + 3 + 1
    assert f'ws-connect="/ws/work/{work.pk}/?outbox=' in body


def test_d4_work_history_htmx_request_gets_only_the_partial(signed_in):
    work = WorkFactory()
    RouteRecordFactory(work=work, reason="only-in-history")
    response = signed_in.get(reverse("work-detail", args=[work.pk]), **htmx("work-history"))
    body = text(response)
    assert body.strip().startswith('<section id="work-history">')
    assert "only-in-history" in body
    assert "work-summary" not in body and "<html" not in body
    assert "HX-Request" in response["Vary"]


def test_d4_work_page_pages_its_input_and_history(signed_in):
    work = WorkFactory()
    inputs = WorkInputFactory.create_batch(55, work=work)
    for item in inputs:
        RouteRecordFactory(event=item.event, work=work)
    body = text(signed_in.get(reverse("work-detail", args=[work.pk])))
    shown = [int(s) for s in re.findall(r'<tr id="input-(\d+)">', body)]
    assert shown == [i.seq for i in inputs][:50]
    assert f"?input_after={shown[-1]}" in body
    later = text(signed_in.get(reverse("work-detail", args=[work.pk]), {"input_after": shown[-1]}))
    assert [int(s) for s in re.findall(r'<tr id="input-(\d+)">', later)] == [i.seq for i in inputs][50:]
    # A paged Work page stays live on its page.
    assert f'ws-connect="/ws/work/{work.pk}/?input_after={shown[-1]}&amp;outbox=' in later
    older = text(signed_in.get(reverse("work-detail", args=[work.pk]), {"history_before": inputs[5].seq}))
    assert [int(s) for s in re.findall(r'<tr id="history-(\d+)">', older)] == [i.seq for i in inputs][:5][
        ::-1
    ]
    bad = signed_in.get(reverse("work-detail", args=[work.pk]), {"history_before": "-3"})
    assert bad.status_code == 400 and "history_before" in text(bad)


def test_d4_work_page_query_count_is_independent_of_history(signed_in, django_assert_max_num_queries):
    work = WorkFactory(parent=WorkFactory(), predecessor=WorkFactory(status="completed"))
    key = CorrelationKeyFactory(work=work)

    def grow(n):
        for item in WorkInputFactory.create_batch(n, work=work):
            RouteRecordFactory(event=item.event, work=work)
            attempt = AttemptFactory(work=work, state="failed")
            WaitFactory(work=work, attempt=attempt, state="woken", woken_by=item.event)
            TimerFactory(work=work, state="fired", fired_event=item.event)
            IntentFactory(attempt=attempt, event=item.event, state="superseded")
            WorkFactory(parent=work)
        EventFactory.create_batch(n, correlation=[key.key], scope=work.scope)

    grow(5)
    # 9, and 2 for the user's permissions (read once: which skip/reroute controls to show), and
    # 5 for the engine: why the Work is not running (1; 2 with nothing to
    # run), its children (1), its waits, timers and intents (1 each; attempts were read already),
    # and the totals of its input and its history (2, capped); the heartbeat banner (2: the
    # loops, the pauses in force); the live updates' outbox position the page renders at (1).
    with django_assert_max_num_queries(21):
        small = count_queries(signed_in, reverse("work-detail", args=[work.pk]))
    grow(55)
    with django_assert_max_num_queries(21):
        large = count_queries(signed_in, reverse("work-detail", args=[work.pk]))
    assert small == large


# --- totals, paging both ways and the CLI's own filters -------------------------------------------


@pytest.mark.usefixtures("routing_handlers")
@pytest.mark.django_db
def test_work_list_filters_by_binding_status_parked_and_key(operator_console):
    agent = WorkFactory(scope="acme", binding="agent")
    WorkFactory(scope="acme", binding="shell")
    parked = WorkFactory(scope="acme", binding="agent", status="ready", parked_at=CAP_T0)
    CorrelationKeyFactory(work=agent, scope="acme", key="pr:acme/web#42")

    def listed(**params) -> list[int]:
        response = operator_console.get(reverse("work-list"), params)
        assert response.status_code == 200, text(response)
        shown = row_seqs(text(response), "work")
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
    body = text(operator_console.get(reverse("work-list")))
    assert 'name="binding"' in body and 'name="key"' in body


@pytest.mark.usefixtures("routing_handlers")
@pytest.mark.django_db
def test_work_list_shows_its_total_and_jumps_to_the_oldest(operator_console):
    works = WorkFactory.create_batch(55, scope="acme")
    body = text(operator_console.get(reverse("work-list"), {"scope": "acme"}))
    assert "55 Work</span>" in body and row_seqs(body, "work") == [w.pk for w in works][::-1][:50]
    oldest = text(operator_console.get(reverse("work-list"), {"scope": "acme", "oldest": "1"}))
    assert row_seqs(oldest, "work") == [w.pk for w in works][:50]
    later = text(
        operator_console.get(reverse("work-list"), {"scope": "acme", "oldest": "1", "after": works[49].pk})
    )
    assert row_seqs(later, "work") == [w.pk for w in works][50:]


@pytest.mark.usefixtures("routing_handlers")
@pytest.mark.django_db
def test_work_page_input_reads_newest_first_with_its_total_and_stays_live_paged(operator_console):
    work = WorkFactory()
    inputs = [item.seq for item in WorkInputFactory.create_batch(60, work=work)]
    url = reverse("work-detail", args=[work.pk])
    first = text(operator_console.get(url))
    assert "60 inputs, in acceptance order" in first
    assert row_seqs(first, "input") == inputs[:50]
    assert f'<a href="{url}?input_order=newest">Show newest first</a>' in first

    newest = text(operator_console.get(url, {"input_order": "newest"}))
    assert row_seqs(newest, "input") == inputs[::-1][:50]
    assert "60 inputs, newest first" in newest
    next_url = f"{url}?input_order=newest&amp;input_before={inputs[10]}"
    assert f'<a href="{next_url}" rel="next">Earlier input →</a>' in newest
    earlier = text(operator_console.get(url, {"input_order": "newest", "input_before": inputs[10]}))
    assert row_seqs(earlier, "input") == inputs[:10][::-1]
    assert (
        f'ws-connect="/ws/work/{work.pk}/?input_order=newest&amp;input_before={inputs[10]}&amp;outbox='
        in earlier
    )
    mixed = operator_console.get(url, {"input_order": "newest", "input_after": inputs[3]})
    assert mixed.status_code == 400 and "input_after" in text(mixed)


@pytest.mark.usefixtures("routing_handlers")
@pytest.mark.django_db
def test_the_work_page_history_links_a_rerouted_event_to_its_copy(operator_console, clock):
    apply(clock)
    r = router(clock)
    try:
        work_id, stuck, _later = holding_work(clock, r)
    finally:
        r.close()
    controls.event_skip(seq=stuck.seq, user="alice", clock=clock)  # recorded on the Work it holds
    url = reverse("work-detail", args=[work_id])
    before = part(text(operator_console.get(url)), "tr", f"history-{stuck.seq}")
    assert f'hx-post="{reverse("event-reroute", args=[stuck.seq])}"' in before
    copy_seq = controls.event_reroute(seq=stuck.seq, user="alice", clock=clock).copy_seq
    after = part(text(operator_console.get(url)), "tr", f"history-{stuck.seq}")
    assert f'hx-post="{reverse("event-reroute", args=[stuck.seq])}"' not in after
    assert f'rerouted as <a href="{reverse("event-detail", args=[copy_seq])}">#{copy_seq}</a>' in after


# --- routes in the Work page's history (R29) ------------------------------------------------------


def route_section(body: str, name: str) -> str:
    match = re.search(rf'<section id="{name}"[^>]*>(.*?)</section>', body, re.S)
    assert match, f"no section {name}"
    return match.group(1)


@pytest.mark.usefixtures("routing_handlers")
def test_r29_work_page_history_shows_refusals_errors_and_unrouted_failures(console, clock):
    apply(clock)
    started = pr(clock)
    route_all(clock)
    work_id = RouteRecord.objects.get(event=started).work_id
    # An Event naming the Work that no route selects is on the Work's history as unmatched,
    # with its refusals; a failing one holds the Work.
    addressed = accept(clock, "other.thing", {}, work_id=work_id)
    failing = accept(clock, "x.fail", {"behaviour": "fail"}, work_id=work_id)
    route_all(clock)
    body = console.get(reverse("work-detail", args=[work_id])).content.decode()
    history = route_section(body, "work-history")
    assert f'<tr id="history-{addressed.seq}">' in history
    assert "<strong>scripted</strong>: type other.thing does not start with x" in history
    unrouted = route_section(body, "work-unrouted")
    assert f'<tr id="unrouted-{failing.seq}">' in unrouted
    assert "1 failure (handler_failed)" in unrouted
    assert 'next retry <time datetime="2026-01-05T12:00:02Z">2026-01-05 12:00:02 UTC</time>' in unrouted


@pytest.mark.usefixtures("routing_handlers")
def test_r16_r29_work_page_history_shows_a_failed_route_error(console, clock):
    apply(clock)
    started = pr(clock)
    route_all(clock)
    work_id = RouteRecord.objects.get(event=started).work_id
    failed = accept(clock, "x.bad", {"behaviour": "invalid"}, work_id=work_id)
    route_all(clock)
    assert RouteRecord.objects.get(event=failed).work_id == work_id
    history = route_section(
        console.get(reverse("work-detail", args=[work_id])).content.decode(), "work-history"
    )
    assert f'<tr id="history-{failed.seq}">' in history
    assert "error: route scripted: payload has no author" in history
    assert "(1 attempt)" in history


@pytest.mark.usefixtures("routing_handlers")
def test_r29_work_and_event_page_query_counts_do_not_grow(console, clock):
    apply(clock)
    started = pr(clock)
    route_all(clock)
    work_id = RouteRecord.objects.get(event=started).work_id

    def grow(n: int) -> None:
        """``n`` unmatched and ``n`` failed records on the Work, then two Events failing (for
        now) that hold it; the ones an earlier call left failing route first."""
        sample_handlers.BROKEN.clear()
        clock.advance(seconds=10)
        for _ in range(n):
            accept(clock, "other.thing", {}, work_id=work_id)
            accept(clock, "x.bad", {"behaviour": "invalid"}, work_id=work_id)
        for i in range(2):
            ident = f"broken-{n}-{i}"
            sample_handlers.BROKEN.add(ident)
            accept(clock, "x.ok", {}, work_id=work_id, id=ident)
        route_all(clock)

    def pages() -> list[int]:
        last = Event.objects.order_by("-seq").first()
        assert not last.is_settled
        counts = []
        for url in (reverse("work-detail", args=[work_id]), reverse("event-detail", args=[last.seq])):
            with CaptureQueriesContext(connection) as queries:
                assert console.get(url).status_code == 200
            counts.append(len(queries))
        return counts

    grow(2)
    small = pages()
    grow(30)
    assert pages() == small
    body = console.get(reverse("work-detail", args=[work_id])).content.decode()
    history = route_section(body, "work-history")
    assert len(re.findall(r'<tr id="history-', history)) == 50 and 'rel="next"' in history
    assert len(re.findall(r'<tr id="unrouted-', route_section(body, "work-unrouted"))) == 2
