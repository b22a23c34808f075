"""ASGI entry point: HTTP (Django) and websockets (channels) on one server (daphne).

HTTP requests run Django's middleware chain and the view synchronously, in one thread per
request (:class:`SyncChainASGIHandler`). Every view of the console and the API is synchronous;
Django's own ASGI handler runs each middleware asynchronously instead, and a
``MiddlewareMixin`` middleware then hops to a thread and back for its ``process_request`` and
again for its ``process_response``: about twenty hops a request with this project's eleven,
which made an acceptance cost four times its work under daphne.
"""

import os

import django
from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "conduit_site.settings")
django.setup(set_prefix=False)


class SyncChainASGIHandler(ASGIHandler):
    """Django's ASGI handler with the middleware chain built as under WSGI (synchronous) and
    entered once per request, in the request's thread (``thread_sensitive``, as Django runs a
    synchronous view under ASGI)."""

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)
        self._middleware_chain = sync_to_async(self._middleware_chain, thread_sensitive=True)


django_asgi_app = SyncChainASGIHandler()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from conduit_site.headers import StaticFilesHandler  # noqa: E402
from conduit_site.ws_urls import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        # The embedded console serves its own static files (with nosniff); behind a proxy, the
        # proxy does.
        "http": StaticFilesHandler(django_asgi_app),
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
