"""ASGI entry point: HTTP (Django) and websockets (channels) on one server (daphne).

HTTP requests run Django's middleware chain and the view synchronously, each request in one
thread of a fixed pool (:class:`SyncChainASGIHandler`). Every view of the console and the API
is synchronous. Django's own ASGI handler runs each middleware asynchronously instead, and a
``MiddlewareMixin`` middleware then hops to a thread and back for its ``process_request`` and
again for its ``process_response`` (about twenty hops a request with this project's eleven),
and it answers every request in a new thread, whose database connection (about a millisecond
to open on SQLite) dies with it. The pool's threads keep theirs (``CONN_MAX_AGE``), checked
before each request as Django checks them (``close_old_connections``).
"""

import os
from concurrent.futures import ThreadPoolExecutor

import django
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler
from django.db import close_old_connections
from django.http import HttpRequest, HttpResponseBase

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "conduit_site.settings")
django.setup(set_prefix=False)


class SyncChainASGIHandler(ASGIHandler):
    """Django's ASGI handler with the middleware chain built as under WSGI (synchronous) and
    entered once per request, in a thread of a pool of ``CONDUIT_REQUEST_THREADS``."""

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)
        chain = self._middleware_chain
        self.request_threads = ThreadPoolExecutor(
            max_workers=settings.CONDUIT_REQUEST_THREADS, thread_name_prefix="conduit-request"
        )

        def run(request: HttpRequest) -> HttpResponseBase:
            # What request_started and request_finished do for the connections of the thread
            # that serves the request (Django sends them from other threads under ASGI).
            close_old_connections()
            try:
                return chain(request)
            finally:
                close_old_connections()

        self._middleware_chain = sync_to_async(run, thread_sensitive=False, executor=self.request_threads)


django_asgi_app = SyncChainASGIHandler()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from conduit_site.console.origin import SameOriginValidator  # noqa: E402
from conduit_site.ws_urls import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        # Static files are served by WhiteNoise's middleware (cache headers, compression).
        "http": django_asgi_app,
        # Pages of this site only: a host ALLOWED_HOSTS names, and this origin's scheme and port.
        "websocket": AllowedHostsOriginValidator(
            SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
        ),
    }
)
