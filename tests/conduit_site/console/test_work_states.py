"""Work states as people read them: backing off and parked replace "ready" on
the Work list and the Work page, the status filter and the home card agree, and the input table
says which attempts an input was presented to."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse

from conduit_site.console.views import home as home_views
from conduit_site.console.views import work as work_views
from tests.routing.factories import UserFactory
from tests.worklife.factories import T0, AttemptFactory, WorkFactory, WorkInputFactory
from worklife.selectors import WorkFilter, work_counts, work_filtered

pytestmark = pytest.mark.django_db


@pytest.fixture
def console(client):
    client.force_login(UserFactory(username="operator"))
    return client


@pytest.fixture(autouse=True)
def fake_clock(clock, monkeypatch):
    monkeypatch.setattr(work_views, "clock", clock)
    monkeypatch.setattr(home_views, "clock", clock)


def row(body: str, element_id: str) -> str:
    match = re.search(rf'<tr id="{element_id}">(.*?)</tr>', body, re.S)
    assert match, element_id
    return match.group(1)


@pytest.fixture
def states(clock):
    return {
        "parked": WorkFactory(parked_at=T0, failures=5, last_error="attempt 5 failed: boom"),
        "backing_off": WorkFactory(failures=2, retry_at=clock() + timedelta(seconds=4)),
        "ready": WorkFactory(failures=1, retry_at=clock() - timedelta(seconds=1)),  # backoff over
        "fresh": WorkFactory(),
        "running": WorkFactory(status="running"),
    }


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


def test_home_card_counts_parked_and_backing_off_apart_from_ready(
    console, states, clock, django_assert_max_num_queries
):
    counts = work_counts(now=clock())
    assert (counts.by_status["ready"], counts.parked, counts.backing_off) == (2, 1, 1)
    with django_assert_max_num_queries(23):
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
