"""Production settings: a clean deploy check and hashed, compressed, cached static files."""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
from pathlib import Path

from django.conf import settings

from tests.support import asgi_get, child_env

ROOT = Path(__file__).resolve().parents[2]


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
