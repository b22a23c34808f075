"""The JSON API (token-authenticated), mounted under ``/api/``.

Every route here is an :func:`conduit_site.api.auth.api_view` and is described in the OpenAPI
document, ``conduit_site/api/openapi/`` (a test walks these patterns and fails for any missing
route or method).
"""

from django.urls import path

from conduit_site.api import controls, events, flow, setup, work
from infra.converters import register_id_converter

register_id_converter()

urlpatterns = [
    path("events", events.events_collection, name="api-events"),
    path("events/replay", controls.events_replay_view, name="api-events-replay"),
    path("events/<id:seq>", events.event_detail, name="api-event-detail"),
    path("events/<id:seq>/skip", controls.event_skip_view, name="api-event-skip"),
    path("events/<id:seq>/reroute", controls.event_reroute_view, name="api-event-reroute"),
    path("events/<id:seq>/replay", controls.event_replay_view, name="api-event-replay"),
    path("doctor", controls.doctor_report, name="api-doctor"),
    path("events/<id:seq>/route", events.event_route, name="api-event-route"),
    path("trace", events.trace_event, name="api-trace"),
    path("candidates", setup.candidates, name="api-candidates"),
    path("candidates/<id:candidate_id>", setup.candidate_detail, name="api-candidate-detail"),
    path("candidates/<id:candidate_id>/impact", setup.candidate_impact, name="api-candidate-impact"),
    path("impact/<id:run_id>", setup.impact_job, name="api-impact-job"),
    path("candidates/<id:candidate_id>/apply", setup.candidate_apply_endpoint, name="api-candidate-apply"),
    path(
        "candidates/<id:candidate_id>/discard",
        setup.candidate_discard_endpoint,
        name="api-candidate-discard",
    ),
    path("work", work.work_collection, name="api-work"),
    path("work/bulk", work.work_bulk_view, name="api-work-bulk"),
    path("jobs/<id:job_id>", work.job_detail, name="api-job-detail"),
    path("jobs/<id:job_id>/cancel", work.job_cancel, name="api-job-cancel"),
    path("work/<id:work_id>", work.work_detail, name="api-work-detail"),
    path("work/<id:work_id>/cancel", work.work_cancel_view, name="api-work-cancel"),
    path("work/<id:work_id>/retry", work.work_retry_view, name="api-work-retry"),
    path("work/<id:work_id>/send", work.work_send_view, name="api-work-send"),
    path("work/<id:work_id>/rebind", work.work_rebind_view, name="api-work-rebind"),
    path("pauses", flow.pauses_collection, name="api-pauses"),
    path("pauses/resume", flow.pauses_resume, name="api-pauses-resume"),
    path("schedules", flow.schedules_collection, name="api-schedules"),
    path("schedules/fire", flow.schedules_fire, name="api-schedules-fire"),
    path("openapi.json", events.openapi_json, name="api-openapi"),
]
