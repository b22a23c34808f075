"""Shared fixtures: a fake clock and the database on whichever backend DATABASE_URL names."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest


def pytest_configure(config):
    """A fresh clone has no ``var/``: create it (and the folder of a SQLite test database named
    elsewhere) before the test database is, or SQLite answers "unable to open database file"."""
    from django.conf import settings

    folders = [Path(settings.VAR_DIR)]
    database = settings.DATABASES["default"]
    test_name = str(database.get("TEST", {}).get("NAME") or "")
    if database["ENGINE"] in (
        "django.db.backends.sqlite3",
        "infra.sqlite_backend",
    ) and test_name not in ("", ":memory:"):
        if not test_name.startswith("file:"):
            folders.append(Path(test_name).parent)
    for folder in folders:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """The test database, and on PostgreSQL no session left on it when it is dropped: a
    connection another thread of the run left open (a live-server request's, seen with the
    browser tests) makes ``DROP DATABASE`` fail, and each run would leave its database behind."""
    yield
    from django.db import connection, connections

    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock():
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        connections.close_all()


class FakeClock:
    """An injectable clock that only moves when told to."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 1, 5, 12, 0, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float = 0, **kwargs: float) -> datetime:
        self.now = self.now + timedelta(seconds=seconds, **kwargs)
        return self.now

    def set(self, when: datetime) -> datetime:
        self.now = when
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(autouse=True)
def live_reader_stopped():
    """The web process's reader of the live-update outbox, which a test's first websocket
    starts, stops with the test (it reads the test's database on a thread of its own)."""
    yield
    from conduit_site.live import reader

    reader.stop()


@pytest.fixture
def test_handlers(settings):
    """Register the route handlers tests use (``tests.routing.routerkit.HANDLERS``) and reset
    the scripted handler's switches around the test."""
    from tests.routing import sample_handlers
    from tests.routing.routerkit import HANDLERS

    settings.CONDUIT_ROUTE_HANDLERS = dict(HANDLERS)
    sample_handlers.BROKEN.clear()
    sample_handlers.CALLS.clear()
    sample_handlers.RELEASE.clear()
    yield
    sample_handlers.RELEASE.set()


@pytest.fixture(autouse=True)
def empty_cache():
    """Each test starts with an empty cache: the database is rolled back after a test, so
    what a test cached (the trends' settled buckets, the configurations read, the requests
    counted against the API's rate limits, whose ids repeat from test to test) must not outlive
    it."""
    from django.core.cache import cache

    from routing.config.selectors import CONFIGURATIONS_KEPT
    from routing.receivers.selectors import RECEIVERS_KEPT

    cache.clear()
    CONFIGURATIONS_KEPT.clear()
    RECEIVERS_KEPT.clear()
