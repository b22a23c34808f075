"""Live updates over websockets: the consumers behind ``ws/work/<id>/`` and ``ws/events/``,
driven through the real ASGI application (origin check, session auth, URL routing)."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Permission
from django.db import transaction
from django.urls import reverse

from conduit_site.asgi import application
from conduit_site.console.consumers import CLOSE_BAD_REQUEST, CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED
from conduit_site.console.views import work as work_views
from infra.live import EVENTS_GROUP, group_name_for_work, publish_on_commit
from routing.engine.live import publish_routed
from tests.causal.factories import EventFactory
from tests.routing.factories import RouteRecordFactory, UserFactory
from tests.worklife.factories import AttemptFactory, WorkFactory, WorkInputFactory
from worklife.attempts import attempt_fail
from worklife.models import Work, WorkStatus

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def channel_layer(settings, tmp_path):
    """A private SQLite channel layer file for each test."""
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "infra.layers.SQLiteChannelLayer",
            "CONFIG": {"path": str(tmp_path / "channels.sqlite3"), "poll_interval": 0.01},
        }
    }


def headers(client=None) -> list[tuple[bytes, bytes]]:
    result = [(b"origin", b"http://testserver"), (b"host", b"testserver")]
    if client is not None:
        result.append((b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()))
    return result


@pytest.fixture
def signed_in(client):
    client.force_login(UserFactory())
    return client


def connect_and_collect(path: str, client, publish=None, *, expect_message: bool = True):
    """Connect to ``path``, run ``publish`` (sync, in a thread), return (accepted, close
    code or None, the text received or None)."""

    async def scenario():
        communicator = WebsocketCommunicator(application, path, headers=headers(client))
        connected, code = await communicator.connect(timeout=5)
        if not connected:
            return False, code, None
        # A refusal is an accepted socket closed at once with its code (the browser sees the code).
        if not await communicator.receive_nothing(timeout=0.1):
            first = await communicator.receive_output(timeout=1)
            if first["type"] == "websocket.close":
                return False, first.get("code"), None
            raise AssertionError(f"unexpected first frame {first!r}")
        text = None
        if publish is not None:
            await sync_to_async(publish)()
            if expect_message:
                text = await communicator.receive_from(timeout=10)
            else:
                assert await communicator.receive_nothing(timeout=0.5)
        await communicator.disconnect()
        return True, None, text

    return async_to_sync(scenario)()


def test_d4_unauthenticated_socket_is_refused(client):
    work = WorkFactory()
    accepted, code, _ = connect_and_collect(f"/ws/work/{work.pk}/", None)
    assert not accepted
    assert code == CLOSE_UNAUTHENTICATED
    accepted, code, _ = connect_and_collect("/ws/events/", None)
    assert (accepted, code) == (False, CLOSE_UNAUTHENTICATED)


def test_d4_unknown_work_and_bad_filters_are_refused(signed_in):
    assert connect_and_collect("/ws/work/999999/", signed_in)[:2] == (False, CLOSE_NOT_FOUND)
    assert connect_and_collect("/ws/events/?route_state=bogus", signed_in)[:2] == (False, CLOSE_BAD_REQUEST)


def test_d4_work_socket_sends_the_work_history_partial_out_of_band(signed_in):
    work = WorkFactory()
    WorkInputFactory(work=work)

    def route_an_event():
        # A service's write: the record and the publish commit together.
        with transaction.atomic():
            record = RouteRecordFactory(work=work, policy="queue", reason="matched-by-test")
            publish_on_commit(group_name_for_work(work.pk), {"work_id": work.pk, "seq": record.event_id})

    accepted, _, html = connect_and_collect(f"/ws/work/{work.pk}/", signed_in, route_an_event)
    assert accepted
    assert '<section id="work-history" hx-swap-oob="true">' in html
    assert "matched-by-test" in html
    # The same fragments the HTTP page renders: state and input too.
    assert '<section id="work-summary" hx-swap-oob="true">' in html
    assert '<section id="work-input" hx-swap-oob="true">' in html


def test_d4_rolled_back_change_sends_nothing(signed_in):
    work = WorkFactory()

    def failed_write():
        with pytest.raises(RuntimeError), transaction.atomic():
            publish_on_commit(group_name_for_work(work.pk), {"work_id": work.pk})
            raise RuntimeError("rolled back")

    accepted, _, html = connect_and_collect(
        f"/ws/work/{work.pk}/", signed_in, failed_write, expect_message=False
    )
    assert accepted and html is None


def test_d4_events_socket_sends_filtered_event_rows_out_of_band(signed_in):
    def accept_events():
        with transaction.atomic():
            EventFactory(scope="acme", type="github.push")
            EventFactory(scope="other", type="github.push")
            publish_on_commit(EVENTS_GROUP, {"seq": 0})

    accepted, _, html = connect_and_collect("/ws/events/?scope=acme", signed_in, accept_events)
    assert accepted
    assert html.startswith('\n<div id="event-rows" hx-swap-oob="true">') or (
        '<div id="event-rows" hx-swap-oob="true">' in html
    )
    assert "github.<wbr>push" in html  # Event types wrap at dots
    assert ">acme<" in html and ">other<" not in html


def test_work_socket_sends_the_engine_partial_when_the_work_loop_publishes(signed_in, clock, monkeypatch):
    monkeypatch.setattr(work_views, "clock", clock)
    work = WorkFactory(status="running")
    attempt = AttemptFactory(work=work, number=1)

    def an_attempt_fails():
        # What work_loop does once an outcome commits: publish_routed([], the Work it touched).
        with transaction.atomic():
            attempt_fail(
                attempt_id=attempt.pk, lease_epoch=attempt.lease_epoch, error="engine-says-so", clock=clock
            )
            publish_routed([], [work.pk])

    accepted, _, html = connect_and_collect(f"/ws/work/{work.pk}/", signed_in, an_attempt_fails)
    assert accepted
    assert '<section id="work-engine" hx-swap-oob="true">' in html and "engine-says-so" in html
    assert '<dd id="work-why" data-reason="backing_off">backing off until 2026-01-05 12:00:02 UTC' in html


def test_work_socket_sends_the_control_buttons_so_retry_shows_when_the_work_parks(
    client, clock, settings, monkeypatch
):
    monkeypatch.setattr(work_views, "clock", clock)
    settings.CONDUIT_MAX_ATTEMPTS = 1
    user = UserFactory()
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="worklife", codename__in=["retry_work", "cancel_work"]
        )
    )
    client.force_login(user)
    work = WorkFactory(status="running")
    attempt = AttemptFactory(work=work, number=1)
    retry_url = reverse("work-retry", args=[work.pk])
    page = client.get(reverse("work-detail", args=[work.pk])).content.decode()
    buttons = page[page.index('id="work-control-buttons"') :]
    buttons = buttons[: buttons.index("</span>")]
    assert "Cancel Work" in buttons and retry_url not in buttons  # running: nothing to retry yet

    def the_attempt_fails_and_the_work_parks():
        # What work_loop does once an outcome commits: publish_routed([], the Work it touched).
        with transaction.atomic():
            attempt_fail(attempt_id=attempt.pk, lease_epoch=attempt.lease_epoch, error="boom", clock=clock)
            publish_routed([], [work.pk])

    accepted, _, html = connect_and_collect(
        f"/ws/work/{work.pk}/", client, the_attempt_fails_and_the_work_parks
    )
    assert accepted
    live = html[html.index('<span class="controls" id="work-control-buttons" hx-swap-oob="true">') :]
    live = live[: live.index("</span>")]
    assert f'hx-post="{retry_url}"' in live and ">Retry</a>" in live and "Cancel Work" in live

    def the_work_is_cancelled():
        with transaction.atomic():
            Work.objects.filter(pk=work.pk).update(status=WorkStatus.CANCELLED)
            publish_routed([], [work.pk])

    accepted, _, html = connect_and_collect(f"/ws/work/{work.pk}/", client, the_work_is_cancelled)
    live = html[html.index('<span class="controls" id="work-control-buttons" hx-swap-oob="true">') :]
    live = live[: live.index("</span>")]
    assert "Retry" not in live and "Cancel Work" not in live  # ended: no control applies


def origin_accepted(origin: bytes, host: bytes = b"testserver", scheme: str = "ws", **extra) -> bool:
    """Whether a signed-out socket from ``origin`` gets past the origin check (it is then closed
    4401 by the consumer; a refused origin never reaches it: the handshake is denied)."""
    from channels.testing import WebsocketCommunicator as Communicator

    async def scenario():
        communicator = Communicator(
            application, "/ws/events/", headers=[(b"origin", origin), (b"host", host)]
        )
        communicator.scope["scheme"] = scheme
        communicator.scope.update(extra)
        connected, _ = await communicator.connect(timeout=5)
        await communicator.disconnect()
        return connected

    return async_to_sync(scenario)()


def test_the_websocket_origin_must_match_scheme_host_and_port(settings):
    assert origin_accepted(b"http://127.0.0.1:8000", host=b"127.0.0.1:8000")
    # Another service on the same host (another port), or another scheme: refused.
    assert not origin_accepted(b"http://127.0.0.1:9999", host=b"127.0.0.1:8000")
    assert not origin_accepted(b"https://127.0.0.1:8000", host=b"127.0.0.1:8000")
    assert not origin_accepted(b"http://127.0.0.1", host=b"127.0.0.1:8000")
    assert origin_accepted(b"http://testserver:80", host=b"testserver")
    # A TLS connection's pages are https; a trusted origin may be named.
    assert origin_accepted(b"https://testserver", scheme="wss")
    assert not origin_accepted(b"https://other.example", scheme="wss")
    # (ALLOWED_HOSTS is read when the application is built: testserver is among them.)
    assert not origin_accepted(b"https://testserver:8443")
    settings.CSRF_TRUSTED_ORIGINS = ["https://testserver:8443"]
    assert origin_accepted(b"https://testserver:8443")
    assert not origin_accepted(b"https://testserver:8444")


def test_behind_a_tls_proxy_the_forwarded_scheme_counts_when_trusted(settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    forwarded = [
        (b"origin", b"https://testserver"),
        (b"host", b"testserver"),
        (b"x-forwarded-proto", b"https"),
    ]
    from channels.testing import WebsocketCommunicator as Communicator

    async def scenario(headers):
        communicator = Communicator(application, "/ws/events/", headers=headers)
        connected, _ = await communicator.connect(timeout=5)
        await communicator.disconnect()
        return connected

    assert async_to_sync(scenario)(forwarded)
    settings.SECURE_PROXY_SSL_HEADER = None
    assert not async_to_sync(scenario)(forwarded)
