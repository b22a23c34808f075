"""``serve`` and ``DEBUG``: left alone on loopback, off by default where other machines can
connect, off in the children it starts."""

from __future__ import annotations

import io
import os
import sys

import pytest
from django.core.management.base import BaseCommand

from conduit_site.management.commands.serve import debug_for_host, is_loopback
from conduit_site.supervision.supervisor import Child, Supervisor


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
