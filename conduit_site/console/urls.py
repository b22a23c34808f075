"""The console (session-authenticated pages)."""

from django.urls import path

from conduit_site.console.views import (
    auth,
    causal,
    config,
    controls,
    dead_letters,
    doctor,
    events,
    flow,
    home,
    impact,
    jobs,
    receivers,
    replay,
    setup,
    trace,
    work,
    work_bulk,
    work_controls,
)
from infra.converters import register_id_converter

register_id_converter()

urlpatterns = [
    path("", home.home, name="console-home"),
    path("login/", auth.ConsoleLoginView.as_view(), name="login"),
    path("logout/", auth.ConsoleLogoutView.as_view(), name="logout"),
    path("events/", events.event_list, name="event-list"),
    path("events/<id:seq>/", events.event_detail, name="event-detail"),
    path("events/<id:seq>/skip/", controls.event_skip_view, name="event-skip"),
    path("events/<id:seq>/reroute/", controls.event_reroute_view, name="event-reroute"),
    path("events/<id:seq>/replay/", controls.event_replay_view, name="event-replay"),
    path("events/replay/", replay.events_replay_view, name="events-replay"),
    path("dead-letters/", dead_letters.dead_letters, name="dead-letters"),
    path("dead-letters/reroute/", dead_letters.dead_letters_reroute_view, name="dead-letters-reroute"),
    path("doctor/", doctor.doctor_page, name="doctor"),
    path("doctor/banner/", doctor.console_health, name="console-health"),
    path("work/", work.work_list, name="work-list"),
    path("work/<id:work_id>/", work.work_detail, name="work-detail"),
    path("work/new/", work_controls.work_create_view, name="work-create"),
    path("work/bulk/", work_bulk.work_bulk_view, name="work-bulk"),
    path("jobs/<id:job_id>/", jobs.job_detail, name="job-detail"),
    path("jobs/<id:job_id>/cancel/", jobs.job_cancel, name="job-cancel"),
    path("work/<id:work_id>/cancel/", work_controls.work_cancel_view, name="work-cancel"),
    path("work/<id:work_id>/retry/", work_controls.work_retry_view, name="work-retry"),
    path("work/<id:work_id>/send/", work_controls.work_send_view, name="work-send"),
    path("work/<id:work_id>/rebind/", work_controls.work_rebind_view, name="work-rebind"),
    path("config/", config.config_list, name="config-list"),
    path("config/setup/", setup.setup_page, name="setup"),
    path("config/setup/check/", setup.setup_check, name="setup-check"),
    path("config/candidates/", setup.candidate_create, name="candidate-create"),
    path("config/candidates/<id:candidate_id>/", setup.candidate_detail, name="candidate-detail"),
    path("config/candidates/<id:candidate_id>/trace/", setup.candidate_trace, name="candidate-trace"),
    path("config/candidates/<id:candidate_id>/impact/", setup.candidate_impact, name="candidate-impact"),
    path("config/impact/<id:run_id>/", impact.impact_run_view, name="impact-run"),
    path("config/candidates/<id:candidate_id>/apply/", setup.candidate_apply_view, name="candidate-apply"),
    path(
        "config/candidates/<id:candidate_id>/discard/", setup.candidate_discard_view, name="candidate-discard"
    ),
    path("trace/", trace.trace_page, name="trace"),
    path("flow/", flow.flow_page, name="flow"),
    path("flow/pause/", flow.flow_pause, name="flow-pause"),
    path("flow/resume/", flow.flow_resume, name="flow-resume"),
    path("flow/fire/", flow.flow_fire, name="flow-fire"),
    path("receivers/", receivers.receivers_page, name="receivers"),
    path("causal/<id:seq>/", causal.causal_root, name="causal-root"),
    path("causal/diagnostics/", causal.causal_diagnostics, name="causal-diagnostics"),
]
