"""The console's websocket routes are the paths ``infra.live`` declares, and the paths the pages
connect to resolve to them."""

from __future__ import annotations

from django.urls.resolvers import RegexPattern, URLResolver

from conduit_site.ws_urls import websocket_urlpatterns
from infra.live import HOME_WS_PATH, WS_ROUTES, event_ws_path, events_ws_path, work_ws_list_path, work_ws_path


def test_the_site_routes_every_declared_websocket_path_by_its_name():
    assert {p.name: str(p.pattern) for p in websocket_urlpatterns} == WS_ROUTES


def test_the_paths_pages_connect_to_match_the_declared_routes():
    resolver = URLResolver(RegexPattern(r"^/"), websocket_urlpatterns)
    for path, name, kwargs in (
        (HOME_WS_PATH, "ws-home", {}),
        (work_ws_list_path({"status": "parked"}).partition("?")[0], "ws-work-list", {}),
        (work_ws_path(7), "ws-work", {"work_id": 7}),
        (events_ws_path().partition("?")[0], "ws-events", {}),
        (event_ws_path(9), "ws-event", {"seq": 9}),
    ):
        match = resolver.resolve(path)
        assert (match.url_name, match.kwargs) == (name, kwargs)
    assert work_ws_path(7) == "/ws/work/7/" and event_ws_path(9) == "/ws/events/9/"
    assert events_ws_path({"scope": "acme", "type": ""}) == "/ws/events/?scope=acme"
