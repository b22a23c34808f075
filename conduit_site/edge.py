"""The web server as ``manage.py serve`` runs it: daphne, with request bodies bounded before they
are buffered.

    python -m conduit_site.edge <daphne's arguments> conduit_site.asgi:application

Daphne (Twisted's HTTP/1.1 parser) reads a request's whole body, into memory or a temporary
file, before the ASGI application sees the request, and then hands it over in one piece: a
declared ``Content-Length: 1000000000`` grew a web process by a gigabyte before Django's size
check could run. Here the request class daphne builds (:class:`EdgeRequest`) checks each request
when its headers are complete, before any byte of its body is read:

- a declared ``Content-Length`` over the path's limit is answered ``413`` at once and the
  connection closed (after a short linger that drops what is still sent); a chunked body is
  counted as it arrives and cut off the same way as it
  passes the limit. The limits: ``CONDUIT_MAX_RECEIVER_BODY_BYTES`` for the receivers
  (``/hooks/…``), ``CONDUIT_MAX_API_BODY_BYTES`` for the API (``/api/…``) and
  ``DATA_UPLOAD_MAX_MEMORY_SIZE`` for every other path (the console's forms);
- a request to the API that carries a body must bear a live API token: without an
  ``Authorization: Bearer`` header or with a malformed one it is answered ``401`` at once; a
  well-formed token is looked up (in a thread, reading stops meanwhile) before the body is read.
  A token found live is remembered for :data:`LIVE_TOKEN_SECONDS`; the API authenticates every
  request itself as before.

Each connection is held to time and number limits too (:class:`EdgeChannel`,
:class:`EdgeHTTPFactory`):

- a request's headers, and its body when it has one, must have arrived whole within
  ``CONDUIT_HEADER_TIMEOUT`` seconds of its first byte, however steadily they trickle in; past
  that the client is answered ``408`` and the connection closed;
- a kept-alive connection with no request in flight is closed after ``CONDUIT_IDLE_TIMEOUT``
  seconds without a byte (Twisted's own idle timeout, which daphne left at 60 s);
- once ``CONDUIT_MAX_CONNECTIONS`` connections are open (websockets included, until they
  close), a new one is answered ``503`` with ``Retry-After`` and closed, unread.

Django's own checks (``DATA_UPLOAD_MAX_MEMORY_SIZE``, ``CONDUIT_MAX_EVENT_BYTES``, the API's
authentication) stay as a second line behind this one.

Written against daphne 4.2.3 and Twisted 26.10: it overrides ``Request.gotLength`` (called by
``HTTPChannel.allHeadersReceived`` once the headers are parsed, before the body and before the
``100 Continue``), ``Request.handleContentChunk`` (each piece of the body, chunked or not) and
``Request.requestReceived``, subclasses ``HTTPChannel`` (``dataReceived``,
``allContentReceived``, ``timeOut`` and ``timeoutConnection``), wraps each connection in a
``ProtocolWrapper`` (which daphne's websocket upgrade already handles, as for TLS), reads ``HTTPChannel._path`` (the request target) and pauses reading
through ``HTTPChannel._networkProducer``; daphne's ``Server.run`` builds its ``HTTPFactory`` by
the name in ``daphne.server``, which :func:`install` replaces. HTTP/2 (a Twisted extra, not
installed) would bypass it. ``tests/conduit_site/test_edge.py`` fails if a declared body is no
longer refused before it is sent, as after an upgrade that renames one of these.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from urllib.parse import unquote

import daphne.server  # first: it installs the asyncio reactor
from daphne import cli as daphne_cli
from daphne.cli import CommandLineInterface
from daphne.http_protocol import HTTPFactory, WebRequest
from django.conf import settings
from twisted.internet import reactor
from twisted.internet.protocol import Protocol
from twisted.internet.threads import deferToThread
from twisted.protocols.policies import ProtocolWrapper
from twisted.web.http import HTTPChannel

from conduit_site.logformat import json_logs, trace_fields
from routing.access.tokens import token_digest, token_well_formed

RECEIVER_PREFIX = "/hooks/"
API_PREFIX = "/api/"
REALM = "conduit"
# How long a token found live lets bodies through without another lookup; the API still
# authenticates each request, so a token revoked meanwhile gets its 401 there.
LIVE_TOKEN_SECONDS = 30.0
LIVE_TOKENS_KEPT = 4096
REASONS = {
    401: b"Unauthorized",
    408: b"Request Timeout",
    413: b"Content Too Large",
    503: b"Service Unavailable",
}
# How long a refused connection (over CONDUIT_MAX_CONNECTIONS, or a request refused before its
# body) is kept for its answer to reach the client before it is cut, and how long the client is told to wait before trying again.
REFUSAL_LINGER_SECONDS = 2.0
RETRY_AFTER_SECONDS = 5

_live_tokens: dict[str, float] = {}


def body_limit(path: str) -> tuple[int, str]:
    """The most bytes a request body to ``path`` may have, and the setting that says so."""
    if path.startswith(RECEIVER_PREFIX):
        return settings.CONDUIT_MAX_RECEIVER_BODY_BYTES, "CONDUIT_MAX_RECEIVER_BODY_BYTES"
    if path.startswith(API_PREFIX):
        return settings.CONDUIT_MAX_API_BODY_BYTES, "CONDUIT_MAX_API_BODY_BYTES"
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE, "DATA_UPLOAD_MAX_MEMORY_SIZE"


def bearer_secret(header: bytes | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header when it has a token's shape."""
    if not header:
        return None
    scheme, _, secret = header.decode("latin-1").partition(" ")
    secret = secret.strip()
    if scheme.lower() != "bearer" or not token_well_formed(secret):
        return None
    return secret


def token_live(secret: str) -> bool:
    """Whether ``secret`` is a live API token (a database read: call it in a thread)."""
    from django.db import close_old_connections

    from routing.access.selectors import api_token_live

    close_old_connections()
    try:
        return api_token_live(secret=secret)
    finally:
        close_old_connections()


def _recently_live(secret: str) -> bool:
    until = _live_tokens.get(token_digest(secret))
    return until is not None and until > time.monotonic()


def _remember_live(secret: str) -> None:
    if len(_live_tokens) >= LIVE_TOKENS_KEPT:
        _live_tokens.clear()
    _live_tokens[token_digest(secret)] = time.monotonic() + LIVE_TOKEN_SECONDS


class EdgeRequest(WebRequest):
    """Daphne's request, refusing a body over its path's limit, or an API body without a live
    token, before reading it (see the module's documentation)."""

    refused = False
    body_complete = False
    body_received = 0
    limit = 0
    limit_setting = ""

    def gotLength(self, length: int | None) -> None:
        target = getattr(self.channel, "_path", b"") or b""
        path = unquote(target.split(b"?", 1)[0].decode("latin-1"))
        self.limit, self.limit_setting = body_limit(path)
        has_body = length is None or length > 0
        secret = None
        if has_body and path.startswith(API_PREFIX):
            header = self.requestHeaders.getRawHeaders(b"Authorization")
            secret = bearer_secret(header[0] if header else None)
            if secret is None:
                self.refuse(401, "unauthorized", self._unauthorized_message(header), invalid=bool(header))
                return
        if secret is not None and not _recently_live(secret):
            # The token first (an unknown one is a 401 whatever the size), then the size.
            super().gotLength(length)
            self._verify_before_reading(secret, length)
            return
        if self._over_limit(length):
            return
        super().gotLength(length)

    def handleContentChunk(self, data: bytes) -> None:
        if self.refused:
            return
        self.body_received += len(data)
        if self.body_received > self.limit:
            self.refuse(413, "event_too_large", self._too_large(self.body_received, more=True))
            return
        super().handleContentChunk(data)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        if self.refused:
            return  # the rest of a cut-off chunked body: answered already
        self.body_complete = True
        super().requestReceived(command, path, version)

    def handle_reply(self, message: dict) -> None:
        # Daphne writes the access log line inside this call, once the answer is complete:
        # JsonAccessLog reads the request and answer it is about from here (one reactor thread).
        global _replying
        _replying = self
        try:
            super().handle_reply(message)
        finally:
            _replying = None

    def refuse(self, status: int, code: str, message: str, *, invalid: bool = False) -> None:
        """Answer ``status`` with a JSON error, as the API does, and close the connection; what
        the client sends after it is never read."""
        self.refused = True
        # No "100 Continue" after the answer (HTTPChannel sends it after gotLength).
        self.requestHeaders.removeHeader(b"Expect")
        body = json.dumps({"error": code, "message": message}).encode()
        headers = [
            b"HTTP/1.1 %d %s" % (status, REASONS[status]),
            b"Content-Type: application/json",
            b"Content-Length: %d" % len(body),
            b"Cache-Control: no-store",
            b"Connection: close",
        ]
        if status == 401:
            challenge = f'Bearer realm="{REALM}"' + (', error="invalid_token"' if invalid else "")
            headers.append(b"WWW-Authenticate: " + challenge.encode())
        channel = self.channel
        channel.transport.write(b"\r\n".join(headers) + b"\r\n\r\n" + body)
        channel.linger()

    def _over_limit(self, length: int | None) -> bool:
        """Refuse (413) a declared length over the limit."""
        if length is None or length <= self.limit:
            return False
        self.refuse(413, "event_too_large", self._too_large(length))
        return True

    def _verify_before_reading(self, secret: str, length: int | None) -> None:
        """Stop reading the connection until ``secret`` is found live: resume then, or answer 401."""
        channel = self.channel
        continue_asked = self.requestHeaders.getRawHeaders(b"Expect")
        # Send "100 Continue" only once the token is known to be live.
        self.requestHeaders.removeHeader(b"Expect")
        channel._networkProducer.pauseProducing()

        def verified(live: bool) -> None:
            if live:
                _remember_live(secret)
            if self.channel is None or self.refused or self.body_complete:
                # Gone meanwhile, or a whole body had arrived with the headers: the API
                # answers that one (and the channel resumes reading once it is answered).
                return
            if not live:
                message = "the API token is unknown, revoked or of an inactive user"
                self.refuse(401, "unauthorized", message, invalid=True)
                return
            if self._over_limit(length):
                return
            if continue_asked and continue_asked[0].lower() == b"100-continue":
                channel.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            channel._networkProducer.resumeProducing()

        def failed(failure) -> None:
            if self.channel is not None and not self.refused and not self.body_complete:
                # The database could not be read: the API could not answer either.
                self.refuse(503, "unavailable", "the API token cannot be checked now; try again")

        deferToThread(token_live, secret).addCallbacks(verified, failed)

    @staticmethod
    def _unauthorized_message(header: list[bytes] | None) -> str:
        if not header:
            return "an API token is required: send the header 'Authorization: Bearer <token>'"
        return "the Authorization header must read 'Bearer <token>' with an API token"

    def _too_large(self, size: int, *, more: bool = False) -> str:
        what = f"more than {self.limit} bytes" if more else f"{size} bytes"
        return f"the request body is {what}; the limit is {self.limit} bytes ({self.limit_setting})"


def plain_answer(status: int, message: str, *extra: bytes) -> bytes:
    """A whole ``status`` answer with a JSON error, closing the connection."""
    body = json.dumps({"error": REASONS[status].decode().lower().replace(" ", "_"), "message": message})
    headers = [
        b"HTTP/1.1 %d %s" % (status, REASONS[status]),
        b"Content-Type: application/json",
        b"Content-Length: %d" % len(body),
        b"Cache-Control: no-store",
        b"Connection: close",
        *extra,
    ]
    return b"\r\n".join(headers) + b"\r\n\r\n" + body.encode()


class EdgeChannel(HTTPChannel):
    """Twisted's HTTP/1.1 connection with a deadline for each request's headers and body
    (``CONDUIT_HEADER_TIMEOUT``, from its first byte) besides the idle timeout (``timeOut``, set
    by the factory), which any byte resets and which is off while a request is answered."""

    header_timeout: float | None = None
    _header_deadline = None
    _lingering = None

    def dataReceived(self, data: bytes) -> None:
        if self._lingering is not None:
            return  # after a refusal: what the client still sends is dropped, never parsed
        if self._header_deadline is None and not self._handlingRequest and self.header_timeout:
            self._header_deadline = self.callLater(self.header_timeout, self._headers_overdue)
        super().dataReceived(data)

    def allContentReceived(self) -> None:
        self._cancel_header_deadline()
        super().allContentReceived()

    def connectionLost(self, reason) -> None:
        self._cancel_header_deadline()
        if self._lingering is not None and self._lingering.active():
            self._lingering.cancel()
        super().connectionLost(reason)

    def linger(self) -> None:
        """Close after a refusal written ahead of the body (a lingering close): our side is
        half-closed at once, what the client still sends is read and dropped, and the connection
        is cut after :data:`REFUSAL_LINGER_SECONDS`. Closing with the body unread would reset the
        connection, and a client or proxy still sending could lose the answer to the reset
        (Caddy reported such a 401 as 502)."""
        self._cancel_header_deadline()
        self.setTimeout(None)
        self._lingering = self.callLater(REFUSAL_LINGER_SECONDS, self.transport.abortConnection)
        self.transport.loseWriteConnection()
        self.transport.resumeProducing()  # reading may be paused for a token's lookup

    def _cancel_header_deadline(self) -> None:
        if self._header_deadline is not None:
            if self._header_deadline.active():
                self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_overdue(self) -> None:
        self._header_deadline = None
        if self.transport is None or self._handlingRequest:
            return
        if not self.transport.disconnecting:  # else answered already (a 413 or 401 refusal)
            message = (
                f"the request was not complete within {self.header_timeout:g} s (CONDUIT_HEADER_TIMEOUT)"
            )
            self.transport.write(plain_answer(408, message))
        # Twisted's idle timeout: close, and abort if the client does not read.
        self.timeoutConnection()


class Refusal(Protocol):
    """A connection over ``CONDUIT_MAX_CONNECTIONS``: answered ``503`` with ``Retry-After`` at
    once, its request never read, and cut after :data:`REFUSAL_LINGER_SECONDS`."""

    _cut = None

    def connectionMade(self) -> None:
        message = "the server has as many connections open as it takes (CONDUIT_MAX_CONNECTIONS); try again"
        self.transport.write(plain_answer(503, message, b"Retry-After: %d" % RETRY_AFTER_SECONDS))
        # Half-close: the client reads the answer whatever it is still sending, which is
        # discarded; the connection is cut if the client does not close its side.
        self.transport.loseWriteConnection()
        self._cut = reactor.callLater(REFUSAL_LINGER_SECONDS, self.transport.abortConnection)

    def dataReceived(self, data: bytes) -> None:
        """What the refused client still sends is read and dropped: its request is never served."""

    def connectionLost(self, reason) -> None:
        if self._cut is not None and self._cut.active():
            self._cut.cancel()


class CountedConnection(ProtocolWrapper):
    """A connection counted by its factory until its socket closes, whatever protocol it speaks
    by then (daphne hands a websocket's socket to another protocol inside this wrapper)."""


class EdgeHTTPFactory(HTTPFactory):
    """Daphne's HTTP factory, building :class:`EdgeChannel` connections with :class:`EdgeRequest`
    requests, with the idle and header timeouts, and refusing connections past the cap."""

    protocol = EdgeChannel

    def __init__(self, server):
        super().__init__(server)
        self.timeOut = settings.CONDUIT_IDLE_TIMEOUT or None
        self.header_timeout = settings.CONDUIT_HEADER_TIMEOUT or None
        self.max_connections = settings.CONDUIT_MAX_CONNECTIONS
        self.connections: set[CountedConnection] = set()

    def buildProtocol(self, addr):
        if self.max_connections and len(self.connections) >= self.max_connections:
            return Refusal()
        protocol = super().buildProtocol(addr)
        protocol.requestFactory = EdgeRequest
        protocol.header_timeout = self.header_timeout
        return CountedConnection(self, protocol)

    # The factory ProtocolWrapper reports to.
    def registerProtocol(self, protocol: CountedConnection) -> None:
        self.connections.add(protocol)

    def unregisterProtocol(self, protocol: CountedConnection) -> None:
        self.connections.discard(protocol)


# The request whose answer daphne is writing (EdgeRequest.handle_reply), for the access log.
_replying: EdgeRequest | None = None
access_logger = logging.getLogger("conduit.access")


def _header(headers, name: bytes) -> str:
    values = headers.getRawHeaders(name) if headers is not None else None
    return values[0].decode("latin-1") if values else ""


class JsonAccessLog:
    """Daphne's access log as ``conduit.access`` records (``LOG_FORMAT=json``) instead of NCSA
    text on standard output: ``http.request`` with the method, path, status, size, duration,
    ``request_id`` and the ``trace_id``/``span_id`` of the Event the request carried (the
    answer's ``traceresponse``, else the request's ``traceparent``); ``websocket.<action>`` for
    websockets."""

    def __init__(self, stream=None) -> None:
        self.stream = stream  # daphne passes one; lines go through logging instead

    def __call__(self, protocol: str, action: str, details: dict) -> None:
        fields = {"client": details.get("client"), "path": details.get("path")}
        if protocol == "http":
            if action != "complete":
                return
            request = _replying
            fields.update(
                method=details.get("method"),
                status=details.get("status"),
                size=details.get("size"),
                duration_ms=round((details.get("time_taken") or 0) * 1000, 1),
            )
            if request is not None:
                request_id = _header(request.responseHeaders, b"x-request-id")
                if request_id:
                    fields["request_id"] = request_id
                fields.update(
                    trace_fields(_header(request.responseHeaders, b"traceresponse"))
                    or trace_fields(_header(request.requestHeaders, b"traceparent"))
                    or trace_fields(_header(request.requestHeaders, b"ce-traceparent"))
                )
            access_logger.info("http.request", extra=fields)
        elif protocol == "websocket":
            access_logger.info(f"websocket.{action}", extra=fields)


def install() -> None:
    """Make daphne's server build :class:`EdgeHTTPFactory`; fail at start, not at a request, if
    the daphne or Twisted installed lacks a name this module depends on."""
    for owner, name in (
        (daphne.server, "HTTPFactory"),
        (daphne_cli, "AccessLogGenerator"),
        (WebRequest, "handle_reply"),
        (WebRequest, "gotLength"),
        (WebRequest, "handleContentChunk"),
        (HTTPChannel, "allContentReceived"),
        (HTTPChannel, "timeoutConnection"),
    ):
        if not hasattr(owner, name):
            raise RuntimeError(
                f"conduit_site.edge: the installed daphne/Twisted has no {name}; see its documentation"
            )
    daphne.server.HTTPFactory = EdgeHTTPFactory
    if json_logs():
        daphne_cli.AccessLogGenerator = JsonAccessLog


def main(argv: list[str] | None = None) -> None:
    """Run daphne's command line (the same arguments) with bodies bounded."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "conduit_site.settings")
    install()
    CommandLineInterface().run(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
