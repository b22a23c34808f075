"""The console (session-authenticated pages)."""

urlpatterns: list = []
