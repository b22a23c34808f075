"""Pages of the site itself: ``/favicon.ico``, the 404 pages with ``DEBUG``
on (development: Django's debug page) and off (the console's page), the API's JSON 404 either
way, and ``DEBUG`` following the environment."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.staticfiles import finders
from django.templatetags.static import static
from django.test import Client, RequestFactory
from django.urls import reverse
from django.views.debug import technical_500_response

from tests.routing.factories import UserFactory
from tests.support import asgi_get

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.django_db


def test_favicon_ico_redirects_to_a_static_icon(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 301
    assert response["Location"] == static("favicon.ico")
    icon = Path(finders.find("favicon.ico")).read_bytes()
    assert icon[:4] == b"\x00\x00\x01\x00"  # an ICO file's header


def test_the_favicon_is_served_where_the_redirect_points():
    status, headers = asyncio.run(asgi_get(static("favicon.ico")))
    assert status == 200
    assert headers[b"content-type"] in (b"image/x-icon", b"image/vnd.microsoft.icon")


def test_console_pages_and_the_admin_link_the_favicon(client):
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    page = client.get(reverse("console-home")).content.decode()
    assert f'<link rel="icon" href="{static("favicon.ico")}">' in page
    # The admin's pages link none: the browser asks for /favicon.ico, which now answers.
    assert client.get(reverse("admin:index")).status_code == 200
    assert client.get("/favicon.ico", follow=False).status_code == 301


def test_debug_404_is_djangos_debug_page_for_the_console_and_json_for_the_api(client, settings):
    settings.DEBUG = True
    page = client.get("/no-such-page/")
    assert page.status_code == 404
    assert page["Content-Type"].startswith("text/html")
    body = page.content.decode()
    # Django's debug page, which lists the URL patterns tried.
    assert "DEBUG = True" in body and "api/docs/" in body
    api = client.get("/api/no-such-endpoint")
    assert api.status_code == 404
    assert api.json() == {"error": "not_found", "message": "no such URL: /api/no-such-endpoint"}


def test_with_debug_an_api_url_with_a_newline_is_a_json_404_too(client, settings):
    """schemathesis found a path parameter with a newline answered with Django's debug page."""
    settings.DEBUG = True
    for path in ("/api/work/%0A%C3%97/rebind", "/hooks/a%0Ab/c"):
        response = client.post(path)
        assert response.status_code == 404 and response.json()["error"] == "not_found", path


def test_without_debug_the_404_is_the_consoles_page_and_json_for_the_api(client, settings):
    settings.DEBUG = False
    client.force_login(UserFactory())
    page = client.get("/no-such-page/")
    assert page.status_code == 404
    body = page.content.decode()
    assert "<h1>Not found</h1>" in body and "<code>/no-such-page/</code>" in body
    assert 'class="site-nav"' in body  # in the console's layout
    assert "DEBUG" not in body
    api = client.get("/api/events/1/nothing")
    assert api.status_code == 404 and api.json()["error"] == "not_found"


def test_api_docs_without_a_slash_redirects_to_the_page(client):
    response = client.get("/api/docs")
    assert response.status_code == 301 and response["Location"] == reverse("api-docs")


def debug_setting(**environ: str) -> bool:
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "CONDUIT_ENV", "TEST_DATABASE_NAME")}
    env.update(environ)
    code = (
        "import django, json; django.setup(); from django.conf import settings; "
        "print(json.dumps(settings.DEBUG))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "conduit_site.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_debug_is_on_in_development_and_follows_the_environment():
    assert debug_setting() is True  # development: the debug 404 page above
    assert debug_setting(DEBUG="false") is False
    assert debug_setting(CONDUIT_ENV="production", SECRET_KEY="x" * 50, ALLOWED_HOSTS="example.com") is False
    assert debug_setting(CONDUIT_ENV="production", SECRET_KEY="x" * 50, DEBUG="true") is True


def test_a_post_to_an_unknown_api_url_is_a_json_404_not_a_csrf_refusal(settings):
    settings.DEBUG = True
    response = Client(enforce_csrf_checks=True).post(
        "/api/work/x/retry", data="{}", content_type="application/json"
    )
    assert response.status_code == 404 and response.json()["error"] == "not_found"


def test_with_debug_the_debug_pages_show_no_secret(client, settings, monkeypatch):
    settings.DEBUG = True
    settings.DATABASE_URL = "postgres://conduit:db-password-1@db:5432/conduit"
    settings.REDIS_URL = "redis://cache:6379/0?password=redis-password-2"
    settings.CHANNEL_LAYERS = {
        "default": {"CONFIG": {"hosts": [{"address": "redis://:redis-password-3@cache"}]}}
    }
    settings.CONDUIT_SENTRY_ENDPOINT = "https://user:other-password-4@sentry.example/1"
    monkeypatch.setenv("GH_HOOK_HMAC", "receiver-secret-5")
    # A bad Host header is a 400 with Django's debug page, which lists the settings and the
    # request's META (where a WSGI server puts the process environment).
    page = client.get("/", HTTP_HOST="evil.example", GH_HOOK_HMAC="receiver-secret-5")
    assert page.status_code == 400
    body = page.content.decode()
    assert "DisallowedHost" in body and "DATABASE_URL" in body and "GH_HOOK_HMAC" in body
    for secret in (
        "db-password-1",
        "redis-password-2",
        "redis-password-3",
        "other-password-4",
        "receiver-secret-5",
    ):
        assert secret not in body, secret
    assert "db:5432" not in body  # the whole URL is hidden, not only its password


def test_with_debug_a_500_page_hides_the_sign_in_password_and_secret_like_variables(settings):
    settings.DEBUG = True
    # Built at run time: the page also shows this test's source lines.
    password, token, secret = ("-".join((word, "6")) for word in ("login", "api", "hook"))
    request = RequestFactory().post("/sign-in/", {"username": "ann", "password": password})
    request.sensitive_post_parameters = ["password"]

    def verify(secret: bytes) -> None:
        api_token = token  # noqa: F841 (a local the page shows unless hidden)
        raise ValueError("boom")

    try:
        verify(secret.encode())
    except ValueError:
        body = technical_500_response(request, *sys.exc_info()).content.decode()
    assert "boom" in body and "api_token" in body
    for value in (password, token, secret):
        assert value not in body, value
