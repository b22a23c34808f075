"""Response headers: a Content-Security-Policy without 'unsafe-inline' on every page, ``no-store``
on pages and API answers, ``nosniff`` on static files."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse

from tests.causal.factories import EventFactory
from tests.routing.factories import UserFactory, api_token_with_secret
from tests.support import asgi_get
from tests.worklife.factories import WorkFactory

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def admin(client):
    client.force_login(UserFactory(username="admin", is_staff=True, is_superuser=True))
    return client


def console_urls() -> list[str]:
    event = EventFactory(route_state="failed")
    work = WorkFactory()
    return [
        reverse("console-home"),
        reverse("event-list"),
        reverse("event-detail", args=[event.seq]),
        reverse("work-list"),
        reverse("work-detail", args=[work.pk]),
        reverse("config-list"),
        reverse("trace"),
        reverse("causal-root", args=[event.seq]),
        reverse("causal-diagnostics"),
        reverse("dead-letters"),
        reverse("doctor"),
        reverse("admin:index"),
        reverse("admin:causal_event_changelist"),
    ]


@pytest.mark.django_db
def test_every_page_has_a_content_security_policy_without_unsafe_inline(admin):
    anonymous = Client()
    for url in [*console_urls(), reverse("login"), "/api/openapi.json"]:
        response = (anonymous if url == reverse("login") else admin).get(url)
        assert response.status_code == 200, url
        policy = response["Content-Security-Policy"]
        assert "script-src 'self'" in policy and "style-src 'self'" in policy, url
        assert "default-src 'self'" in policy and "object-src 'none'" in policy, url
        assert "unsafe-inline" not in policy and "unsafe-eval" not in policy, url


INLINE = [
    (re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.I), "an inline <script>"),
    (re.compile(r"<style\b", re.I), "a <style> element"),
    (re.compile(r"\sstyle=", re.I), "a style attribute"),
    (re.compile(r"\son[a-z]+=", re.I), "an on… handler attribute"),
    (re.compile(r"\shx-on[:-]", re.I), "an hx-on handler"),
    (re.compile(r"""(href|src|action)=["']?\s*javascript:""", re.I), "a javascript: URL"),
]


def test_no_template_has_inline_script_style_or_handlers():
    found = []
    for template in sorted((ROOT / "templates").rglob("*.html")):
        text = template.read_text(encoding="utf-8")
        for pattern, what in INLINE:
            for match in pattern.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"{template.relative_to(ROOT)}:{line}: {what}")
    assert found == []


def test_htmx_injects_no_style_and_evaluates_no_attribute():
    base = (ROOT / "templates" / "base.html").read_text(encoding="utf-8")
    config = re.search(r"<meta name=\"htmx-config\" content='([^']*)'>", base)
    assert config is not None
    assert '"includeIndicatorStyles": false' in config[1] and '"allowEval": false' in config[1]
    assert '"historyCacheSize": 0' in config[1]
    assert "{% static 'js/console.js' %}" in base


@pytest.mark.django_db
def test_pages_and_api_answers_are_no_store(admin, client):
    for url in console_urls():
        assert "no-store" in admin.get(url)["Cache-Control"], url
    event, work = EventFactory(), WorkFactory()
    _, secret = api_token_with_secret(user__username="reader", user__is_superuser=True)
    auth = {"Authorization": f"Bearer {secret}"}
    for url in [
        f"/api/events/{event.seq}",
        f"/api/events/{event.seq}/route",
        f"/api/work/{work.pk}",
        "/api/work",
        "/api/events/999999",
    ]:
        response = client.get(url, headers=auth)
        assert response.status_code in (200, 404), url
        assert "no-store" in response["Cache-Control"], url
    traced = client.post("/api/trace", {"event": {}}, content_type="application/json", headers=auth)
    assert "no-store" in traced["Cache-Control"]


def test_static_files_are_served_with_nosniff():
    status, headers = asyncio.run(asgi_get("/static/css/console.css"))
    assert status == 200
    assert headers[b"x-content-type-options"] == b"nosniff"
    assert headers[b"content-type"].startswith(b"text/css")
    status, headers = asyncio.run(asgi_get("/static/js/console.js"))
    assert status == 200 and headers[b"x-content-type-options"] == b"nosniff"
    status, headers = asyncio.run(asgi_get("/static/no-such-file.js"))
    assert status == 404 and headers[b"x-content-type-options"] == b"nosniff"


def test_api_answers_served_through_asgi_are_no_store():
    """Through the ASGI application, as daphne serves: the synchronous chain adds its headers."""
    status, headers = asyncio.run(asgi_get("/api/events/1"))  # no token: 401 before any read
    assert status == 401 and b"no-store" in headers[b"cache-control"]
    status, headers = asyncio.run(asgi_get("/api/openapi.json"))
    assert status == 200 and b"no-store" in headers[b"cache-control"]


def test_settings_enable_the_csp_middleware():
    assert "django.middleware.csp.ContentSecurityPolicyMiddleware" in settings.MIDDLEWARE
    assert "conduit_site.headers.NoStoreMiddleware" in settings.MIDDLEWARE
