"""Issue 12 items 1 and 4: on SQLite, write transactions take turns on a lock file beside the
database (``conduit_site.sqlite_backend``), so a writer that writes again and again (the route
loop draining a backlog) no longer starves acceptances asleep in SQLite's busy handler."""

from __future__ import annotations

import fcntl
import os
import stat
import threading
from pathlib import Path

import pytest
from django.db import connection, transaction
from django.db.utils import OperationalError

from causal.models import KV
from conduit_site.snapshots import read_snapshot
from conduit_site.sqlite_backend.base import DatabaseWrapper
from tests.causal.factories import KVFactory

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "sqlite", reason="turns are SQLite's (PostgreSQL has row locks)"),
]


def lock_path() -> Path:
    return Path(f"{connection.settings_dict['NAME']}.writers")


def turn_free() -> bool:
    """Whether another open file could take the turn now (and gives it back at once)."""
    fd = os.open(lock_path(), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def in_thread(target) -> list:
    """Run ``target`` on a thread of its own (its own connection); returns what it returned
    or raised."""
    outcome: list = []

    def run() -> None:
        try:
            outcome.append(target())
        except Exception as exc:  # noqa: BLE001 - handed to the test to assert on
            outcome.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    return outcome


def write(key: str) -> None:
    KVFactory(namespace="turns", key=key)


def test_i12_a_write_transaction_holds_the_turn_until_it_commits_or_rolls_back():
    with transaction.atomic():
        write("a")
        assert not turn_free()
    assert turn_free()
    with pytest.raises(RuntimeError), transaction.atomic():
        write("b")
        assert not turn_free()
        raise RuntimeError("rolled back")
    assert turn_free()
    assert list(KV.objects.filter(namespace="turns").values_list("key", flat=True)) == ["a"]


def test_i12_the_lock_file_lies_beside_the_database_readable_by_its_owner_only():
    with transaction.atomic():
        write("a")
    assert stat.S_IMODE(lock_path().stat().st_mode) == 0o600


def test_i12_a_writer_waits_for_its_turn_and_fails_as_sqlite_would_after_the_busy_timeout():
    settings = {
        **connection.settings_dict,
        "OPTIONS": {**connection.settings_dict["OPTIONS"], "timeout": 0.3},
    }
    holder = os.open(lock_path(), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(holder, fcntl.LOCK_EX)
    impatient = DatabaseWrapper(settings, alias="impatient")
    try:
        with pytest.raises(OperationalError, match="database is locked"):
            impatient.set_autocommit(False, force_begin_transaction_with_broken_autocommit=True)
        fcntl.flock(holder, fcntl.LOCK_UN)
        impatient.set_autocommit(True)
        impatient.set_autocommit(False, force_begin_transaction_with_broken_autocommit=True)
        assert not turn_free()  # its turn, now that the holder let go
        impatient.rollback()
        assert turn_free()
    finally:
        impatient.close()
        os.close(holder)


def test_i12_a_writer_waiting_for_its_turn_goes_once_the_holder_commits():
    order: list[str] = []
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with transaction.atomic():
            write("holder")
            holding.set()
            release.wait(10)
            order.append("holder commits")

    def wait_then_write() -> None:
        holding.wait(10)
        with transaction.atomic():
            order.append("writer has its turn")
            write("writer")

    threads = [threading.Thread(target=lambda f=f: in_thread(f)) for f in (hold, wait_then_write)]
    for thread in threads:
        thread.start()
    holding.wait(10)
    order.append("released")
    release.set()
    for thread in threads:
        thread.join(30)
    assert order == ["released", "holder commits", "writer has its turn"]
    assert KV.objects.filter(namespace="turns").count() == 2


def test_i12_a_read_snapshot_takes_no_turn():
    holder = os.open(lock_path(), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:

        def read() -> int:
            with read_snapshot():
                return KV.objects.count()

        assert in_thread(read) == [0]
    finally:
        os.close(holder)
