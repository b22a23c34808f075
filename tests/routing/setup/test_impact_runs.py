"""The impact preview runs in the background (its progress written as it
goes), rolls its changes up by effect and route, and shows them 50 a page; a run outlives its
candidate, and a run whose process ended is seen as lost."""

from __future__ import annotations

from datetime import timedelta

import factory
import pytest
from django.db import connections
from django.db.models.sql import UpdateQuery
from django.db.models.sql.constants import NO_RESULTS
from django.urls import reverse

from causal.models import Event
from conduit_site.console.views import impact as impact_views
from routing.models import ImpactRun, ImpactRunChange
from routing.setup import impact_runs
from routing.setup.candidates import candidate_apply, candidate_discard
from routing.setup.impact import ImpactInvalid, impact_preview
from tests.causal.factories import EventFactory
from tests.routing.factories import (
    CHANGED,
    ImpactRunChangeFactory,
    ImpactRunFactory,
    apply_config,
    user_with_role,
)

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "candidate-impact"}
# In turn: unmatched live and started by the candidate, dropped live and unmatched by it, and
# unmatched by both (no change).
KINDS = ("alert.fired", "x.ping", "issue.opened")


def events(n: int) -> None:
    Event.objects.bulk_create(
        [
            EventFactory.build(type=KINDS[i % 3], source="mon", data={"id": i}, route_state="routed")
            for i in range(n)
        ],
        batch_size=500,
    )


@pytest.fixture
def candidate():
    apply_config()
    return apply_config(CHANGED, candidate=True)


@pytest.fixture
def admin(client):
    client.force_login(user_with_role("admin", username="ada"))
    return client


def test_impact_progress_is_told_as_the_preview_goes(clock, candidate):
    events(120)
    told: list[tuple[int, int]] = []
    report = impact_preview(
        candidate=candidate, clock=clock, events=120, progress=lambda d, t: told.append((d, t))
    )
    assert told == [(n, 120) for n in range(121)]
    assert report.changed == 80


@pytest.mark.django_db(transaction=True)
def test_impact_progress_rollup_and_pages_of_a_run(clock, candidate, monkeypatch):
    monkeypatch.setattr(impact_runs, "PROGRESS_SECONDS", 0)
    events(300)
    run, created = impact_runs.impact_run_start(candidate=candidate, clock=clock, events=300, by="ada")
    assert created
    assert (run.status, run.traced, run.candidate_number, run.live) == ("running", 0, candidate.pk, "1")
    writer = impact_runs.ProgressWriter(run.pk, clock)
    reader = connections.create_connection("default")
    seen: list[tuple[int, int]] = []

    def progress(done: int, total: int) -> None:
        writer(done, total)
        # Committed at once: another connection reads it while the preview still runs.
        with reader.cursor() as cursor:
            cursor.execute("SELECT traced, total FROM routing_impactrun WHERE id = %s", [run.pk])
            seen.append(cursor.fetchone())

    try:
        run = impact_runs.impact_run_execute(run_id=run.pk, clock=clock, progress=progress)
    finally:
        writer.close()
        reader.close()

    assert seen == [(n, 300) for n in range(301)]
    run.refresh_from_db()
    assert (run.status, run.examined, run.changed, run.compared, run.total) == ("done", 300, 200, 300, 300)
    assert run.rollup == [
        {"group": "drop → unmatched", "effect": "unmatched", "route": "noise", "count": 100},
        {"group": "unmatched → start", "effect": "start", "route": "alerts", "count": 100},
    ]
    assert impact_runs.impact_run_summary(run) == "start 100 Work, leave 100 unmatched"
    assert impact_runs.impact_run_pages(run) == 4
    page = impact_runs.impact_run_page(run, 4)
    assert len(page) == 50 and [c.position for c in page] == list(range(150, 200))
    newest = Event.objects.order_by("-seq").first().seq
    seqs = impact_runs.impact_run_seqs(run.pk, group="unmatched → start", route="alerts")
    assert len(seqs) == 100 and seqs[0] == newest - 2  # newest first, as the preview lists them
    stored = ImpactRunChange.objects.get(run=run, seq=seqs[0])
    assert stored.candidate["result"]["route"] == "alerts" and "event" not in stored.candidate["result"]


def test_impact_progress_a_run_outlives_its_candidate_and_a_stale_one_is_lost(clock, candidate):
    events(30)
    run, _ = impact_runs.impact_run_start(candidate=candidate, clock=clock, events=30, by="ada")
    assert not impact_runs.impact_run_lost(run, now=clock())
    assert impact_runs.impact_run_lost(run, now=clock() + timedelta(seconds=61))
    candidate_apply(candidate_id=candidate.pk, clock=clock, applied_by="ada")
    run = impact_runs.impact_run_execute(run_id=run.pk, clock=clock)
    assert (run.status, run.candidate_id, run.candidate_number) == ("failed", None, candidate.pk)
    assert "applied or discarded" in run.error
    with pytest.raises(ImpactInvalid):
        impact_runs.impact_run_start(candidate=apply_config(), clock=clock, events=10, by="ada")


def test_impact_progress_starting_answers_the_progress_with_the_button_disabled(
    admin, candidate, monkeypatch
):
    launched: list[int] = []
    monkeypatch.setattr(impact_views, "launch", lambda run_id, clock: launched.append(run_id))
    events(10)

    response = admin.post(reverse("candidate-impact", args=[candidate.pk]), {"events": "10"}, **HTMX)

    body = response.content.decode()
    run = ImpactRun.objects.get()
    assert launched == [run.pk]
    assert body.lstrip().startswith(
        f'<section id="candidate-impact" data-swap-statuses="400 429" hx-get="/config/impact/{run.pk}/" '
        'hx-trigger="every 1s"'
    )
    assert 'id="impact-start" disabled aria-disabled="true">Preview running…</button>' in body
    assert "Events traced <strong>0</strong> of 0" in body
    poll = admin.get(reverse("impact-run", args=[run.pk]), **HTMX).content.decode()
    assert poll.lstrip().startswith('<section id="candidate-impact"') and 'hx-trigger="every 1s"' in poll
    # Without JavaScript: back to the candidate page, which shows the run.
    again = admin.post(reverse("candidate-impact", args=[candidate.pk]), {"events": "10"})
    assert again.status_code == 302 and again["Location"].endswith("#candidate-impact")
    assert ImpactRun.objects.count() == 1 and launched == [run.pk]  # one run at a time
    assert "Events traced" in admin.get(again["Location"]).content.decode()


def test_impact_progress_pages_weigh_and_cost_the_same_whatever_the_run(
    admin, candidate, django_assert_max_num_queries
):
    run = ImpactRunFactory(
        candidate=candidate,
        changed=5000,
        examined=10000,
        rollup=[{"group": "unmatched → start", "effect": "start", "route": "alerts", "count": 5000}],
    )
    # Positions 0 to 4,999, as a run writes them (the factory's sequence runs on across tests).
    ImpactRunChangeFactory.create_batch(5000, run=run, position=factory.Iterator(range(5000)))
    url = reverse("impact-run", args=[run.pk])

    for page in (1, 57, 100):
        with django_assert_max_num_queries(10):
            response = admin.get(url, {"page": page})
        body = response.content.decode()
        assert response.status_code == 200 and len(response.content) < 500_000
        assert body.count('class="impact-change"') == 50 and f"page {page} of 100" in body
        assert 'hx-trigger="every 1s"' not in body  # done: no more polling
    assert "would start 5,000 Work" in body and "after Apply" in body and "Replay these" not in body
    assert 'id="impact-start">Preview impact</button>' in body
    assert admin.get(url, {"page": "x"}).status_code == 200
    assert admin.get(reverse("impact-run", args=[run.pk + 1])).status_code == 404


def test_impact_progress_one_run_of_a_candidate_at_a_time(clock, candidate):
    events(10)
    first, created = impact_runs.impact_run_start(candidate=candidate, clock=clock, events=10, by="ada")
    same, again = impact_runs.impact_run_start(candidate=candidate, clock=clock, events=10, by="bob")
    assert created and not again and same.pk == first.pk
    impact_runs.impact_run_execute(run_id=first.pk, clock=clock)
    second, created = impact_runs.impact_run_start(candidate=candidate, clock=clock, events=10, by="ada")
    assert created and second.pk != first.pk
    assert list(ImpactRun.objects.values_list("pk", flat=True)) == [second.pk]  # the finished one gave way
    clock.advance(61)  # lost with its process: a new run may start
    third, created = impact_runs.impact_run_start(candidate=candidate, clock=clock, events=10, by="ada")
    assert created and third.pk != second.pk


def test_impact_progress_runs_are_linked_from_the_configuration_page_after_apply(admin, clock, candidate):
    run = ImpactRunFactory(candidate=candidate, changed=212)
    candidate_apply(candidate_id=candidate.pk, clock=clock, applied_by="ada")
    page = admin.get(reverse("config-list")).content.decode()
    assert f'<a href="/config/impact/{run.pk}/">{run.pk}</a>' in page and "212 changed" in page
    run_page = admin.get(reverse("impact-run", args=[run.pk])).content.decode()
    assert "The candidate was applied since, as generation 2: its groups can be replayed." in run_page
    assert 'id="impact-start"' not in run_page


def test_impact_groups_are_offered_for_replay_only_once_their_candidate_is_applied(admin, clock, candidate):
    rollup = [{"group": "unmatched → start", "effect": "start", "route": "alerts", "count": 3}]
    run = ImpactRunFactory(candidate=candidate, changed=3, rollup=rollup)
    url = reverse("impact-run", args=[run.pk])
    before = admin.get(url).content.decode()
    assert "impact-replay" not in before and "after Apply" in before

    candidate_apply(candidate_id=candidate.pk, clock=clock, applied_by="ada")
    after = admin.get(url).content.decode()
    assert 'class="inline-form impact-replay"' in after and "Replay these 3" in after

    discarded = apply_config(CHANGED, candidate=True)
    other = ImpactRunFactory(candidate=discarded, changed=3, rollup=rollup)
    candidate_discard(candidate_id=discarded.pk)
    gone = admin.get(reverse("impact-run", args=[other.pk])).content.decode()
    assert "impact-replay" not in gone and "not applied" in gone and "discarded since" in gone


def test_impact_progress_a_group_of_one_is_replayed_as_this_event(admin, clock, candidate):
    run = ImpactRunFactory(
        candidate=candidate,
        changed=1,
        examined=10,
        rollup=[{"group": "unmatched → start", "effect": "start", "route": "issues", "count": 1}],
    )
    ImpactRunChangeFactory(run=run)
    candidate_apply(candidate_id=candidate.pk, clock=clock, applied_by="ada")
    body = admin.get(reverse("impact-run", args=[run.pk])).content.decode()
    assert "Replay this Event</button>" in body and "Replay these 1<" not in body


# --- stopping a run nobody waits for ------------------------------------------------------------


class Poller:
    """Polls a run from a connection of its own, as a web request would while the run traces."""

    def __init__(self, run_id: int) -> None:
        self.run_id = run_id
        self.connection = connections.create_connection("default")

    def __call__(self, when) -> None:
        query = ImpactRun.objects.filter(pk=self.run_id).query.chain(UpdateQuery)
        query.add_update_values({"waited_at": when})
        query.get_compiler(connection=self.connection).execute_sql(NO_RESULTS)

    def close(self) -> None:
        self.connection.close()


def traced_with_a_second_a_chunk(run, clock, *, poll_every: int = 0) -> list[int]:
    """Trace ``run`` with its progress written at each Event, a second apart on the run's clock,
    polled every ``poll_every`` Events (0: never); the progress told, in order."""
    told: list[int] = []
    written = {"n": 0}

    def writer_clock():
        return clock() + timedelta(seconds=written["n"])

    writer = impact_runs.ProgressWriter(run.pk, writer_clock)
    poller = Poller(run.pk)

    def progress(done: int, total: int) -> None:
        told.append(done)
        written["n"] += 1
        if poll_every and done % poll_every == 0:
            poller(writer_clock())
        writer(done, total)

    try:
        impact_runs.impact_run_execute(run_id=run.pk, clock=clock, progress=progress)
    finally:
        writer.close()
        poller.close()
    return told


@pytest.mark.django_db(transaction=True)
def test_a_run_nobody_polls_stops_between_chunks_and_stores_nothing(clock, candidate, monkeypatch, settings):
    monkeypatch.setattr(impact_runs, "PROGRESS_SECONDS", 0)
    settings.CONDUIT_IMPACT_ABANDON_SECONDS = 30
    events(300)
    run, _ = impact_runs.impact_run_start(candidate=candidate, clock=clock, events=300, by="ada")

    with pytest.raises(impact_runs.ImpactCancelled):
        traced_with_a_second_a_chunk(run, clock)

    run.refresh_from_db()
    # Event 29's chunk, 30 s after the run was last waited for, was written; the next, 31 s
    # after, found nobody waiting and stopped the tracing there (its thread then marks the run
    # cancelled: test_a_background_run_cancelled_or_abandoned_stops_in_its_thread).
    assert (run.status, run.traced, run.total) == ("running", 29, 300)
    assert not ImpactRunChange.objects.exists() and run.changed == 0


@pytest.mark.django_db(transaction=True)
def test_a_run_polled_while_it_traces_runs_to_its_end(clock, candidate, monkeypatch, settings):
    monkeypatch.setattr(impact_runs, "PROGRESS_SECONDS", 0)
    settings.CONDUIT_IMPACT_ABANDON_SECONDS = 30
    events(300)
    run, _ = impact_runs.impact_run_start(candidate=candidate, clock=clock, events=300, by="ada")

    told = traced_with_a_second_a_chunk(run, clock, poll_every=20)

    run.refresh_from_db()
    assert told == list(range(301))
    assert (run.status, run.traced, run.changed) == ("done", 300, 200)


@pytest.mark.django_db(transaction=True)
def test_a_background_run_cancelled_or_abandoned_stops_in_its_thread(clock, candidate, settings):
    settings.CONDUIT_IMPACT_ABANDON_SECONDS = 30
    events(60)
    cancelled, _ = impact_runs.impact_run_start(candidate=candidate, clock=clock, events=60, by="ada")
    assert impact_runs.impact_run_cancel(cancelled.pk, clock=clock, by="bob")
    impact_runs.impact_run_launch(cancelled.pk, clock).join(timeout=60)
    cancelled.refresh_from_db()
    assert (cancelled.status, cancelled.error, cancelled.traced) == ("cancelled", "cancelled by bob", 0)

    other = apply_config(CHANGED, candidate=True)
    abandoned, _ = impact_runs.impact_run_start(candidate=other, clock=clock, events=60, by="ada")
    clock.advance(31)  # nobody polled it since it started
    impact_runs.impact_run_launch(abandoned.pk, clock).join(timeout=60)
    abandoned.refresh_from_db()
    assert (abandoned.status, abandoned.traced) == ("cancelled", 0)
    assert abandoned.error == "stopped: nobody waited for it any more"
    assert not ImpactRunChange.objects.exists()


def test_a_login_past_its_quota_of_running_runs_is_refused_and_nothing_is_stored(clock, settings):
    settings.CONDUIT_IMPACT_JOBS_PER_LOGIN = 1
    settings.CONDUIT_IMPACT_JOBS_TOTAL = 2
    apply_config()
    first, second, third = (apply_config(CHANGED, candidate=True) for _ in range(3))
    impact_runs.impact_run_start(candidate=first, clock=clock, events=10, by="ada")

    with pytest.raises(impact_runs.ImpactBusy) as busy:
        impact_runs.impact_run_start(candidate=second, clock=clock, events=10, by="ada")
    assert busy.value.retry_after == impact_runs.RETRY_AFTER_SECONDS
    impact_runs.impact_run_start(candidate=second, clock=clock, events=10, by="bob")
    with pytest.raises(impact_runs.ImpactBusy, match="on this site"):
        impact_runs.impact_run_start(candidate=third, clock=clock, events=10, by="cy")
    assert ImpactRun.objects.count() == 2
    clock.advance(61)  # runs lost with their process no longer count
    impact_runs.impact_run_start(candidate=third, clock=clock, events=10, by="ada")


def test_a_console_start_past_the_quota_answers_429_with_retry_after(admin, candidate, monkeypatch, settings):
    settings.CONDUIT_IMPACT_JOBS_PER_LOGIN = 1
    monkeypatch.setattr(impact_views, "launch", lambda run_id, clock: None)
    other = apply_config(CHANGED, candidate=True)
    admin.post(reverse("candidate-impact", args=[candidate.pk]), {"events": "10"}, **HTMX)

    refused = admin.post(reverse("candidate-impact", args=[other.pk]), {"events": "10"}, **HTMX)

    assert refused.status_code == 429 and refused["Retry-After"] == "10"
    assert "as many as allowed at once" in refused.content.decode()
    assert ImpactRun.objects.count() == 1


def test_a_run_cancelled_after_its_last_chunk_stays_cancelled_with_nothing_stored(clock, candidate):
    events(30)
    run, _ = impact_runs.impact_run_start(candidate=candidate, clock=clock, events=30, by="ada")

    def cancelled_at_the_end(done: int, total: int) -> None:
        if done == total:
            impact_runs.impact_run_cancel(run.pk, clock=clock, by="bob")

    run = impact_runs.impact_run_execute(run_id=run.pk, clock=clock, progress=cancelled_at_the_end)

    assert (run.status, run.error, run.changed) == ("cancelled", "cancelled by bob", 0)
    assert not ImpactRunChange.objects.exists()
