"""The web process's reader of the live-update outbox: it sends each open group a change names
one message a pass, only to groups a websocket here is in, and a change whose position commits
late is still sent; a page catches up on connect from the position it was rendered at."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import transaction
from django.urls import reverse

from conduit_site import live
from conduit_site.asgi import application
from infra.live import EVENTS_GROUP, WORK_GROUP, live_head, pages_changed_on_commit, work_changed_on_commit
from infra.models import LiveChange
from tests.conduit_site.livekit import RecordingReader
from tests.infra.factories import LiveChangeFactory
from tests.routing.factories import UserFactory
from tests.routing.livekit import headers as session_headers
from tests.worklife.factories import WorkFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def reader():
    recording = RecordingReader()
    yield recording
    recording.close()


def test_the_reader_sends_each_open_group_one_message_a_pass_and_nothing_to_groups_nobody_is_in(reader):
    reader.step()  # starts at the outbox's head
    LiveChange.objects.bulk_create(
        LiveChangeFactory.build(groups=[WORK_GROUP], works=[work_id]) for work_id in range(1, 2501)
    )
    pages_changed_on_commit(groups=[EVENTS_GROUP], events=[9])
    # Nobody here listens: the reader reads on, and sends nothing.
    assert reader.step() is True  # a full batch (1,000 rows): the next pass goes on at once
    assert reader.sent == []

    reader.listen(WORK_GROUP, "work.2500", "event.9", "work.99999")
    passes = 1
    while reader.step():
        passes += 1
    assert passes == 2 and reader.rows == 2501
    # A message to each open group a pass read, however many rows named it.
    head = live_head()
    assert reader.sent == [([WORK_GROUP], head - 501), ([WORK_GROUP, "event.9", "work.2500"], head)]
    reader.step()
    assert len(reader.sent) == 2, "a pass with nothing new sends nothing"


def test_a_position_that_commits_after_a_later_one_is_still_sent(reader):
    reader.listen(WORK_GROUP, "work.2", "work.3")
    reader.step()
    first, missing, last = LiveChangeFactory.create_batch(3, groups=[])
    # As if ``missing`` took its position first and committed last: not there yet.
    LiveChange.objects.filter(pk=missing.pk).delete()
    LiveChange.objects.filter(pk=last.pk).update(works=[3])
    reader.step()
    assert reader.sent == [(["work.3"], last.pk)]
    assert reader.position == last.pk

    LiveChangeFactory(id=missing.pk, groups=[WORK_GROUP], works=[2])
    reader.step()
    assert reader.sent[1] == ([WORK_GROUP, "work.2"], last.pk)
    assert reader.late_since(60, ["work.2"]) and not reader.late_since(60, ["work.3"])
    reader.step()
    assert len(reader.sent) == 2, "a late position is sent once"


def connect(client, path: str, change=None) -> list[str]:
    """Open ``path`` (after running ``change``), return what it sent within 2 s."""

    async def scenario():
        if change is not None:
            await sync_to_async(change)()
        communicator = WebsocketCommunicator(application, path, headers=session_headers(client))
        connected, code = await communicator.connect(timeout=5)
        assert connected, code
        sent = []
        while not await communicator.receive_nothing(timeout=2):
            sent.append(await communicator.receive_from(timeout=1))
        await communicator.disconnect()
        return sent

    return async_to_sync(scenario)()


def test_a_page_catches_up_on_connect_with_what_committed_after_the_position_it_was_rendered_at(client):
    client.force_login(UserFactory())
    work, other = WorkFactory(status="ready"), WorkFactory(status="ready")
    page = client.get(f"/work/{work.pk}/").content.decode()
    position = live_head()
    assert f'ws-connect="/ws/work/{work.pk}/?outbox={position}"' in page

    # Nothing changed since: the socket sends nothing on connect.
    assert connect(client, f"/ws/work/{work.pk}/?outbox={position}") == []

    # Another Work changed: not this page's.
    def other_changes():
        with transaction.atomic():
            work_changed_on_commit([other.pk])

    assert connect(client, f"/ws/work/{work.pk}/?outbox={position}", other_changes) == []

    # This Work changed after the page rendered, before its socket opened (a command that
    # committed while the page loaded): it is sent on connect.
    def this_changes():
        with transaction.atomic():
            type(work).objects.filter(pk=work.pk).update(status="cancelled")
            work_changed_on_commit([work.pk])

    (html,) = connect(client, f"/ws/work/{work.pk}/?outbox={position}", this_changes)
    assert '<section id="work-summary" hx-swap-oob="true">' in html and "cancelled" in html
    # A socket that says no position is told only what commits after it opens.
    assert connect(client, f"/ws/work/{work.pk}/") == []


def test_a_page_older_than_the_outbox_catches_up_on_connect(client):
    client.force_login(UserFactory())
    work = WorkFactory(status="ready")
    rows = LiveChangeFactory.create_batch(3, groups=[], works=[1])
    LiveChange.objects.filter(pk__lte=rows[1].pk).delete()  # pruned past the page's position
    (html,) = connect(client, f"/ws/work/{work.pk}/?outbox={rows[0].pk - 1}")
    assert '<section id="work-summary" hx-swap-oob="true">' in html
    assert live.changed_since(rows[2].pk, [f"work.{work.pk}"]) is False


def test_the_banner_says_when_this_web_process_has_not_sent_a_change_committed_long_ago(client):
    client.force_login(UserFactory())
    read = LiveChangeFactory()
    live.reader.position = read.pk  # as after this process's first websocket
    assert "live-banner" not in client.get(reverse("console-health")).content.decode()
    LiveChangeFactory(at=datetime.now(UTC) - timedelta(seconds=3))
    assert "live-banner" not in client.get(reverse("console-health")).content.decode()

    LiveChangeFactory(at=datetime.now(UTC) - timedelta(seconds=40))
    banner = client.get(reverse("console-health")).content.decode()
    assert 'id="live-banner"' in banner
    assert "Live updates are 40 s behind" in banner or "Live updates are 41 s behind" in banner
