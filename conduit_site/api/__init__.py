"""The JSON API (token-authenticated), mounted under ``/api/``.

``urls.py`` routes; ``auth.py`` the token authentication and the ``api_view`` decorator; one
module per resource (``events``, ``controls``, ``work``, ``setup``...); the package
``openapi`` the OpenAPI document served at ``/api/openapi.json``, one module per resource too.
"""
