"""URL configuration: the console (sessions), the JSON API (tokens) and the admin."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("routing.urls_api")),
    path("", include("routing.urls_console")),
]
