"""The API's documentation page: Swagger UI over ``/api/openapi.json``.

Swagger UI's build comes from the ``drf-spectacular-sidecar`` package (an installed app for its
static files only: the project does not use Django REST framework), so nothing is fetched from a
CDN. Public, like the schema it renders: it describes the API and holds no data.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET


@require_GET
def api_docs(request: HttpRequest) -> HttpResponse:
    """Swagger UI showing every operation of the JSON API."""
    return render(request, "routing/api_docs.html", {"section": "api-docs"})
