"""An open Event page follows its Event live: the router routing it, an
operator skipping it elsewhere, and a paged Work page staying live on its page."""

from __future__ import annotations

import re

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Permission
from django.db import transaction

from conduit_site.asgi import application
from conduit_site.console.consumers import CLOSE_NOT_FOUND
from controls import events as controls
from infra.live import group_name_for_event, group_name_for_work, publish_on_commit
from routing.engine.live import send_routed
from tests.routing.factories import UserFactory
from tests.routing.livekit import headers, join, route_pass, waiting
from tests.routing.routerkit import accept, apply
from tests.worklife.factories import WorkFactory, WorkInputFactory

# A private channel layer file for each test (test_live_routing's fixture).
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("layer_path")]


@pytest.fixture(autouse=True)
def handlers(test_handlers):
    """Every test here routes with the test handlers registered (tests/conftest.py)."""


def live_html(client, path: str, change) -> str:
    """Open the websocket ``path``, run ``change`` (sync), return the first fragment sent."""

    async def scenario():
        communicator = WebsocketCommunicator(application, path, headers=headers(client))
        connected, code = await communicator.connect(timeout=5)
        assert connected, code
        await sync_to_async(change)()
        html = await communicator.receive_from(timeout=10)
        await communicator.disconnect()
        return html

    return async_to_sync(scenario)()


def test_an_unrouted_event_page_changes_when_the_router_routes_it(client, clock):
    client.force_login(UserFactory())
    apply(clock)
    event = accept(clock, "github.pull_request.opened", {"repo": "acme/api", "number": 5})

    html = live_html(client, f"/ws/events/{event.seq}/", lambda: route_pass(clock))
    for element in (
        '<h1 id="event-heading" hx-swap-oob="true">',
        '<section id="event-state" hx-swap-oob="true">',
    ):
        assert element in html
    heading = html[html.index('<h1 id="event-heading"') : html.index("</h1>")]
    assert "badge-routed" in heading and "unrouted" not in heading
    route = html[html.index('<section id="event-route" hx-swap-oob="true">') :]
    assert "<strong>start</strong>" in route
    assert f'<tr id="chain-{event.seq}" aria-current="true">' in html


def test_an_open_event_page_follows_a_skip_made_elsewhere(client, clock):
    operator = UserFactory()
    operator.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="routing", codename__in=["skip_event", "reroute_event"]
        )
    )
    client.force_login(operator)
    apply(clock)
    event = accept(clock, "nothing.matches.this", {})

    def skip():
        controls.event_skip(seq=event.seq, user="alice", clock=clock)

    html = live_html(client, f"/ws/events/{event.seq}/", skip)
    assert "badge-skipped" in html[html.index('<h1 id="event-heading"') : html.index("</h1>")]
    assert "skipped by alice" in html
    # The page's controls come with it: a skipped Event offers Reroute, no more Skip.
    assert f"/events/{event.seq}/reroute/" in html and f"/events/{event.seq}/skip/" not in html


def test_an_unknown_event_page_socket_is_refused(client):
    client.force_login(UserFactory())

    async def scenario():
        communicator = WebsocketCommunicator(application, "/ws/events/999999/", headers=headers(client))
        connected = await communicator.connect(timeout=5)
        return connected, await communicator.receive_output(timeout=1)

    # Accepted, then closed with the code the page can read (a refused handshake has none).
    assert async_to_sync(scenario)() == ((True, None), {"type": "websocket.close", "code": CLOSE_NOT_FOUND})


def test_only_open_event_pages_are_told(settings):
    channels = join(group_name_for_event(300))
    # One Events-list message is not sent (nobody listens); the one open Event page is.
    assert send_routed(list(range(1, 1001)), []) == 1
    assert [
        m["payload"]
        for m in waiting(settings.CHANNEL_LAYERS["default"]["CONFIG"]["path"], channels)[
            group_name_for_event(300)
        ]
    ] == [{"seq": 300}]


def test_a_paged_work_page_stays_live_on_its_page(client):
    client.force_login(UserFactory())
    work = WorkFactory()
    inputs = [item.seq for item in WorkInputFactory.create_batch(60, work=work)]

    def more_input():
        with transaction.atomic():
            WorkInputFactory(work=work)
            publish_on_commit(group_name_for_work(work.pk), {"work_id": work.pk})

    path = f"/ws/work/{work.pk}/?input_order=newest&input_before={inputs[20]}"
    html = live_html(client, path, more_input)
    section = html[html.index('<section id="work-input" hx-swap-oob="true">') :]
    section = section[: section.index("</section>")]
    shown = [int(s) for s in re.findall(r'<tr id="input-(\d+)"', section)]
    # The page it was on (below inputs[20], newest first), with the new total.
    assert shown == inputs[:20][::-1]
    assert "61 inputs, newest first" in section
