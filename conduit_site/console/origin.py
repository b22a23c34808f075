"""Websockets from this site's own pages only: the ``Origin`` a browser sends must be the
origin the page was served from, scheme, host and port alike.

Channels' ``AllowedHostsOriginValidator`` compares the host alone, so a page of another
service on the same host (``http://127.0.0.1:9999``) could open the console's live updates
with the signed-in operator's cookie. Here the origin must equal the server's own — the
``Host`` the connection was made to, with the scheme it arrived with (``wss`` is ``https``;
behind a proxy, ``X-Forwarded-Proto: https`` counts when ``SECURE_PROXY_SSL_HEADER`` says so,
as it does for Django's CSRF check) — or be listed in ``CSRF_TRUSTED_ORIGINS``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings

_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_key(origin: str) -> tuple[str, str, int] | None:
    """``(scheme, host, port)`` of an origin (the port filled in from the scheme), or ``None``."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme]


def server_origin(scope: dict[str, Any]) -> tuple[str, str, int] | None:
    """The origin the connection was made to: its scheme and its ``Host`` header."""
    headers = dict(scope.get("headers") or [])
    host = headers.get(b"host", b"").decode("latin1")
    secure = scope.get("scheme") in ("wss", "https")
    proxy_header = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if not secure and proxy_header:
        name, value = proxy_header
        wanted = name.lower().removeprefix("http_").replace("_", "-").encode("latin1")
        secure = headers.get(wanted, b"").decode("latin1").split(",")[0].strip() == value
    return origin_key(f"{'https' if secure else 'http'}://{host}") if host else None


def origin_allowed(scope: dict[str, Any]) -> bool:
    """Whether the websocket's ``Origin`` is the server's own or a trusted one."""
    headers = dict(scope.get("headers") or [])
    origin = origin_key(headers.get(b"origin", b"").decode("latin1"))
    if origin is None:
        return False
    if origin == server_origin(scope):
        return True
    return origin in {origin_key(trusted) for trusted in settings.CSRF_TRUSTED_ORIGINS}


class SameOriginValidator:
    """ASGI middleware: a websocket whose origin is not the server's own is refused (403)."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] == "websocket" and not origin_allowed(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)
