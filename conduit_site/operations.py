"""The endpoints of the machines that watch Conduit: ``GET /healthz`` (liveness), ``GET /readyz``
(readiness) and ``GET /metrics`` (Prometheus), answered by :class:`OperationsMiddleware`
before the rest of the middleware.

Probes and scrapers reach a web process by its address, over plain HTTP, with no session: so
these answers skip the host check (``ALLOWED_HOSTS``; nothing in them depends on the host), the
HTTPS redirect, sessions, CSRF, the login and axes. Each is ``Cache-Control: no-store`` and
``nosniff``.

- ``/healthz``: 200 ``{"status": "ok"}`` whenever the process answers; no database.
- ``/readyz``: 200 ``{"status": "ready", "checks": [...]}`` when every check of
  :mod:`conduit_site.health` passes, else 503 ``{"status": "unready", ...}`` naming the failing
  ones; ``?exclude=work_loop`` (comma-separated, or repeated) leaves checks out.
- ``/metrics``: the text exposition of :mod:`conduit_site.metrics` when ``CONDUIT_METRICS`` is on
  (else a 404, as for any unknown address), behind ``Authorization: Bearer
  <CONDUIT_METRICS_TOKEN>`` when that is set (401 otherwise). Only the exact path ``/metrics``
  (after percent-decoding) is the exposition; ``/metrics/``, ``//metrics`` and every other
  spelling are a 404, so that a proxy that hides ``/metrics`` hides it whole.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse

from causal.clock import system_clock
from conduit_site import health
from conduit_site.metrics import authorized, exposition


def healthz(request: HttpRequest) -> HttpResponse:
    """The process answers: nothing else is checked."""
    return JsonResponse({"status": "ok"})


def readyz(request: HttpRequest) -> HttpResponse:
    """Every readiness check's verdict; 503 when one fails."""
    exclude = frozenset(
        name.strip() for value in request.GET.getlist("exclude") for name in value.split(",") if name.strip()
    )
    unknown = sorted(exclude - set(health.CHECKS))
    if unknown:
        return JsonResponse(
            {"error": f"unknown check {', '.join(unknown)}: the checks are {', '.join(health.CHECKS)}"},
            status=400,
        )
    checks = health.readiness(now=system_clock(), exclude=exclude)
    ready = all(check.ok for check in checks)
    return JsonResponse(
        {"status": "ready" if ready else "unready", "checks": [check.as_dict() for check in checks]},
        status=200 if ready else 503,
    )


def metrics(request: HttpRequest) -> HttpResponse:
    """The Prometheus text exposition, for a scrape that may read it."""
    if not authorized(request.headers.get("Authorization", "")):
        response = JsonResponse(
            {"error": "send the metrics token: Authorization: Bearer <token>"}, status=401
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    body, content_type = exposition(request.headers.get("Accept", ""))
    return HttpResponse(body, content_type=content_type)


ENDPOINTS: dict[str, Callable[[HttpRequest], HttpResponse]] = {
    "/healthz": healthz,
    "/readyz": readyz,
    "/metrics": metrics,
}


class OperationsMiddleware:
    """Answers :data:`ENDPOINTS` itself; passes every other request on (and ``/metrics`` too
    while metrics are off, so that it is a 404 like any unknown address)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        view = ENDPOINTS.get(request.path_info.rstrip("/") or "/")
        if view is metrics and (not settings.CONDUIT_METRICS or request.path != "/metrics"):
            # The full path, not path_info: a client's Daphne-Root-Path header moves path_info.
            view = None
        if view is None:
            return self.get_response(request)
        if request.method not in ("GET", "HEAD"):
            response = JsonResponse({"error": f"{request.method} is not allowed here: use GET"}, status=405)
            response["Allow"] = "GET, HEAD"
        else:
            response = view(request)
        response["Cache-Control"] = "no-store"
        response["X-Content-Type-Options"] = "nosniff"
        return response
