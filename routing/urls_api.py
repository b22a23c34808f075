"""The JSON API (token-authenticated), mounted under ``/api/``.

Every route here is an :func:`routing.api_auth.api_view` and is described in
``routing/openapi.py`` (a test walks these patterns and fails for any missing route or method).
"""

from django.urls import path

from routing import api, api_controls

urlpatterns = [
    path("events", api.events_accept, name="api-events"),
    path("events/<int:seq>", api.event_detail, name="api-event-detail"),
    path("events/<int:seq>/skip", api_controls.event_skip, name="api-event-skip"),
    path("events/<int:seq>/reroute", api_controls.event_reroute, name="api-event-reroute"),
    path("doctor", api_controls.doctor_report, name="api-doctor"),
    path("events/<int:seq>/route", api.event_route, name="api-event-route"),
    path("trace", api.trace_event, name="api-trace"),
    path("openapi.json", api.openapi_json, name="api-openapi"),
]
