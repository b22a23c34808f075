"""The OpenAPI 3.1 description of the JSON API, written by hand, one module per resource.

Every route of ``conduit_site.api.urls`` must be described here with each of its methods: a
test walks the URLconf and fails otherwise. So is ``/hooks/{name}`` (``hooks``), where senders
deliver webhooks with their own signatures instead of a token. To add an endpoint, add its path item to the
``PATHS`` of its resource's module (``events``, ``controls``, ``work``, ``setup``, ``hooks``), reusing the
component schemas and responses of that module and of ``common`` and ``auth``. A new resource
is a new module with the same names (``TAG``, ``SCHEMAS``, ``RESPONSES``, ``PATHS``) listed in
``RESOURCES``. Each operation is tagged with its module's ``TAG`` here: one tag per resource, the
document's ``tags`` list declares them.
"""

from __future__ import annotations

import copy
from typing import Any

from django.conf import settings

from conduit_site.api.openapi import auth, common, controls, events, flow, hooks, setup, work
from conduit_site.api.openapi.common import API_VERSION, json_content, response_ref

__all__ = ["API_VERSION", "PATHS", "RESPONSES", "SCHEMAS", "TAGS", "openapi_schema"]

RESOURCES = (events, controls, setup, work, flow, hooks)
"""The resources' modules, in the order the document lists their paths."""

DOCUMENT_TAG: dict[str, str] = {"name": "openapi", "description": "This OpenAPI document (no token needed)."}

DOCUMENT_PATHS: dict[str, Any] = {
    "/api/openapi.json": {
        "get": {
            "operationId": "openapi_json",
            "summary": "This OpenAPI document",
            "security": [],
            "responses": {
                "200": {
                    "description": "The OpenAPI 3.1 document.",
                    "content": json_content({"type": "object"}),
                },
                "405": response_ref("MethodNotAllowed"),
            },
        }
    },
}


def _tagged(paths: dict[str, Any], tag: dict[str, str]) -> dict[str, Any]:
    """``paths`` with ``tag`` first in each of their operations."""
    return {
        path: {method: {"tags": [tag["name"]], **operation} for method, operation in item.items()}
        for path, item in paths.items()
    }


def _merged(kind: str, *parts: dict[str, Any]) -> dict[str, Any]:
    """``parts`` in one dict; a name defined twice is a mistake."""
    merged: dict[str, Any] = {}
    for part in parts:
        for name, value in part.items():
            if name in merged:
                raise ValueError(f"OpenAPI {kind} {name!r} is defined twice")
            merged[name] = value
    return merged


SCHEMAS: dict[str, Any] = _merged("schema", common.SCHEMAS, *(resource.SCHEMAS for resource in RESOURCES))
RESPONSES: dict[str, Any] = _merged(
    "response",
    common.RESPONSES,
    auth.RESPONSES,
    *(resource.RESPONSES for resource in RESOURCES),
)
TAGS: list[dict[str, str]] = [*(resource.TAG for resource in RESOURCES), DOCUMENT_TAG]
PATHS: dict[str, Any] = _merged(
    "path",
    *(_tagged(resource.PATHS, resource.TAG) for resource in RESOURCES),
    _tagged(DOCUMENT_PATHS, DOCUMENT_TAG),
)
auth.answer_rate_limited(PATHS)
auth.answer_forbidden(PATHS)


def openapi_schema(*, server_url: str = "/") -> dict[str, Any]:
    """The OpenAPI 3.1 document of the JSON API, served from ``server_url``."""
    return {
        "openapi": "3.1.0",
        "info": common.info(max_event_bytes=settings.CONDUIT_MAX_EVENT_BYTES),
        "servers": [{"url": server_url.rstrip("/") or "/"}],
        "security": copy.deepcopy(auth.SECURITY),
        "tags": copy.deepcopy(TAGS),
        "paths": copy.deepcopy(PATHS),
        "components": {
            "securitySchemes": copy.deepcopy(auth.SECURITY_SCHEMES),
            "parameters": copy.deepcopy(common.PARAMETERS),
            "schemas": copy.deepcopy(SCHEMAS),
            "responses": copy.deepcopy(RESPONSES),
        },
    }
