"""The JSON API (token-authenticated), mounted under ``/api/``.

Every route here is an :func:`routing.api_auth.api_view` and is described in
``routing/openapi.py`` (a test walks these patterns and fails for any missing route or method).
"""

from django.urls import path

from routing import api, api_controls, api_setup, api_work
from routing.converters import register_id_converter

register_id_converter()

urlpatterns = [
    path("events", api.events_accept, name="api-events"),
    path("events/<id:seq>", api.event_detail, name="api-event-detail"),
    path("events/<id:seq>/skip", api_controls.event_skip, name="api-event-skip"),
    path("events/<id:seq>/reroute", api_controls.event_reroute, name="api-event-reroute"),
    path("doctor", api_controls.doctor_report, name="api-doctor"),
    path("events/<id:seq>/route", api.event_route, name="api-event-route"),
    path("trace", api.trace_event, name="api-trace"),
    path("candidates", api_setup.candidates, name="api-candidates"),
    path("candidates/<id:candidate_id>", api_setup.candidate_detail, name="api-candidate-detail"),
    path("candidates/<id:candidate_id>/impact", api_setup.candidate_impact, name="api-candidate-impact"),
    path(
        "candidates/<id:candidate_id>/apply", api_setup.candidate_apply_endpoint, name="api-candidate-apply"
    ),
    path(
        "candidates/<id:candidate_id>/discard",
        api_setup.candidate_discard_endpoint,
        name="api-candidate-discard",
    ),
    path("work", api_work.work_collection, name="api-work"),
    path("work/<id:work_id>", api_work.work_detail, name="api-work-detail"),
    path("work/<id:work_id>/cancel", api_work.work_cancel, name="api-work-cancel"),
    path("work/<id:work_id>/retry", api_work.work_retry, name="api-work-retry"),
    path("work/<id:work_id>/send", api_work.work_send, name="api-work-send"),
    path("work/<id:work_id>/rebind", api_work.work_rebind, name="api-work-rebind"),
    path("openapi.json", api.openapi_json, name="api-openapi"),
]
