"""Live updates over websockets: the consumers behind ``ws/work/<id>/`` and ``ws/events/``,
driven through the real ASGI application (origin check, session auth, URL routing)."""

from __future__ import annotations

import re
import time
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Permission
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from conduit_site.asgi import application
from conduit_site.console import consumers
from conduit_site.console.consumers import CLOSE_BAD_REQUEST, CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED
from conduit_site.console.views import work as work_views
from controls import events as controls
from controls import work as work_controls
from infra.live import EVENTS_GROUP, pages_changed_on_commit, work_changed_on_commit
from routing.engine.live import publish_routed
from tests.causal.factories import EventFactory
from tests.routing.factories import RouteRecordFactory, UserFactory
from tests.routing.livekit import headers as session_headers
from tests.routing.livekit import route_pass
from tests.routing.routerkit import accept, apply
from tests.worklife.factories import AttemptFactory, WorkFactory, WorkInputFactory
from worklife.attempts import attempt_fail
from worklife.models import Work, WorkStatus

pytestmark = pytest.mark.django_db(transaction=True)


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
            RouteRecordFactory(work=work, policy="queue", reason="matched-by-test")
            pages_changed_on_commit(works=[work.pk])

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
            pages_changed_on_commit(works=[work.pk])
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
            pages_changed_on_commit(groups=[EVENTS_GROUP])

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


# An open Event page follows its Event live: the router routing it, an
# operator skipping it elsewhere, and a paged Work page staying live on its page.


@pytest.fixture
def handlers(test_handlers):
    """The test handlers registered (tests/conftest.py), for the tests here that route."""


def live_html(client, path: str, change) -> str:
    """Open the websocket ``path``, run ``change`` (sync), return the first fragment sent."""

    async def scenario():
        communicator = WebsocketCommunicator(application, path, headers=session_headers(client))
        connected, code = await communicator.connect(timeout=5)
        assert connected, code
        await sync_to_async(change)()
        html = await communicator.receive_from(timeout=10)
        await communicator.disconnect()
        return html

    return async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("handlers")
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


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("handlers")
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


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("handlers")
def test_an_unknown_event_page_socket_is_refused(client):
    client.force_login(UserFactory())

    async def scenario():
        communicator = WebsocketCommunicator(
            application, "/ws/events/999999/", headers=session_headers(client)
        )
        connected = await communicator.connect(timeout=5)
        return connected, await communicator.receive_output(timeout=1)

    # Accepted, then closed with the code the page can read (a refused handshake has none).
    assert async_to_sync(scenario)() == ((True, None), {"type": "websocket.close", "code": CLOSE_NOT_FOUND})


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("handlers")
def test_a_paged_work_page_stays_live_on_its_page(client):
    client.force_login(UserFactory())
    work = WorkFactory()
    inputs = [item.seq for item in WorkInputFactory.create_batch(60, work=work)]

    def more_input():
        with transaction.atomic():
            WorkInputFactory(work=work)
            pages_changed_on_commit(works=[work.pk])

    path = f"/ws/work/{work.pk}/?input_order=newest&input_before={inputs[20]}"
    html = live_html(client, path, more_input)
    section = html[html.index('<section id="work-input" hx-swap-oob="true">') :]
    section = section[: section.index("</section>")]
    shown = [int(s) for s in re.findall(r'<tr id="input-(\d+)"', section)]
    # The page it was on (below inputs[20], newest first), with the new total.
    assert shown == inputs[:20][::-1]
    assert "61 inputs, newest first" in section


# The Work list and the home page follow Work live; the Work page's controls
# follow its state and Retry says what will happen.
#
# Work changes publish on commit through one coalescing publisher (``infra.live``); the list and
# home consumers render at most once a second and nothing at rest.


def park(work, clock) -> None:
    """What the work loop does when the last allowed attempt fails: the Work parks."""
    attempt = AttemptFactory(work=work, number=1)
    attempt_fail(attempt_id=attempt.pk, lease_epoch=attempt.lease_epoch, error="boom", clock=clock)


def live(client, path: str, change=None, *, seconds: float = 5.0) -> list[str]:
    """Open the websocket ``path``, run ``change`` (sync), return what it sent in ``seconds``."""

    async def scenario():
        communicator = WebsocketCommunicator(application, path, headers=session_headers(client))
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


# --- the consumers --------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
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


@pytest.mark.django_db(transaction=True)
def test_live_work_list_shows_work_the_router_starts(client, clock, test_handlers):
    client.force_login(UserFactory())
    apply(clock)
    accept(clock, "github.pull_request.opened", {"repo": "acme/api", "number": 7})

    html = live(client, "/ws/work/?scope=acme", lambda: route_pass(clock))[0]
    (started,) = Work.objects.values_list("pk", flat=True)
    assert re.findall(r'<tr id="work-(\d+)">', html) == [str(started)]


@pytest.mark.django_db(transaction=True)
def test_live_work_list_a_bad_filter_is_refused(client):
    client.force_login(UserFactory())

    async def scenario():
        communicator = WebsocketCommunicator(
            application, "/ws/work/?status=sleeping", headers=session_headers(client)
        )
        await communicator.connect(timeout=5)
        return await communicator.receive_output(timeout=2)

    assert async_to_sync(scenario)() == {"type": "websocket.close", "code": consumers.CLOSE_BAD_REQUEST}


@pytest.mark.django_db(transaction=True)
def test_live_work_list_home_counts_follow_a_parked_work(client, clock, settings):
    settings.CONDUIT_MAX_ATTEMPTS = 1
    client.force_login(UserFactory())
    running = WorkFactory(status="running")
    page = client.get(reverse("console-home")).content.decode()
    assert 'ws-connect="/ws/home/?outbox=' in page
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


@pytest.mark.django_db(transaction=True)
def test_live_work_list_and_home_query_nothing_at_rest_and_once_a_second_at_most(
    client, clock, settings, renders
):
    """At rest a page is told nothing and queries nothing (its banner polls once in 15 s, one
    query); under a stream of changes each page renders at most once a second."""
    client.force_login(UserFactory())
    works = WorkFactory.create_batch(30, status="ready")

    async def scenario(change_for: float):
        pages = [
            WebsocketCommunicator(application, path, headers=session_headers(client))
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
    # A render's queries are fixed: the list's page, total and the pauses in force (its rows read
    # "paused"); the home cards' counts, doctor's checks (live_updates: the web processes'
    # readers, and this one's backlog; the pauses in force twice: Work a pause holds is not
    # waiting for a loop, and the pauses check) and the dead letters. So at most 3 and 17
    # queries a second, none at rest.
    assert max(renders["list"]) <= 3, renders["list"]
    assert max(renders["home"]) <= 17, renders["home"]


async def asyncio_sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)


# --- the Work page's controls ---------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_stale_controls_forms_go_in_the_live_update_when_the_work_ends(client, clock):
    user = UserFactory(is_superuser=True)
    client.force_login(user)
    work = WorkFactory(status="ready")
    page = client.get(reverse("work-detail", args=[work.pk])).content.decode()
    assert 'id="work-send"' in page and 'id="work-rebind"' in page

    html = live(
        client,
        f"/ws/work/{work.pk}/",
        lambda: work_controls.work_cancel(work_id=work.pk, user="bob", clock=clock),
    )[0]
    forms = html[html.index('<div id="work-control-forms" hx-swap-oob="true">') :]
    assert 'id="work-send"' not in forms and 'id="work-rebind"' not in forms
    assert "Cancel Work" not in html[html.index('id="work-control-buttons"') :]


@pytest.mark.django_db(transaction=True)
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


@pytest.mark.django_db(transaction=True)
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

    result = work_controls.work_retry(work_id=work.pk, user="alice", clock=clock)
    assert result.message.startswith(
        f"Work {work.pk} retried by alice: Retry makes its input ready again; its binding 'inbox' only "
        "queues input (it has no executor), so nothing runs until the Work is rebound"
    )
    assert "runs again at once" not in result.message


@pytest.mark.django_db(transaction=True)
def test_retry_message_on_a_binding_with_an_executor_still_runs_at_once(clock, test_handlers):
    apply(clock)
    work = WorkFactory(scope="acme", binding="plain", status="ready", retry_at=clock() + timedelta(seconds=8))
    result = work_controls.work_retry(work_id=work.pk, user="alice", clock=clock)
    assert "it runs again at once" in result.message and result.outlook == ""
