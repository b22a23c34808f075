"""Helpers of the live update tests: a routing pass, and the headers of a signed-in websocket."""

from __future__ import annotations

from tests.routing.routerkit import drain, router


def route_pass(clock) -> None:
    r = router(clock)
    try:
        drain(r)
    finally:
        r.close()


def headers(client) -> list[tuple[bytes, bytes]]:
    return [
        (b"origin", b"http://testserver"),
        (b"host", b"testserver"),
        (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()),
    ]
