"""Shared fixtures: a fake clock and the database on whichever backend DATABASE_URL names."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest


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
def live_updates_sent():
    """Each test's live updates go out before the next test starts (the router publishes them
    from a thread of its own after commit)."""
    yield
    from routing.live import drain

    drain(timeout=10)


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
