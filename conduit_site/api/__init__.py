"""The JSON API (token-authenticated), mounted under ``/api/``.

``urls.py`` routes; ``auth.py`` the token authentication and the ``api_view`` decorator; one
module per resource (``events``, ``controls``, ``work``, ``setup``); ``hooks`` the receivers'
webhooks (``/hooks/NAME``, outside ``/api/``, through the same ``api_view``); the package
``openapi`` the OpenAPI document served at ``/api/openapi.json``, one module per resource too.
"""
