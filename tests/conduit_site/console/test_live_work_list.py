"""The Work list and the home page follow Work live; the Work page's controls
follow its state and Retry says what will happen.

Work changes publish on commit through one coalescing publisher (``infra.live``); the list and
home consumers render at most once a second and nothing at rest.
"""

from __future__ import annotations

import re
import threading
import time
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from conduit_site.asgi import application
from conduit_site.console import consumers
from controls import work as controls
from infra.live import (
    UPDATE_TYPE,
    WORK_GROUP,
    WorkPublisher,
    group_name_for_work,
    work_changed_on_commit,
    work_publisher,
)
from tests.routing.factories import UserFactory
from tests.routing.livekit import headers, join, route_pass
from tests.routing.routerkit import accept, apply
from tests.worklife.factories import AttemptFactory, WorkFactory
from worklife.attempts import attempt_fail
from worklife.models import Work

# A private channel layer file for each test (test_live_routing's fixture).
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("layer_path")]


def messages_of(path, channels: dict[str, str]) -> dict[str, list[dict]]:
    """What each joined channel holds once the Work publisher has sent what was committed."""
    import json
    import sqlite3

    assert work_publisher.drain(10), "the publisher did not finish"
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT channel, body FROM channel_message ORDER BY id").fetchall()
    by_channel = {channel: group for group, channel in channels.items()}
    found: dict[str, list[dict]] = {group: [] for group in channels}
    for channel, body in rows:
        if channel in by_channel:
            found[by_channel[channel]].append(json.loads(body))
    return found


def park(work, clock) -> None:
    """What the work loop does when the last allowed attempt fails: the Work parks."""
    attempt = AttemptFactory(work=work, number=1)
    attempt_fail(attempt_id=attempt.pk, lease_epoch=attempt.lease_epoch, error="boom", clock=clock)


def live(client, path: str, change=None, *, seconds: float = 5.0) -> list[str]:
    """Open the websocket ``path``, run ``change`` (sync), return what it sent in ``seconds``."""

    async def scenario():
        communicator = WebsocketCommunicator(application, path, headers=headers(client))
        connected, code = await communicator.connect(timeout=5)
        assert connected, code
        if change is not None:
            await sync_to_async(change)()
        sent = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                sent.append(await communicator.receive_from(timeout=left))
            except TimeoutError:
                break
            if change is not None:
                break
        await communicator.disconnect()
        return sent

    return async_to_sync(scenario)()


# --- the publisher --------------------------------------------------------------------------------


def test_live_work_list_a_parked_work_publishes_on_commit_never_on_rollback(layer_path, clock, settings):
    settings.CONDUIT_MAX_ATTEMPTS = 1
    work, kept = WorkFactory(status="running"), WorkFactory(status="running")
    channels = join(WORK_GROUP, group_name_for_work(work.pk))
    with pytest.raises(RuntimeError), transaction.atomic():
        park(kept, clock)
        raise RuntimeError("rolled back")
    assert messages_of(layer_path, channels) == {WORK_GROUP: [], group_name_for_work(work.pk): []}

    park(work, clock)
    found = messages_of(layer_path, channels)
    assert found[group_name_for_work(work.pk)] == [
        {"type": UPDATE_TYPE, "group": group_name_for_work(work.pk), "payload": {"work_id": work.pk}}
    ]
    assert [m["payload"]["works"] for m in found[WORK_GROUP]] == [1]


def test_live_work_list_10000_changes_send_a_handful_of_messages(layer_path):
    """Each change's commit hands its Work to the publisher; while a batch is sent, and for a
    quarter second after, the next changes gather into one batch."""
    join(WORK_GROUP, group_name_for_work(7))
    publisher = WorkPublisher()
    between_commits = threading.Event()
    started = time.monotonic()
    for work_id in range(1, 10_001):
        publisher.put([work_id])  # what work_changed_on_commit runs on each commit
        between_commits.wait(0.0001)  # commits come one after another, not all at once
    assert publisher.drain(10)
    elapsed = time.monotonic() - started
    assert elapsed > 1.0, "the changes did not spread over time"
    # One console.work message and one work.7 message a batch: a batch per 0.25 s at most.
    assert publisher.batches <= 2 + elapsed / 0.25
    assert publisher.batches <= publisher.messages <= 2 * publisher.batches
    assert publisher.messages < 20


def test_live_work_list_nobody_listening_costs_no_message(layer_path):
    publisher = WorkPublisher()
    publisher.put(range(1, 1001))
    assert publisher.drain(10)
    assert (publisher.batches, publisher.messages) == (1, 0)


# --- the consumers --------------------------------------------------------------------------------


def test_live_work_list_sends_its_filter_and_page(client, clock, settings):
    settings.CONDUIT_MAX_ATTEMPTS = 1
    client.force_login(UserFactory())
    running = WorkFactory(status="running")
    WorkFactory.create_batch(3, status="ready")

    html = live(client, "/ws/work/?status=parked", lambda: park(running, clock))[0]
    assert html.strip().startswith('<div id="work-rows" hx-swap-oob="true">')
    assert re.findall(r'<tr id="work-(\d+)">', html) == [str(running.pk)]
    assert "badge-parked" in html
    # Its links keep the page's filter.
    assert "status=parked" in html


def test_live_work_list_shows_work_the_router_starts(client, clock, test_handlers):
    client.force_login(UserFactory())
    apply(clock)
    accept(clock, "github.pull_request.opened", {"repo": "acme/api", "number": 7})

    html = live(client, "/ws/work/?scope=acme", lambda: route_pass(clock))[0]
    (started,) = Work.objects.values_list("pk", flat=True)
    assert re.findall(r'<tr id="work-(\d+)">', html) == [str(started)]


def test_live_work_list_a_bad_filter_is_refused(client):
    client.force_login(UserFactory())

    async def scenario():
        communicator = WebsocketCommunicator(
            application, "/ws/work/?status=sleeping", headers=headers(client)
        )
        await communicator.connect(timeout=5)
        return await communicator.receive_output(timeout=2)

    assert async_to_sync(scenario)() == {"type": "websocket.close", "code": consumers.CLOSE_BAD_REQUEST}


def test_live_work_list_home_counts_follow_a_parked_work(client, clock, settings):
    settings.CONDUIT_MAX_ATTEMPTS = 1
    client.force_login(UserFactory())
    running = WorkFactory(status="running")
    page = client.get(reverse("console-home")).content.decode()
    assert 'ws-connect="/ws/home/"' in page
    assert '<span class="num" id="parked-count">0</span>' in page

    html = live(client, "/ws/home/", lambda: park(running, clock))[0]
    assert html.strip().startswith('<div class="cards" id="console-summary" hx-swap-oob="true">')
    assert '<span class="num" id="parked-count">1</span>' in html


@pytest.fixture
def renders(monkeypatch):
    """Every render of the list and home consumers, with the queries it ran (on the render's
    own thread and connection)."""
    counted: dict[str, list[int]] = {"list": [], "home": []}
    for name, cls in (("list", consumers.WorkListConsumer), ("home", consumers.HomeConsumer)):

        def counting(self, original=cls.render, name=name):
            with CaptureQueriesContext(connection) as queries:
                html = original(self)
            counted[name].append(len(queries))
            return html

        monkeypatch.setattr(cls, "render", counting)
    return counted


def test_live_work_list_and_home_query_nothing_at_rest_and_once_a_second_at_most(
    client, clock, settings, renders
):
    """At rest a page is told nothing and queries nothing (its banner polls once in 15 s, one
    query); under a stream of changes each page renders at most once a second."""
    client.force_login(UserFactory())
    works = WorkFactory.create_batch(30, status="ready")

    async def scenario(change_for: float):
        pages = [
            WebsocketCommunicator(application, path, headers=headers(client))
            for path in ("/ws/work/", "/ws/home/")
        ]
        for page in pages:
            assert (await page.connect(timeout=5))[0]
        started = time.monotonic()
        if change_for:
            i = 0
            while time.monotonic() - started < change_for:
                await sync_to_async(touch)(works[i % len(works)])
                i += 1
        await asyncio_sleep(3.0 if not change_for else 1.5)
        for page in pages:
            await page.disconnect()
        return time.monotonic() - started

    def touch(work):
        with transaction.atomic():
            work_changed_on_commit([work.pk])

    async_to_sync(scenario)(0)
    assert renders == {"list": [], "home": []}, "a page at rest rendered"

    elapsed = async_to_sync(scenario)(3.0)
    for name in ("list", "home"):
        assert 1 <= len(renders[name]) <= elapsed + 1, (name, renders[name], elapsed)
    # A render's queries are fixed: the list's page and total; the home cards' counts, doctor's
    # checks and the dead letters. So at most 2 and 13 queries a second, none at rest.
    assert max(renders["list"]) <= 2, renders["list"]
    assert max(renders["home"]) <= 13, renders["home"]


async def asyncio_sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)


# --- the Work page's controls ---------------------------------------------------------------------


def test_stale_controls_forms_go_in_the_live_update_when_the_work_ends(client, clock):
    user = UserFactory(is_superuser=True)
    client.force_login(user)
    work = WorkFactory(status="ready")
    page = client.get(reverse("work-detail", args=[work.pk])).content.decode()
    assert 'id="work-send"' in page and 'id="work-rebind"' in page

    html = live(
        client, f"/ws/work/{work.pk}/", lambda: controls.work_cancel(work_id=work.pk, user="bob", clock=clock)
    )[0]
    forms = html[html.index('<div id="work-control-forms" hx-swap-oob="true">') :]
    assert 'id="work-send"' not in forms and 'id="work-rebind"' not in forms
    assert "Cancel Work" not in html[html.index('id="work-control-buttons"') :]


def test_stale_controls_live_update_leaves_the_forms_of_a_live_work_as_typed(client, clock):
    client.force_login(UserFactory(is_superuser=True))
    work = WorkFactory(status="running")
    attempt = AttemptFactory(work=work, number=1)

    def fail():
        attempt_fail(attempt_id=attempt.pk, lease_epoch=attempt.lease_epoch, error="boom", clock=clock)

    html = live(client, f"/ws/work/{work.pk}/", fail)[0]
    assert 'id="work-control-buttons"' in html
    assert "work-control-forms" not in html


def queue_only_work(clock):
    """A Work on acme's queue-only binding ``inbox``, held by its refused dispatch: the work
    loop looks again in five minutes, so the Work is backing off and Retry shows."""
    apply(clock)
    return WorkFactory(
        scope="acme",
        binding="inbox",
        status="ready",
        pending_run=True,
        retry_at=clock() + timedelta(minutes=5),
        last_error="dispatch refused: binding 'inbox' is queue-only: its input waits in the queue",
    )


def test_retry_message_says_what_will_happen_for_a_queue_only_binding(client, clock, test_handlers):
    work = queue_only_work(clock)
    client.force_login(UserFactory(is_superuser=True))
    page = client.get(reverse("work-detail", args=[work.pk])).content.decode()
    confirm = re.search(r'hx-confirm="(Retry Work [^"]*)"', page).group(1)
    assert "runs again at once" not in confirm
    assert "Retry makes its input ready again; its binding &#x27;inbox&#x27; only queues input" in confirm
    assert "nothing runs until the Work is rebound to a binding with an executor" in confirm
    # The confirmation page without JavaScript says the same.
    assert "only queues input" in client.get(reverse("work-retry", args=[work.pk])).content.decode()

    result = controls.work_retry(work_id=work.pk, user="alice", clock=clock)
    assert result.message.startswith(
        f"Work {work.pk} retried by alice: Retry makes its input ready again; its binding 'inbox' only "
        "queues input (it has no executor), so nothing runs until the Work is rebound"
    )
    assert "runs again at once" not in result.message


def test_retry_message_on_a_binding_with_an_executor_still_runs_at_once(clock, test_handlers):
    apply(clock)
    work = WorkFactory(scope="acme", binding="plain", status="ready", retry_at=clock() + timedelta(seconds=8))
    result = controls.work_retry(work_id=work.pk, user="alice", clock=clock)
    assert "it runs again at once" in result.message and result.outlook == ""
