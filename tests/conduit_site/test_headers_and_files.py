"""Headers and files: a Content-Security-Policy without 'unsafe-inline' on every
page, ``no-store`` on pages and API answers, ``nosniff`` on static files, private files under
``var/``, ``DEBUG`` off by default where other machines can connect, and a clean deploy check."""

from __future__ import annotations

import asyncio
import io
import os
import re
import secrets
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management.base import BaseCommand
from django.test import Client
from django.urls import reverse

from conduit_site.management.commands.serve import debug_for_host, is_loopback
from conduit_site.supervision.supervisor import Child, Supervisor
from infra.layers import SQLiteChannelLayer
from infra.private_files import private_directory, private_file
from tests.causal.factories import EventFactory
from tests.routing.factories import UserFactory, api_token_with_secret
from tests.support import asgi_get, child_env
from tests.worklife.factories import WorkFactory

ROOT = Path(__file__).resolve().parents[2]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


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


# --- Content-Security-Policy ----------------------------------------------------------------------


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


# --- Cache-Control ------------------------------------------------------------------------------------


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


# --- static files -----------------------------------------------------------------------------------


def test_static_files_are_served_with_nosniff():
    status, headers = asyncio.run(asgi_get("/static/css/console.css"))
    assert status == 200
    assert headers[b"x-content-type-options"] == b"nosniff"
    assert headers[b"content-type"].startswith(b"text/css")
    status, headers = asyncio.run(asgi_get("/static/js/console.js"))
    assert status == 200 and headers[b"x-content-type-options"] == b"nosniff"
    status, headers = asyncio.run(asgi_get("/static/no-such-file.js"))
    assert status == 404 and headers[b"x-content-type-options"] == b"nosniff"


def test_the_asgi_application_runs_each_request_in_a_thread_of_a_fixed_pool():
    """Under daphne the whole chain and the view run synchronously in one thread of a pool
    whose threads keep their database connections: Django's async chain hopped to a thread
    and back for each middleware, and it served each request in a new thread with a new
    connection."""
    import threading

    from asgiref.sync import SyncToAsync

    from conduit_site.asgi import django_asgi_app

    chain = django_asgi_app._middleware_chain
    assert isinstance(chain, SyncToAsync) and not asyncio.iscoroutinefunction(chain.func)
    assert django_asgi_app.request_threads._max_workers == settings.CONDUIT_REQUEST_THREADS
    for _ in range(3):
        status, _headers = asyncio.run(asgi_get("/api/openapi.json"))
        assert status == 200
    served = [t.name for t in threading.enumerate() if t.name.startswith("conduit-request")]
    assert 1 <= len(served) <= settings.CONDUIT_REQUEST_THREADS


def test_api_answers_served_through_asgi_are_no_store():
    """Through the ASGI application, as daphne serves: the synchronous chain adds its headers."""
    status, headers = asyncio.run(asgi_get("/api/events/1"))  # no token: 401 before any read
    assert status == 401 and b"no-store" in headers[b"cache-control"]
    status, headers = asyncio.run(asgi_get("/api/openapi.json"))
    assert status == 200 and b"no-store" in headers[b"cache-control"]


# --- private files -------------------------------------------------------------------------------------


def test_private_directory_and_file_are_owner_only(tmp_path):
    old = os.umask(0o022)
    try:
        folder = private_directory(tmp_path / "var" / "deeper")
        assert mode(folder) == 0o700
        file = private_file(folder / "conduit.sqlite3")
        assert mode(file) == 0o600
        loose = tmp_path / "loose"
        loose.mkdir(mode=0o755)
        (loose / "old.sqlite3").write_text("")
        (loose / "old.sqlite3").chmod(0o644)
        private_directory(loose)
        private_file(loose / "old.sqlite3")
        assert (mode(loose), mode(loose / "old.sqlite3")) == (0o700, 0o600)
    finally:
        os.umask(old)


def test_the_channel_layer_file_is_created_0600_in_a_0700_folder(tmp_path):
    layer = SQLiteChannelLayer(path=tmp_path / "var" / "channels.sqlite3", poll_interval=0.01)
    old = os.umask(0o022)
    try:
        asyncio.run(layer.send("test.channel", {"type": "hello"}))
    finally:
        os.umask(old)
        asyncio.run(layer.flush())
    assert mode(tmp_path / "var") == 0o700
    for path in (tmp_path / "var").iterdir():
        assert mode(path) == 0o600, path


def test_the_database_and_var_are_private_after_migrate(tmp_path):
    var_dir = tmp_path / "fresh-var"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "TEST_DATABASE_NAME")}
    env["CONDUIT_VAR_DIR"] = str(var_dir)
    subprocess.run(
        ["/bin/sh", "-c", f"umask 022 && exec {sys.executable} manage.py migrate --noinput -v0"],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=300,
    )
    assert mode(var_dir) == 0o700
    files = sorted(var_dir.glob("conduit.sqlite3*"))
    assert var_dir / "conduit.sqlite3" in files
    assert {path.name: mode(path) for path in files} == {path.name: 0o600 for path in files}


def test_make_creates_var_0700_and_the_password_file_0600():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "mkdir -p -m 700 $@" in makefile
    assert "(umask 077; printf '%s\\n' \"$$password\" > $(VAR)/operator-password)" in makefile
    assert "chmod 600 $(VAR)/operator-password" in makefile


# --- DEBUG when serving -----------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_serve_on_loopback_leaves_debug_alone(host):
    assert is_loopback(host)
    assert debug_for_host(host, {}) == ({}, None)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10", "conduit.example.com"])
def test_serve_elsewhere_turns_an_unset_debug_off(host):
    assert debug_for_host(host, {}) == ({"DEBUG": "false"}, None)
    assert debug_for_host(host, {"DEBUG": "false"}) == ({}, None)


def test_serve_elsewhere_keeps_an_explicit_debug_with_a_warning():
    updates, warning = debug_for_host("0.0.0.0", {"DEBUG": "true"})
    assert updates == {}
    assert warning is not None and "DEBUG is on" in warning and "0.0.0.0" in warning


def test_serve_children_get_debug_off(tmp_path, monkeypatch):
    monkeypatch.delenv("DEBUG", raising=False)
    seen = tmp_path / "debug"
    code = (
        "import os, django; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'conduit_site.settings');"
        f"django.setup(); from django.conf import settings; open({str(seen)!r}, 'w').write(repr(settings.DEBUG));"
        # A failing exit at once: serve restarts a child that stops, and gives up on one that
        # cannot start (so the supervisor returns).
        "raise SystemExit(3)"
    )
    child = Child(name="console", argv=[sys.executable, "-c", code])
    command = BaseCommand(stdout=io.StringIO(), stderr=io.StringIO())
    env = debug_for_host("0.0.0.0", os.environ)[0]
    Supervisor(command, [child], stop_timeout=10, env=env).run(
        url="http://127.0.0.1:1/", probe=("127.0.0.1", 1)
    )
    assert seen.read_text() == "False"


# --- the deploy check -----------------------------------------------------------------------------------


def test_production_deploy_check_is_clean(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "DATABASE_URL", "TEST_DATABASE_NAME")}
    env.update(
        CONDUIT_ENV="production",
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="conduit.example.com",
        CONDUIT_VAR_DIR=str(tmp_path / "var"),
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_settings_enable_the_csp_middleware():
    assert "django.middleware.csp.ContentSecurityPolicyMiddleware" in settings.MIDDLEWARE
    assert "conduit_site.headers.NoStoreMiddleware" in settings.MIDDLEWARE


def test_static_files_are_cached_and_compressed(tmp_path):
    """WhiteNoise serves static files with a max-age and gzip (from the source folders here; in
    production the collected, hashed and compressed copies)."""
    status, headers = asyncio.run(asgi_get("/static/css/console.css"))
    assert status == 200
    assert b"max-age=3600" in headers[b"cache-control"]
    assert b"no-store" not in headers[b"cache-control"]
    assert headers[b"x-content-type-options"] == b"nosniff"


def test_production_collects_hashed_gzipped_static_files(tmp_path):
    env = {
        **child_env(),
        "CONDUIT_ENV": "production",
        "SECRET_KEY": "x" * 60,
        "ALLOWED_HOSTS": "conduit.example.com",
        "CONDUIT_VAR_DIR": str(tmp_path),
    }
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"],
        cwd=settings.BASE_DIR,
        env=env,
        check=True,
        timeout=300,
    )
    collected = tmp_path / "staticfiles"
    assert (collected / "staticfiles.json").exists()
    assert list((collected / "css").glob("console.*.css.gz"))
