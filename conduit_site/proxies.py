"""The client's address behind trusted reverse proxies (``CONDUIT_TRUSTED_PROXIES``): what
django-axes keys sign-in lockouts on (``AXES_CLIENT_IP_CALLABLE``).

``X-Forwarded-For`` is read only when the peer (``REMOTE_ADDR``) is a trusted proxy, and then
from the right: each proxy appends the address it received the request from, so the first
address from the right that is not a trusted proxy is the client. Whatever a client wrote into
the header itself stays on the left and is never read. (django-ipware's proxy settings check the
addresses listed in the header, not the peer, so a client reaching the server directly could
still choose its address; hence this function.)

An address alone does not tell the proxy from another process on its host: any local process
(a Work's command included) can connect to ``127.0.0.1`` and write the header. So with
``CONDUIT_PROXY_SECRET`` set, the header is read only from a request that also carries
``X-Conduit-Proxy: <the secret>``, which the proxy adds to every request it passes on (and
replaces when a client sent one); every other request is its peer's.
"""

from __future__ import annotations

import hmac
import ipaddress
from functools import lru_cache

from django.conf import settings
from django.http import HttpRequest

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@lru_cache(maxsize=8)
def trusted_networks(entries: tuple[str, ...]) -> tuple[Network, ...]:
    """The networks of ``CONDUIT_TRUSTED_PROXIES`` (addresses or CIDR networks)."""
    return tuple(ipaddress.ip_network(entry.strip(), strict=False) for entry in entries if entry.strip())


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return None


def is_trusted(address: str, networks: tuple[Network, ...]) -> bool:
    """Whether ``address`` is one of the trusted proxies."""
    parsed = _address(address)
    return parsed is not None and any(parsed in network for network in networks)


PROXY_SECRET_HEADER = "HTTP_X_CONDUIT_PROXY"


def from_the_proxy(request: HttpRequest) -> bool:
    """Whether the request carries the proxy's secret (``X-Conduit-Proxy``), compared in
    constant time; true when no secret is set (the peer's address is then the only proof)."""
    secret = settings.CONDUIT_PROXY_SECRET
    if not secret:
        return True
    sent = request.META.get(PROXY_SECRET_HEADER, "")
    return hmac.compare_digest(sent.encode("latin-1", "replace"), secret.encode())


def client_ip(request: HttpRequest) -> str | None:
    """The client's address: ``REMOTE_ADDR``, or behind trusted proxies (a trusted peer that
    sent the proxy's secret, when one is set) the right-most address of ``X-Forwarded-For``
    that is not a trusted proxy."""
    peer = request.META.get("REMOTE_ADDR")
    networks = trusted_networks(tuple(settings.CONDUIT_TRUSTED_PROXIES))
    if not peer or not networks or not is_trusted(peer, networks) or not from_the_proxy(request):
        return peer
    forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    for hop in reversed(forwarded):
        if _address(hop) is None:
            # A malformed entry: nothing to its left can be trusted either.
            break
        if not is_trusted(hop, networks):
            return str(_address(hop))
    return peer
