"""Websocket routes: live updates of the console's pages (``ws/work/<id>/``, ``ws/events/``,
``ws/events/<seq>/``)."""

from __future__ import annotations

from django.urls import path

from conduit_site.console.consumers import EventConsumer, EventsConsumer, WorkConsumer

websocket_urlpatterns = [
    path("ws/work/<int:work_id>/", WorkConsumer.as_asgi(), name="ws-work"),
    path("ws/events/", EventsConsumer.as_asgi(), name="ws-events"),
    path("ws/events/<int:seq>/", EventConsumer.as_asgi(), name="ws-event"),
]
