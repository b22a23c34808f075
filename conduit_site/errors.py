"""Error pages: the JSON API answers an unknown URL in JSON, as every other error of its."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt


@csrf_exempt  # as for an unresolved URL: a POST to nowhere is a 404, never a CSRF 403
def api_not_found(request: HttpRequest, path: str = "") -> JsonResponse:
    """The API's answer to an unknown URL under ``/api/``: a JSON error (``not_found``).

    Routed as the last pattern under ``/api/`` as well as reached from :func:`page_not_found`,
    so that it holds with ``DEBUG`` on too, where Django answers a 404 with its HTML debug page.
    """
    return JsonResponse({"error": "not_found", "message": f"no such URL: {request.path}"}, status=404)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """The console's 404 page (``templates/404.html``), or under ``/api/`` a JSON error like the
    API's own. With ``DEBUG`` on (development) Django shows its debug 404 page instead."""
    if request.path.startswith("/api/"):
        return api_not_found(request)
    return defaults.page_not_found(request, exception)
