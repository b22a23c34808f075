"""URL configuration: the console (sessions), the JSON API (tokens), the receivers' webhooks
(signatures), the API's documentation page and the admin."""

from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path, re_path
from django.views.generic import RedirectView

from conduit_site.api import hooks
from conduit_site.console.views import api_docs
from conduit_site.errors import api_not_found


class FaviconRedirect(RedirectView):
    """To the favicon's static URL, read per request: in production its name carries a hash
    from collectstatic's manifest, which need not exist when the URLconf loads."""

    permanent = True

    def get_redirect_url(self, *args, **kwargs) -> str:
        return static("favicon.ico")


# An unknown URL under /api/ is a JSON 404, like every other answer of the API.
handler404 = "conduit_site.errors.page_not_found"

# SimpleAdminConfig (settings) leaves discovery to the URLconf: commands that never serve a page
# do not import every admin module.
admin.autodiscover()

urlpatterns = [
    path("admin/", admin.site.urls),
    # The API's documentation is a page, not an endpoint of the API (nor of its OpenAPI document).
    path("api/docs/", api_docs.api_docs, name="api-docs"),
    path("api/docs", RedirectView.as_view(pattern_name="api-docs", permanent=True)),
    path("api/", include("conduit_site.api.urls")),
    # Any rest, a newline in it too (``.`` would stop there and leave Django's debug page).
    re_path(r"^api/(?P<path>[\s\S]*)$", api_not_found),
    # Real senders' webhooks: each receiver of the live configuration authenticates its own (a
    # signature, not a token). A trailing slash some senders add is taken too.
    re_path(r"^hooks/(?P<name>[^/]+)/?$", hooks.receive, name="hook"),
    re_path(r"^hooks/(?P<path>[\s\S]*)$", api_not_found),
    # Browsers and the admin's pages ask for /favicon.ico; the console's pages link it.
    path("favicon.ico", FaviconRedirect.as_view()),
    path("", include("conduit_site.console.urls")),
]
