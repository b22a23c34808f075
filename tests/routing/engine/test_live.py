"""Live updates from the router (D4): each routed window publishes, on commit, one
``console.events`` message and at most 50 ``work.<id>`` messages; a failing channel layer
never stops routing; an open Work page gets the new route as an out-of-band fragment."""

from __future__ import annotations

import logging

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import transaction

from conduit_site.asgi import application
from infra.live import EVENTS_GROUP, UPDATE_TYPE, group_name_for_work
from routing.engine.live import MAX_WORK_MESSAGES, publish_routed, send_routed
from routing.engine.live import drain as live_drain
from routing.models import RouteRecord
from tests.routing.factories import UserFactory
from tests.routing.livekit import headers, join, route_pass, waiting
from tests.routing.routerkit import accept, apply

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def handlers(test_handlers):
    """Every test here routes with the test handlers registered (tests/conftest.py)."""


def pr(clock, number: int):
    return accept(clock, "github.pull_request.opened", {"repo": "acme/api", "number": number})


def test_d4_publish_routed_sends_on_commit_one_events_message_and_at_most_50_work_messages(layer_path):
    works = list(range(1, 61))
    channels = join(EVENTS_GROUP, *(group_name_for_work(w) for w in works))
    with transaction.atomic():
        publish_routed(range(1, 201), works)
        assert all(not m for m in waiting(layer_path, channels).values()), "sent before the commit"
    messages = waiting(layer_path, channels)
    assert messages[EVENTS_GROUP] == [
        {
            "type": UPDATE_TYPE,
            "group": EVENTS_GROUP,
            "payload": {"events": 200, "first_seq": 1, "last_seq": 200},
        }
    ]
    told = [w for w in works if messages[group_name_for_work(w)]]
    assert told == works[:MAX_WORK_MESSAGES] == list(range(1, 51))
    assert all(len(messages[group_name_for_work(w)]) == 1 for w in told)
    assert messages[group_name_for_work(7)][0]["payload"] == {"work_id": 7}


def test_d4_a_rolled_back_window_publishes_nothing(layer_path):
    channels = join(EVENTS_GROUP, group_name_for_work(1))
    with pytest.raises(RuntimeError), transaction.atomic():
        publish_routed([1, 2], [1])
        raise RuntimeError("the window rolled back")
    assert waiting(layer_path, channels) == {EVENTS_GROUP: [], group_name_for_work(1): []}


def test_d4_a_big_window_costs_a_bounded_number_of_messages(layer_path):
    join(EVENTS_GROUP, *(group_name_for_work(w) for w in range(1, 81)))
    assert send_routed(list(range(1, 5001)), list(range(1, 1001))) == 1 + MAX_WORK_MESSAGES
    assert send_routed([3], []) == 1


def test_d4_only_open_pages_are_told_so_any_work_of_a_big_window_is(layer_path):
    """The embedded layer says which groups have a member: a page open on the 300th Work of a
    window hears of it, and groups nobody is in cost nothing."""
    channels = join(group_name_for_work(300))
    assert send_routed(list(range(1, 5001)), list(range(1, 1001))) == 1
    assert waiting(layer_path, channels)[group_name_for_work(300)] == [
        {"type": UPDATE_TYPE, "group": group_name_for_work(300), "payload": {"work_id": 300}}
    ]
    assert send_routed([3], [4, 5]) == 0
    # Nothing to say: nothing is registered, nothing sent.
    with transaction.atomic():
        publish_routed([], [])
        assert not transaction.get_connection().run_on_commit


def test_d4_a_router_pass_publishes_once_per_window_for_its_events_and_works(clock, layer_path):
    apply(clock)
    first = pr(clock, 1)
    route_pass(clock)
    assert live_drain(), "the first window's messages went out before the pages join"
    work_id = RouteRecord.objects.get(event=first).work_id
    channels = join(EVENTS_GROUP, group_name_for_work(work_id))
    followup = accept(clock, "followup.comment", {"repo": "acme/api", "number": 1})
    other = pr(clock, 2)
    noise = accept(clock, "noise.tick", {})
    route_pass(clock)
    messages = waiting(layer_path, channels)
    assert len(messages[EVENTS_GROUP]) == 1
    assert messages[EVENTS_GROUP][0]["payload"] == {
        "events": 3,
        "first_seq": followup.seq,
        "last_seq": noise.seq,
    }
    assert [m["payload"] for m in messages[group_name_for_work(work_id)]] == [{"work_id": work_id}]
    assert RouteRecord.objects.get(event=other).work_id != work_id


def test_d4_a_failing_channel_layer_logs_a_warning_and_routing_goes_on(clock, settings, tmp_path, caplog):
    # A directory is no SQLite file: every send fails.
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "infra.layers.SQLiteChannelLayer", "CONFIG": {"path": str(tmp_path)}}
    }
    apply(clock)
    event = pr(clock, 1)
    with caplog.at_level(logging.WARNING, logger="conduit.routing.live"):
        route_pass(clock)
        assert live_drain(), "the publisher did not finish"
    assert RouteRecord.objects.get(event=event).policy == "start"
    failures = [r for r in caplog.records if r.getMessage() == "route.live_publish_failed"]
    assert failures and failures[0].levelno == logging.WARNING
    assert failures[0].exc_info is not None  # logged with its stack
    # The next window routes as well.
    later = pr(clock, 2)
    route_pass(clock)
    assert RouteRecord.objects.get(event=later).policy == "start"


def test_d4_without_a_channel_layer_routing_publishes_nothing_and_goes_on(clock, settings):
    settings.CHANNEL_LAYERS = {}
    apply(clock)
    event = pr(clock, 1)
    route_pass(clock)
    assert RouteRecord.objects.filter(event=event).exists()
    assert send_routed([event.seq], []) == 0


# --- the consumer: an open Work page gets the route the router decided --------------------------


def test_d4_a_routed_event_reaches_the_open_work_page_as_an_oob_fragment(client, clock, layer_path):
    client.force_login(UserFactory())
    apply(clock)
    first = pr(clock, 1)
    route_pass(clock)
    work_id = RouteRecord.objects.get(event=first).work_id
    routed = {}

    def route_a_followup():
        routed["event"] = accept(clock, "followup.comment", {"repo": "acme/api", "number": 1})
        route_pass(clock)

    async def scenario():
        communicator = WebsocketCommunicator(application, f"/ws/work/{work_id}/", headers=headers(client))
        connected, _ = await communicator.connect(timeout=5)
        assert connected
        await sync_to_async(route_a_followup)()
        html = await communicator.receive_from(timeout=10)
        await communicator.disconnect()
        return html

    html = async_to_sync(scenario)()
    seq = routed["event"].seq
    assert '<section id="work-history" hx-swap-oob="true">' in html
    row = html[html.index(f'<tr id="history-{seq}">') :]
    assert "<td>queue</td>" in row[: row.index("</tr>")]
    assert f'<tr id="input-{seq}">' in html


def test_d4_a_routed_event_reaches_the_open_events_list(client, clock, layer_path):
    client.force_login(UserFactory())
    apply(clock)
    routed = {}

    def route_one():
        routed["event"] = pr(clock, 9)
        route_pass(clock)

    async def scenario():
        communicator = WebsocketCommunicator(
            application, "/ws/events/?route_state=routed", headers=headers(client)
        )
        connected, _ = await communicator.connect(timeout=5)
        assert connected
        await sync_to_async(route_one)()
        html = await communicator.receive_from(timeout=10)
        await communicator.disconnect()
        return html

    html = async_to_sync(scenario)()
    assert '<div id="event-rows" hx-swap-oob="true">' in html
    assert f'<tr id="event-{routed["event"].seq}">' in html
