"""A loop that starts while the database server restarts waits for it
(bench/pg_restart.py found route and work loops started during a restart exiting at once)."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import OperationalError, connection

from infra import connections as module
from infra.connections import START_WAIT_SECONDS, database_wait


class Restarting:
    """``ensure_connection`` refused ``times`` times (the server shutting down or starting up)."""

    def __init__(self, times: int, real=None) -> None:
        self.times, self.real, self.calls = times, real, 0

    def __call__(self) -> None:
        self.calls += 1
        if self.calls <= self.times:
            raise OperationalError("FATAL:  the database system is starting up")
        if self.real is not None:
            self.real()


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    def wait(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


def test_a_starting_loop_waits_for_a_database_that_is_restarting(monkeypatch):
    refused = Restarting(times=3)
    monkeypatch.setattr(connection, "ensure_connection", refused)
    monkeypatch.setattr(connection, "close", lambda: None)
    clock = FakeClock()
    database_wait(wait=clock.wait, clock=clock)
    assert refused.calls == 4
    assert clock.waits == [module.RETRY_SECONDS] * 3


def test_a_database_still_down_after_the_wait_ends_the_start(monkeypatch):
    """An unreachable database (a bad setting) still ends the loop, soon enough for serve's
    supervisor to take it for a child that cannot start (10 s)."""
    monkeypatch.setattr(connection, "ensure_connection", Restarting(times=10**6))
    monkeypatch.setattr(connection, "close", lambda: None)
    clock = FakeClock()
    with pytest.raises(OperationalError):
        database_wait(wait=clock.wait, clock=clock)
    assert START_WAIT_SECONDS <= sum(clock.waits) <= START_WAIT_SECONDS + module.RETRY_SECONDS
    assert START_WAIT_SECONDS + module.RETRY_SECONDS < 10


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("command", ["route_loop", "work_loop"])
def test_route_and_work_loops_start_once_the_database_is_back(monkeypatch, command):
    """The server refuses the first connections as the loop starts; the loop waits, then runs
    its pass (before, its first query raised and the process exited)."""
    connection.close()
    refused = Restarting(times=2, real=connection.ensure_connection)
    monkeypatch.setattr(connection, "ensure_connection", refused)
    monkeypatch.setattr(module, "RETRY_SECONDS", 0.0)
    call_command(command, "--once")
    assert refused.calls > 2
