"""The API's documentation page: Swagger UI from the console's own static
files over the OpenAPI document, linked from the console's navigation."""

from __future__ import annotations

import json
import re

import pytest
from django.contrib.staticfiles import finders
from django.urls import reverse

from conduit_site.api.openapi import openapi_schema
from tests.routing.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_api_docs_page_loads_swagger_ui_from_static_files(client):
    response = client.get(reverse("api-docs"))
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    page = response.content.decode()
    # The page names the schema it renders; its scripts and styles are the console's own files.
    assert f'data-schema-url="{reverse("api-openapi")}"' in page
    assets = re.findall(r'(?:src|href)="/static/([^"]+)"', page)
    assert "drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in assets
    assert "drf_spectacular_sidecar/swagger-ui-dist/swagger-ui.css" in assets
    assert "js/api-docs.js" in assets
    assert all(finders.find(asset) for asset in assets), assets
    # No inline script: the policy would block it.
    assert not re.search(r"<script(?![^>]*\bsrc=)", page)
    assert "'unsafe-inline'" not in response["Content-Security-Policy"]


def test_the_schema_url_the_page_names_answers_the_openapi_document(client):
    response = client.get(reverse("api-openapi"))
    assert response.status_code == 200
    document = response.json()
    assert document["openapi"].startswith("3.")
    assert "/api/events" in document["paths"]


def test_the_console_navigation_links_to_the_api_docs(client):
    client.force_login(UserFactory())
    page = client.get(reverse("console-home")).content.decode()
    assert f'<a href="{reverse("api-docs")}">API</a>' in page
    docs = client.get(reverse("api-docs")).content.decode()
    assert f'<a href="{reverse("api-docs")}" aria-current="page">API</a>' in docs


# --- tags, and each schema and parameter written once -------------------------------------------

HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


def operations(document):
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method in HTTP_METHODS:
                yield f"{method.upper()} {path}", operation


def resolved(document, node, within=()):
    """``node`` with every ``$ref`` replaced by what it names, recursively; a reference inside
    what it names (JsonValue's, as JSON nests) is left as it is."""
    if isinstance(node, dict):
        if "$ref" in node:
            if node["$ref"] in within:
                return node
            section, name = node["$ref"].removeprefix("#/components/").split("/")
            return resolved(document, document["components"][section][name], (*within, node["$ref"]))
        return {key: resolved(document, value, within) for key, value in node.items()}
    if isinstance(node, list):
        return [resolved(document, value, within) for value in node]
    return node


def inline_schemas(node):
    """Every schema written out in ``node`` that has a structure of its own (properties or
    subschemas to choose from or combine), as JSON text; a bare ``$ref`` is not one."""
    if isinstance(node, dict):
        if {"properties", "oneOf", "anyOf", "allOf"} & set(node):
            yield json.dumps(node, sort_keys=True)
        for value in node.values():
            yield from inline_schemas(value)
    elif isinstance(node, list):
        for value in node:
            yield from inline_schemas(value)


def test_every_operation_has_a_tag_the_document_declares():
    document = openapi_schema()
    declared = [tag["name"] for tag in document.get("tags", [])]
    assert declared, "the document declares no tags"
    assert len(declared) == len(set(declared)), declared
    assert all(tag.get("description") for tag in document["tags"]), document["tags"]
    used = set()
    for name, operation in operations(document):
        assert operation.get("tags"), f"{name} has no tag"
        assert set(operation["tags"]) <= set(declared), f"{name}: {operation['tags']} are not declared"
        used.update(operation["tags"])
    assert used == set(declared), "a declared tag no operation has"


def test_accepting_events_names_the_envelope_schema_by_reference():
    document = openapi_schema()
    operation = document["paths"]["/api/events"]["post"]
    envelope = resolved(document, document["components"]["schemas"]["CloudEventInput"])
    media_types = operation["requestBody"]["content"]
    # One media type documented (a generated client picks among several by isinstance over
    # list types, which fails); the description names the others the server takes.
    assert set(media_types) == {"application/cloudevents+json"}
    assert "application/cloudevents-batch+json" in operation["requestBody"]["description"]
    batch = {"type": "array", "items": envelope, "minItems": 1}
    for media_type, body in media_types.items():
        assert set(body["schema"]) == {"$ref"}, media_type
        # One Event or a batch of them (the batch type: a batch only), the same envelope either way.
        expected = batch if media_type.endswith("-batch+json") else {"oneOf": [envelope, batch]}
        assert resolved(document, body["schema"]) == expected, media_type
    for status in ("200", "201"):
        schema = operation["responses"][status]["content"]["application/json"]["schema"]
        assert set(schema) == {"$ref"}, status


def test_no_structured_schema_is_written_out_twice():
    document = openapi_schema()
    schemas = list(inline_schemas(document))
    repeated = sorted({schema for schema in schemas if schemas.count(schema) > 1})
    assert not repeated, "written out more than once; name it under components/schemas:\n" + "\n".join(
        repeated
    )
    envelope = set(document["components"]["schemas"]["EventAttributes"]["properties"])
    assert sum(envelope <= set(json.loads(schema).get("properties", {})) for schema in schemas) == 1


def test_no_parameter_is_written_out_twice():
    document = openapi_schema()
    parameters = [
        json.dumps(parameter, sort_keys=True)
        for _, operation in operations(document)
        for parameter in operation.get("parameters", [])
        if "$ref" not in parameter
    ]
    repeated = sorted({parameter for parameter in parameters if parameters.count(parameter) > 1})
    assert not repeated, "name it under components/parameters:\n" + "\n".join(repeated)


def test_the_documented_doctor_check_names_are_the_checks_doctor_runs(clock):
    """Each check doctor runs is a name the OpenAPI document lists (a new check once answered
    outside its schema)."""
    from conduit_site.doctor import doctor

    documented = openapi_schema()["components"]["schemas"]["DoctorCheck"]["properties"]["name"]["enum"]
    assert sorted(check.name for check in doctor(clock=clock).checks) == sorted(documented)
