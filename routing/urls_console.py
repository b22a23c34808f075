"""The console (session-authenticated pages)."""

from django.urls import path

from routing.views import auth, causal, config, events, home, work

urlpatterns = [
    path("", home.home, name="console-home"),
    path("login/", auth.ConsoleLoginView.as_view(), name="login"),
    path("logout/", auth.ConsoleLogoutView.as_view(), name="logout"),
    path("events/", events.event_list, name="event-list"),
    path("events/<int:seq>/", events.event_detail, name="event-detail"),
    path("work/", work.work_list, name="work-list"),
    path("work/<int:work_id>/", work.work_detail, name="work-detail"),
    path("config/", config.config_list, name="config-list"),
    path("causal/<int:seq>/", causal.causal_root, name="causal-root"),
    path("causal/diagnostics/", causal.causal_diagnostics, name="causal-diagnostics"),
]
