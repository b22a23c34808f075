"""Websocket routes."""

websocket_urlpatterns: list = []
