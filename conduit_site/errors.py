"""Error pages: the JSON API answers an unknown URL in JSON, as every other error of its; with
``DEBUG`` on, Django's debug pages show no secret (:class:`SecretsHiddenFilter`)."""

from __future__ import annotations

import os
import re
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from django.views.debug import SafeExceptionReporterFilter
from django.views.decorators.csrf import csrf_exempt

# A URL with a password in it (``postgres://user:password@host``, ``redis://:password@host``).
URL_WITH_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/@\s]*:[^/@\s]*@")


class SecretsHiddenFilter(SafeExceptionReporterFilter):
    """What Django's debug pages (a 400 for a bad Host header, a 500) show of the settings, the
    request and the stack, with every secret hidden, ``DEBUG`` on or off.

    ``DEBUG`` is on by default on 127.0.0.1, where any local process (a Work's included) is a
    client, so the debug pages must be safe to show to anyone: besides Django's names (``KEY``,
    ``SECRET``, ``TOKEN``, ``PASS``…) it hides the connection URLs (``DATABASE_URL``,
    ``REDIS_URL``, ``CHANNEL_LAYERS``' address), any value holding a URL with a password, every
    variable of the process environment a request carries (a receiver's secret is one), and a
    stack frame's variables named like a secret; and it honours ``sensitive_variables`` and
    ``sensitive_post_parameters`` (the sign-in's password) with ``DEBUG`` on too.
    """

    hidden_settings = re.compile(
        "API|AUTH|TOKEN|KEY|SECRET|PASS|SIGNATURE|HTTP_COOKIE|CREDENTIAL|DSN|DATABASE_URL|REDIS_URL",
        flags=re.IGNORECASE,
    )

    def is_active(self, request: HttpRequest | None) -> bool:
        return True

    def cleanse_setting(self, key: Any, value: Any) -> Any:
        if type(value) is str and URL_WITH_PASSWORD.search(value):
            return self.cleansed_substitute
        return super().cleanse_setting(key, value)

    def get_safe_request_meta(self, request: HttpRequest) -> dict[str, Any]:
        # A WSGI server puts the whole process environment in META beside the headers.
        return {
            key: self.cleansed_substitute if key in os.environ else value
            for key, value in super().get_safe_request_meta(request).items()
        }

    def get_traceback_frame_variables(self, request: HttpRequest | None, tb_frame: Any) -> Any:
        return [
            (name, self.cleanse_setting(name, value))
            for name, value in super().get_traceback_frame_variables(request, tb_frame)
        ]


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
