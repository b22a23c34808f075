"""Error pages: the JSON API answers an unknown URL in JSON, as every other error of its."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Django's 404 page, or under ``/api/`` a JSON error (``not_found``) like the API's own."""
    if request.path.startswith("/api/"):
        return JsonResponse({"error": "not_found", "message": f"no such URL: {request.path}"}, status=404)
    return defaults.page_not_found(request, exception)
