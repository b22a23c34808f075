"""A request id for every web request: the client's ``X-Request-ID`` when it sends a usable one
(a proxy's, a sender's), else a new one; returned in the answer's ``X-Request-ID`` and carried
as ``request_id`` by every log line written while the request is answered
(:class:`conduit_site.logformat.RequestIdFilter`), so a sender's failed call can be found in the
logs by the id it got back. A request carrying an Event's W3C ``traceparent`` (the header, a
binary-mode ``ce-traceparent``, or a structured Event's attribute) has its lines carry
``trace_id`` and ``span_id``, and the answer echoes it in ``traceresponse``."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable

from django.http import HttpRequest, HttpResponseBase

from conduit_site.logformat import request_id, trace_context, trace_fields

HEADER = "X-Request-ID"
# The W3C trace context of the Event a request carries: the header, or a binary-mode Event's.
TRACE_HEADERS = ("traceparent", "ce-traceparent")
# The answer's echo of it (W3C Trace Context Level 2), which the access log line reads.
TRACE_RESPONSE_HEADER = "traceresponse"
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
        request.traceparent = next(
            (value for name in TRACE_HEADERS if trace_fields(value := request.headers.get(name, ""))), ""
        )
        token = request_id.set(request.request_id)
        trace_token = trace_context.set(request.traceparent)
        try:
            response = self.get_response(request)
            # A structured Event's traceparent, set while the API read it.
            request.traceparent = trace_context.get()
        finally:
            trace_context.reset(trace_token)
            request_id.reset(token)
        response[HEADER] = request.request_id
        if request.traceparent and TRACE_RESPONSE_HEADER not in response:
            response[TRACE_RESPONSE_HEADER] = request.traceparent
        return response
