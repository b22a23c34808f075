"""The API's documentation page in a real browser: Swagger UI, served by the
console itself, shows every operation of ``/api/openapi.json`` without breaking the
Content-Security-Policy or fetching anything from elsewhere."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest
from django.urls import reverse

from conduit_site.api.openapi import openapi_schema
from tests.browser.browserkit import RECORD_VIOLATIONS
from tests.routing.factories import UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "browser-api-docs-password-3"
HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}


@pytest.fixture
def operator():
    user = UserFactory(username="operator")
    user.set_password(PASSWORD)
    user.save()
    return user


def test_api_docs_show_every_operation_from_the_console_itself(live_server, operator, browser, tmp_path):
    operations = sorted(
        (method.upper(), path)
        for path, item in openapi_schema(server_url="http://testserver/")["paths"].items()
        for method in item
        if method in HTTP_METHODS
    )
    base = live_server.url
    host = urlsplit(base).netloc
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(RECORD_VIOLATIONS)
    page = context.new_page()
    requests: list[str] = []
    errors: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.on("pageerror", lambda error: errors.append(str(error)))

    page.goto(base + reverse("login"))
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(re.escape(base + reverse("console-home"))))

    # Linked from the console's navigation.
    page.click("nav.site-nav >> text=API")
    page.wait_for_url(base + reverse("api-docs"))
    assert page.locator("nav.site-nav a[aria-current=page]").inner_text() == "API"
    page.wait_for_selector(".swagger-ui .opblock")
    shown = sorted(
        (
            block.locator(".opblock-summary-method").inner_text().strip(),
            block.locator(".opblock-summary-path").get_attribute("data-path"),
        )
        for block in page.locator(".swagger-ui .opblock").all()
    )
    assert shown == operations
    page.screenshot(path=tmp_path / "api-docs.png", full_page=True)

    # An operation opens with its parameters and responses.
    page.locator(".opblock-get .opblock-summary").first.click()
    page.wait_for_selector(".opblock.is-open .responses-wrapper")

    assert base + "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in requests
    assert base + reverse("api-openapi") in requests
    assert all(urlsplit(url).netloc == host or url.startswith("data:") for url in requests), requests
    assert page.evaluate("window.__cspViolations") == []
    assert errors == []
    context.close()
