"""Response headers the console adds beyond Django's security middleware.

- :class:`NoStoreMiddleware`: ``Cache-Control: no-store`` on every page and API answer. They show
  Events, Work input and output, traces and dead letters, which no browser or proxy cache should
  keep; the few pages without payloads gain nothing from a cache either. A view that sets its
  own ``Cache-Control`` keeps it.
- :class:`StaticFilesHandler`: the console's static files (served by the ASGI app itself, outside
  the middleware) with ``X-Content-Type-Options: nosniff`` like every other answer.
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.http import HttpRequest, HttpResponseBase
from django.utils.cache import patch_cache_control


class NoStoreMiddleware:
    """``Cache-Control: no-store`` on every response that does not set its own."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        if not response.has_header("Cache-Control"):
            patch_cache_control(response, no_store=True)
        return response


def add_static_headers(response: HttpResponseBase) -> HttpResponseBase:
    """The headers of a static file's answer (and its 404)."""
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    return response


class StaticFilesHandler(ASGIStaticFilesHandler):
    """Django's ASGI static files handler, with :func:`add_static_headers`."""

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        return add_static_headers(await super().get_response_async(request))
