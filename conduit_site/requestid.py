"""A request id for every web request: the client's ``X-Request-ID`` when it sends a usable one
(a proxy's, a sender's), else a new one; returned in the answer's ``X-Request-ID`` and carried
as ``request_id`` by every log line written while the request is answered
(:class:`conduit_site.logformat.RequestIdFilter`), so a sender's failed call can be found in the
logs by the id it got back."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable

from django.http import HttpRequest, HttpResponseBase

from conduit_site.logformat import request_id

HEADER = "X-Request-ID"
# What an id taken from a client may hold: no spaces, quotes or line breaks (it is written
# into log lines and a header), at most 128 characters. Anything else is replaced.
_USABLE = re.compile(r"[A-Za-z0-9._:/+=@-]{1,128}")


def request_id_of(request: HttpRequest) -> str:
    """The id of ``request``: its ``X-Request-ID`` if usable, else a new random one."""
    offered = request.headers.get(HEADER, "")
    if _USABLE.fullmatch(offered):
        return offered
    return uuid.uuid4().hex


class RequestIdMiddleware:
    """Sets ``request.request_id`` and the log context, and ``X-Request-ID`` on the answer."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        request.request_id = request_id_of(request)
        token = request_id.set(request.request_id)
        try:
            response = self.get_response(request)
        finally:
            request_id.reset(token)
        response[HEADER] = request.request_id
        return response
