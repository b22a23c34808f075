"""URL configuration: the console (sessions), the JSON API (tokens) and the admin."""

from django.contrib import admin
from django.urls import include, path

from routing.views import api_docs

# An unknown URL under /api/ is a JSON 404, like every other answer of the API.
handler404 = "conduit_site.errors.page_not_found"

urlpatterns = [
    path("admin/", admin.site.urls),
    # The API's documentation is a page, not an endpoint of the API (nor of its OpenAPI document).
    path("api/docs/", api_docs.api_docs, name="api-docs"),
    path("api/", include("routing.urls_api")),
    path("", include("routing.urls_console")),
]
