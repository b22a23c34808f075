"""Websocket consumers: live updates of the console's Work page, Work list, home page, Event
page and Events list.

A consumer accepts only a signed-in user with ``routing.view_event`` (the permission of the
pages it updates), joins the page's group (``infra.live``) and,
on each update, re-renders the same partials the page's HTTP view renders and sends them as
htmx out-of-band swaps (``hx-swap-oob``): HTTP and websocket share one fragment. Updates that
arrive in a burst are coalesced into one render; a list or the home page renders at most once
a second (its queries cost more), and a page at rest, told nothing, queries nothing. Updates
come from this process's reader of the live-update outbox (``conduit_site.live``); on
connect, a page that says the outbox position it was rendered at (``?outbox=``) is sent at once
what changed since.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.contrib.auth.context_processors import PermWrapper
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.datastructures import MultiValueDict

from causal.models import Event
from conduit_site import live
from conduit_site.console.forms import EventFilterForm, WorkDetailForm, WorkFilterForm
from conduit_site.console.views.common import query_string
from conduit_site.console.views.events import DETAIL_PARTIALS as EVENT_DETAIL_PARTIALS
from conduit_site.console.views.events import DETAIL_TEMPLATE as EVENT_TEMPLATE
from conduit_site.console.views.events import (
    LIST_TEMPLATE,
    event_detail_context,
    event_rows_context,
    page_params,
)
from conduit_site.console.views.home import HOME_LIVE_PARTIAL, HOME_TEMPLATE, home_summary_context
from conduit_site.console.views.home import clock as home_clock
from conduit_site.console.views.work import (
    DETAIL_TEMPLATE,
    LIST_LIVE_PARTIAL,
    LIVE_CONTROLS,
    LIVE_FORMS,
    LIVE_PARTIALS,
    work_detail_context,
    work_page_params,
    work_rows_context,
)
from conduit_site.console.views.work import LIST_TEMPLATE as WORK_LIST_TEMPLATE
from infra.converters import MAX_ID
from infra.live import (
    AFTER_PARAM,
    EVENTS_GROUP,
    UPDATE_TYPE,
    WORK_GROUP,
    group_name_for_event,
    group_name_for_work,
)
from routing.access.roles import VIEW_EVENT
from worklife.models import Work
from worklife.selectors import work_get

# Close codes in the application range (4000-4999): the page's script can tell them apart.
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_BAD_REQUEST = 4400


class LiveConsumer(AsyncWebsocketConsumer, metaclass=abc.ABCMeta):
    """Base: authenticate, join one group, coalesce updates, send rendered fragments."""

    # Updates arriving within this many seconds of the first are rendered once.
    coalesce_seconds = 0.2
    # Renders are at least this many seconds apart (a list's or the home page's queries cost
    # more): a first change shows after coalesce_seconds, a stream of them once a second.
    min_interval_seconds = 0.0
    _last_render: float = float("-inf")

    group: str | None = None
    # Groups joined beside the one prepare() names (the home page hears Work and Events).
    also_groups: tuple[str, ...] = ()
    user: Any = None
    _dirty: bool = False
    _flusher: asyncio.Task | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self._refuse(CLOSE_UNAUTHENTICATED)
            return
        if not await database_sync_to_async(user.has_perm)(VIEW_EVENT):
            await self._refuse(CLOSE_FORBIDDEN)
            return
        group, close_code = await self.prepare()
        if group is None:
            await self._refuse(close_code)
            return
        self.group = group
        self.user = user
        for name in (group, *self.also_groups):
            await self.channel_layer.group_add(name, self.channel_name)
        await database_sync_to_async(live.reader.prepare)()
        live.reader.subscribe((group, *self.also_groups), asyncio.get_running_loop())
        await self.accept()
        # The page says the outbox position it was rendered at: what changed since is sent now.
        after = rendered_at(self.scope)
        if after is not None and await database_sync_to_async(live.changed_since)(
            after, (group, *self.also_groups)
        ):
            await self.console_update({"type": UPDATE_TYPE, "group": group, "payload": {"position": after}})

    async def _refuse(self, code: int) -> None:
        """Accept, then close with ``code``: a close before the accept reaches the browser as an
        HTTP 403 with no code at all (the handshake refused), so the page could not tell a
        signed-out operator from a missing Work."""
        await self.accept()
        await self.close(code=code)

    async def disconnect(self, code: int) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        if self.group is not None:
            live.reader.unsubscribe((self.group, *self.also_groups))
            for name in (self.group, *self.also_groups):
                await self.channel_layer.group_discard(name, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """The page sends nothing we act on; incoming frames are ignored."""

    async def console_update(self, message: dict[str, Any]) -> None:
        """A ``console.update`` group message: re-render soon (coalesced)."""
        self._dirty = True
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())

    async def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        while self._dirty:
            next_allowed = self._last_render + self.min_interval_seconds - loop.time()
            await asyncio.sleep(max(self.coalesce_seconds, next_allowed))
            self._dirty = False
            html = await database_sync_to_async(self.render)()
            self._last_render = loop.time()
            if html:
                await self.send(text_data=html)

    @abc.abstractmethod
    async def prepare(self) -> tuple[str | None, int]:
        """The group to join, or ``(None, close_code)`` to refuse the connection."""

    @abc.abstractmethod
    def render(self) -> str:
        """The out-of-band fragments to send (runs in a thread; may read the database)."""

    def base_context(self, page_path: str) -> dict[str, Any]:
        """What a template rendered over the socket knows in place of a request: the user,
        their permissions and the page the fragment goes to (``return_to``)."""
        return {"oob": True, "user": self.user, "perms": PermWrapper(self.user), "return_to": page_path}


class WorkConsumer(LiveConsumer):
    """``ws/work/<id>/?input_after=…``: the Work page's state, engine, unrouted input, input
    and history, on the pages (and in the input order) the page shows, and its control buttons."""

    work_id: int = 0
    cursors: dict[str, Any] | None = None

    async def prepare(self) -> tuple[str | None, int]:
        self.work_id = int(self.scope["url_route"]["kwargs"]["work_id"])
        form = WorkDetailForm(query_params(self.scope))
        if not form.is_valid():
            return None, CLOSE_BAD_REQUEST
        self.cursors = form.cursors()
        exists = await database_sync_to_async(Work.objects.filter(pk=self.work_id).exists)()
        if not exists:
            return None, CLOSE_NOT_FOUND
        return group_name_for_work(self.work_id), 0

    def render(self) -> str:
        try:
            work = work_get(self.work_id)
        except Work.DoesNotExist:
            return ""
        cursors = self.cursors or {}
        context = work_detail_context(work, LIVE_PARTIALS, cursors)
        context.update(self.base_context(reverse("work-detail", args=[work.pk]) + query_string(cursors)))
        partials = [render_to_string(f"{DETAIL_TEMPLATE}#{name}", context) for name in LIVE_PARTIALS]
        partials.append(render_to_string(LIVE_CONTROLS, context))
        if work.is_terminal:
            # Send input and Rebind go once the Work ends. While it lives they are left alone:
            # swapping them would drop what the operator is typing.
            partials.append(render_to_string(LIVE_FORMS, context))
        return "".join(partials)


class WorkListConsumer(LiveConsumer):
    """``ws/work/?scope=&status=&binding=&key=&before=``: the Work list's rows, with the list's
    filters and on the list's page, as Work is created and changes state."""

    min_interval_seconds = 1.0
    form: WorkFilterForm | None = None

    async def prepare(self) -> tuple[str | None, int]:
        form = WorkFilterForm(query_params(self.scope))
        if not await database_sync_to_async(form.is_valid)():
            return None, CLOSE_BAD_REQUEST
        self.form = form
        return WORK_GROUP, 0

    def render(self) -> str:
        if self.form is None:  # not connected (prepare() refused it): nothing to show
            return ""
        filters, cursor, oldest = self.form.filters(), self.form.cursor(), self.form.oldest_first()
        context = work_rows_context(filters, cursor=cursor, oldest=oldest)
        page = reverse("work-list") + query_string(work_page_params(filters, cursor=cursor, oldest=oldest))
        context.update(self.base_context(page))
        return render_to_string(f"{WORK_LIST_TEMPLATE}#{LIST_LIVE_PARTIAL}", context)


class HomeConsumer(LiveConsumer):
    """``ws/home/``: the home page's cards (unrouted Events, Work by state, parked Work, dead
    letters, doctor's warnings) as Work changes and Events are accepted and routed."""

    min_interval_seconds = 1.0
    also_groups = (EVENTS_GROUP,)

    async def prepare(self) -> tuple[str | None, int]:
        return WORK_GROUP, 0

    def render(self) -> str:
        context = home_summary_context(home_clock())
        context.update(self.base_context(reverse("console-home")))
        return render_to_string(f"{HOME_TEMPLATE}#{HOME_LIVE_PARTIAL}", context)


class EventsConsumer(LiveConsumer):
    """``ws/events/?scope=&type=&route_state=…&before=``: the Events list's rows, with the
    list's filters and on the list's page (a later page stays live too)."""

    form: EventFilterForm | None = None

    async def prepare(self) -> tuple[str | None, int]:
        form = EventFilterForm(query_params(self.scope))
        if not await database_sync_to_async(form.is_valid)():
            return None, CLOSE_BAD_REQUEST
        self.form = form
        return EVENTS_GROUP, 0

    def render(self) -> str:
        if self.form is None:  # not connected (prepare() refused it): nothing to show
            return ""
        filters = self.form.filters()
        context = event_rows_context(filters)
        context.update(self.base_context(reverse("event-list") + query_string(page_params(filters))))
        return render_to_string(f"{LIST_TEMPLATE}#event-rows", context)


class EventConsumer(LiveConsumer):
    """``ws/events/<seq>/``: the Event page's heading, state, route and causal chain, as the
    router routes the Event and operators skip or reroute it."""

    seq: int = 0

    async def prepare(self) -> tuple[str | None, int]:
        self.seq = int(self.scope["url_route"]["kwargs"]["seq"])
        if not 1 <= self.seq <= MAX_ID:
            return None, CLOSE_NOT_FOUND
        exists = await database_sync_to_async(Event.objects.filter(seq=self.seq).exists)()
        if not exists:
            return None, CLOSE_NOT_FOUND
        return group_name_for_event(self.seq), 0

    def render(self) -> str:
        try:
            context = event_detail_context(self.seq)
        except Event.DoesNotExist:
            return ""
        context.update(self.base_context(reverse("event-detail", args=[self.seq])))
        return "".join(
            render_to_string(f"{EVENT_TEMPLATE}#{name}", context) for name in EVENT_DETAIL_PARTIALS
        )


def query_params(scope: dict[str, Any]) -> MultiValueDict:
    """The websocket request's query string, as a form reads ``request.GET``."""
    return MultiValueDict(parse_qs(scope.get("query_string", b"").decode("latin-1")))


def rendered_at(scope: dict[str, Any]) -> int | None:
    """The outbox position the page was rendered at (``?outbox=``), or ``None`` when the socket
    does not say (or says something else than a position)."""
    value = query_params(scope).get(AFTER_PARAM, "")
    return int(value) if value.isdigit() and len(value) <= 19 else None
