"""Websocket routes: live updates of the console's pages, at the paths ``infra.live`` declares
(``ws/home/``, ``ws/work/``, ``ws/work/<id>/``, ``ws/events/``, ``ws/events/<seq>/``)."""

from __future__ import annotations

from django.urls import path

from conduit_site.console.consumers import (
    EventConsumer,
    EventsConsumer,
    HomeConsumer,
    WorkConsumer,
    WorkListConsumer,
)
from infra.live import WS_ROUTES

CONSUMERS = {
    "ws-home": HomeConsumer,
    "ws-work-list": WorkListConsumer,
    "ws-work": WorkConsumer,
    "ws-events": EventsConsumer,
    "ws-event": EventConsumer,
}

websocket_urlpatterns = [
    path(route, CONSUMERS[name].as_asgi(), name=name) for name, route in WS_ROUTES.items()
]
