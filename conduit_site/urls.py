"""URL configuration: the console (sessions), the JSON API (tokens) and the admin."""

from django.contrib import admin
from django.urls import include, path

# An unknown URL under /api/ is a JSON 404, like every other answer of the API.
handler404 = "conduit_site.errors.page_not_found"

# SimpleAdminConfig (settings) leaves discovery to the URLconf: commands that never serve a page
# do not import every admin module.
admin.autodiscover()

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("routing.urls_api")),
    path("", include("routing.urls_console")),
]
