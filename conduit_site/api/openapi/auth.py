"""Authentication in the OpenAPI document: the per-user bearer token every operation but a public
one needs, and the answers without one (401) or without the permission (403).

Tokens are managed with ``manage.py api_token`` and in the admin; the API has no token endpoint.
"""

from __future__ import annotations

from typing import Any

from conduit_site.api.openapi.common import json_content, ref, response_ref

SECURITY_SCHEMES: dict[str, Any] = {
    "bearerToken": {
        "type": "http",
        "scheme": "bearer",
        "description": "A per-user API token (cdt_…), shown once when created.",
    }
}

SECURITY: list[dict[str, list[str]]] = [{"bearerToken": []}]
"""The document-wide requirement; a public operation overrides it with ``"security": []``."""

RESPONSES: dict[str, Any] = {
    "Unauthorized": {
        "description": "No valid API token (missing, malformed, unknown, revoked, or its user inactive).",
        "headers": {"WWW-Authenticate": {"schema": {"type": "string"}, "description": "Bearer"}},
        "content": json_content(ref("Error")),
    },
    "Forbidden": {
        "description": "The token's user lacks the permission this operation needs, or the token "
        "is narrowed (`api_token create --only …`) to scopes that exclude it.",
        "content": json_content(ref("Error")),
    },
}


def answer_rate_limited(paths: dict[str, Any]) -> None:
    """Every operation that needs a token counts against the rate limits of its token and its
    user (``conduit_site.api.ratelimit``): each can answer 429. (The receivers' webhook, which
    counts per receiver, says so itself.)"""
    for operations in paths.values():
        for operation in operations.values():
            if "401" in operation["responses"] and operation.get("security") != []:
                operation["responses"].setdefault("429", response_ref("TooManyRequests"))


def answer_forbidden(paths: dict[str, Any]) -> None:
    """Every operation that needs a token needs a permission too (``routing.access.roles``): each that can
    answer 401 can answer 403 (an operation without a token, ``"security": []``, has no permission to
    lack). Sorts each operation's responses by status."""
    for operations in paths.values():
        for operation in operations.values():
            if "401" in operation["responses"] and operation.get("security") != []:
                operation["responses"].setdefault("403", response_ref("Forbidden"))
                operation["responses"] = dict(sorted(operation["responses"].items()))
