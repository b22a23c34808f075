"""The API's documentation page (issue 11 item 8): Swagger UI from the console's own static
files over the OpenAPI document, linked from the console's navigation."""

from __future__ import annotations

import re

import pytest
from django.contrib.staticfiles import finders
from django.urls import reverse

from conduit_site.api.openapi import openapi_schema
from tests.routing.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_i11_8_api_docs_page_loads_swagger_ui_from_static_files(client):
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


def test_i11_8_the_schema_url_the_page_names_answers_the_openapi_document(client):
    response = client.get(reverse("api-openapi"))
    assert response.status_code == 200
    document = response.json()
    assert document["openapi"].startswith("3.")
    assert "/api/events" in document["paths"]


def test_i11_8_the_console_navigation_links_to_the_api_docs(client):
    client.force_login(UserFactory())
    page = client.get(reverse("console-home")).content.decode()
    assert f'<a href="{reverse("api-docs")}">API</a>' in page
    docs = client.get(reverse("api-docs")).content.decode()
    assert f'<a href="{reverse("api-docs")}" aria-current="page">API</a>' in docs


# --- issue 35 item 6: every operation tagged -------------------------------------------------------

HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


def operations(document):
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method in HTTP_METHODS:
                yield f"{method.upper()} {path}", operation


def test_i35_6_every_operation_has_a_tag_the_document_declares():
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
