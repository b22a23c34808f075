"""The ASGI application: each request runs in a thread of a fixed pool."""

from __future__ import annotations

import asyncio

from django.conf import settings

from tests.support import asgi_get


def test_the_asgi_application_runs_each_request_in_a_thread_of_a_fixed_pool():
    """Under daphne the whole chain and the view run synchronously in one thread of a pool
    whose threads keep their database connections: Django's async chain hopped to a thread
    and back for each middleware, and it served each request in a new thread with a new
    connection."""
    import threading

    from asgiref.sync import SyncToAsync

    from conduit_site.asgi import django_asgi_app

    chain = django_asgi_app._middleware_chain
    assert isinstance(chain, SyncToAsync) and not asyncio.iscoroutinefunction(chain.func)
    assert django_asgi_app.request_threads._max_workers == settings.CONDUIT_REQUEST_THREADS
    for _ in range(3):
        status, _headers = asyncio.run(asgi_get("/api/openapi.json"))
        assert status == 200
    served = [t.name for t in threading.enumerate() if t.name.startswith("conduit-request")]
    assert 1 <= len(served) <= settings.CONDUIT_REQUEST_THREADS
