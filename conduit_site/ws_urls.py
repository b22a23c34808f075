"""Websocket routes: live updates of the console's pages (``ws/home/``, ``ws/work/``,
``ws/work/<id>/``, ``ws/events/``, ``ws/events/<seq>/``)."""

from __future__ import annotations

from django.urls import path

from conduit_site.console.consumers import (
    EventConsumer,
    EventsConsumer,
    HomeConsumer,
    WorkConsumer,
    WorkListConsumer,
)

websocket_urlpatterns = [
    path("ws/home/", HomeConsumer.as_asgi(), name="ws-home"),
    path("ws/work/", WorkListConsumer.as_asgi(), name="ws-work-list"),
    path("ws/work/<int:work_id>/", WorkConsumer.as_asgi(), name="ws-work"),
    path("ws/events/", EventsConsumer.as_asgi(), name="ws-events"),
    path("ws/events/<int:seq>/", EventConsumer.as_asgi(), name="ws-event"),
]
