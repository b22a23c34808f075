"""The JSON API (token-authenticated)."""

urlpatterns: list = []
