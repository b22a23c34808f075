"""``manage.py backup`` and ``restore``: a copy of the database and its way back."""

from __future__ import annotations

import sqlite3
import stat
import threading
from io import StringIO

import factory
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from causal.clock import system_clock
from causal.models import Event
from tests.causal.factories import EventFactory
from worklife.heartbeat import WorkLoopHeartbeat, heartbeat_write

sqlite_only = pytest.mark.skipif("connection.vendor != 'sqlite'")


def accept(n: int, prefix: str) -> None:
    EventFactory.create_batch(n, source="backup", envelope_id=factory.Sequence(lambda i: f"{prefix}{i}"))


def seqs() -> list[int]:
    return list(Event.objects.order_by("seq").values_list("seq", flat=True))


def copy_events(path) -> list[int]:
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        return [row[0] for row in db.execute("SELECT seq FROM causal_event ORDER BY seq")]
    finally:
        db.close()


@pytest.fixture
def writes():
    """Another connection commits row after row while the test runs."""
    stop = threading.Event()
    written = []

    def write():
        db = sqlite3.connect(connection.settings_dict["NAME"], timeout=30)
        n = 0
        while not stop.is_set():
            db.execute(
                "INSERT INTO causal_kv (namespace, key, value, version, updated_at) VALUES (?, ?, ?, 1, ?)",
                ("tests.backup", f"k{n}", "{}", "2026-01-05 12:00:00"),
            )
            db.commit()
            n += 1
            written.append(n)
            stop.wait(0.002)  # leave the test's own writes their turns
        db.close()

    thread = threading.Thread(target=write)
    thread.start()
    yield written
    stop.set()
    thread.join()


@sqlite_only
@pytest.mark.django_db(transaction=True)
def test_a_backup_under_writes_passes_integrity_check_and_shows_the_same_events(tmp_path, writes):
    accept(200, "a")
    while len(writes) < 20:  # the writer is under way
        threading.Event().wait(0.01)
    out = StringIO()
    call_command("backup", str(tmp_path / "copy.sqlite3"), stdout=out)
    assert "backed up 200 Events" in out.getvalue()
    assert copy_events(tmp_path / "copy.sqlite3") == seqs()
    assert stat.S_IMODE((tmp_path / "copy.sqlite3").stat().st_mode) == 0o600
    assert list(tmp_path.iterdir()) == [tmp_path / "copy.sqlite3"]


@sqlite_only
@pytest.mark.django_db(transaction=True)
def test_a_restored_copy_shows_the_events_of_the_backup(tmp_path):
    accept(30, "a")
    before = seqs()
    call_command("backup", str(tmp_path / "copy.sqlite3"), stdout=StringIO())
    accept(10, "b")
    Event.objects.filter(seq=before[0]).delete()
    out = StringIO()
    call_command("restore", str(tmp_path / "copy.sqlite3"), stdout=out)
    assert "restored 30 Events" in out.getvalue()
    assert seqs() == before
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA integrity_check")
        assert cursor.fetchall() == [("ok",)]


@sqlite_only
@pytest.mark.django_db(transaction=True)
def test_restore_is_refused_while_a_loop_beats(tmp_path):
    accept(5, "a")
    call_command("backup", str(tmp_path / "copy.sqlite3"), stdout=StringIO())
    accept(5, "b")
    heartbeat_write(
        WorkLoopHeartbeat(
            loop="host:1:abc",
            at=system_clock(),
            slots=1,
            running=0,
            started=0,
            completed=0,
            failed=0,
            refused=0,
            lost=0,
            stopped=False,
        ),
        clock=system_clock,
    )
    with pytest.raises(CommandError, match="loops are running"):
        call_command("restore", str(tmp_path / "copy.sqlite3"))
    assert Event.objects.count() == 10


@sqlite_only
@pytest.mark.django_db(transaction=True)
def test_restore_refuses_a_damaged_file_and_a_foreign_database(tmp_path):
    accept(5, "a")
    junk = tmp_path / "junk.sqlite3"
    junk.write_bytes(b"SQLite format 3\x00" + b"\xff" * 5000)
    with pytest.raises(CommandError, match="not an SQLite database|integrity_check"):
        call_command("restore", str(junk))
    foreign = tmp_path / "foreign.sqlite3"
    db = sqlite3.connect(foreign)
    db.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY)")
    db.commit()
    db.close()
    with pytest.raises(CommandError, match="not a Conduit database"):
        call_command("restore", str(foreign))
    assert Event.objects.count() == 5


@pytest.mark.skipif("connection.vendor != 'postgresql'")
@pytest.mark.django_db
def test_on_postgresql_backup_prints_the_pg_dump_line_and_writes_nothing(tmp_path):
    out = StringIO()
    call_command("backup", str(tmp_path / "dump"), stdout=out)
    assert "pg_dump --format=custom" in out.getvalue()
    assert f"--dbname={connection.settings_dict['NAME']}" in out.getvalue()
    assert list(tmp_path.iterdir()) == []
