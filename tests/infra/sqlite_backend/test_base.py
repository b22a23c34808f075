"""On SQLite, write transactions take turns on a lock file beside the
database (``infra.sqlite_backend``), so a writer that writes again and again (the route
loop draining a backlog) no longer starves acceptances asleep in SQLite's busy handler.

The backend is exercised on an SQLite database of each test's own (whatever database the run
uses), through the backend's own connections; the read snapshot, on the run's database."""

from __future__ import annotations

import fcntl
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.db.backends.sqlite3.base import FORMAT_QMARK_REGEX
from django.db.utils import OperationalError

from infra.snapshots import read_snapshot
from infra.sqlite_backend.base import DatabaseWrapper, qmark_style


@pytest.fixture
def database(tmp_path, django_db_blocker) -> Iterator[Path]:
    """An SQLite database of this test's own, with a table to write to (not the run's test
    database: pytest-django's guard is lifted for it)."""
    path = tmp_path / "turns.sqlite3"
    with django_db_blocker.unblock():
        first = connect(path)
        try:
            first.cursor().execute("CREATE TABLE t (k TEXT)")
        finally:
            first.close()
        yield path


def connect(path: Path, *, timeout: float = 30) -> DatabaseWrapper:
    """A connection as the project configures SQLite (``BEGIN IMMEDIATE`` writes, WAL)."""
    return DatabaseWrapper(
        {
            **settings.DATABASES["default"],
            "ENGINE": "infra.sqlite_backend",
            "NAME": str(path),
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": timeout,
                "init_command": "PRAGMA journal_mode=WAL;",
            },
            "TEST": {},
        },
        alias=f"turns-{threading.get_ident()}",
    )


def begin(wrapper: DatabaseWrapper) -> None:
    """Start a transaction as ``transaction.atomic()`` does."""
    wrapper.set_autocommit(False, force_begin_transaction_with_broken_autocommit=True)


def end(wrapper: DatabaseWrapper, *, commit: bool = True) -> None:
    wrapper.commit() if commit else wrapper.rollback()
    wrapper.set_autocommit(True)


def turn_free(database: Path) -> bool:
    """Whether another open file could take the turn now (and gives it back at once)."""
    fd = os.open(f"{database}.writers", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def rows(wrapper: DatabaseWrapper) -> list[str]:
    with wrapper.cursor() as cursor:
        cursor.execute("SELECT k FROM t ORDER BY rowid")
        return [row[0] for row in cursor.fetchall()]


def test_a_write_transaction_holds_the_turn_until_it_commits_or_rolls_back(database):
    writer = connect(database)
    try:
        begin(writer)
        writer.cursor().execute("INSERT INTO t VALUES ('kept')")
        assert not turn_free(database)
        end(writer)
        assert turn_free(database)
        begin(writer)
        writer.cursor().execute("INSERT INTO t VALUES ('rolled back')")
        assert not turn_free(database)
        end(writer, commit=False)
        assert turn_free(database)
        assert rows(writer) == ["kept"]
    finally:
        writer.close()


def test_the_lock_file_lies_beside_the_database_readable_by_its_owner_only(database):
    writer = connect(database)
    try:
        begin(writer)
        end(writer)
    finally:
        writer.close()
    assert stat.S_IMODE(Path(f"{database}.writers").stat().st_mode) == 0o600


def test_a_writer_waits_for_its_turn_and_fails_as_sqlite_would_after_the_busy_timeout(database):
    holder = os.open(f"{database}.writers", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(holder, fcntl.LOCK_EX)
    impatient = connect(database, timeout=0.3)
    try:
        with pytest.raises(OperationalError, match="database is locked"):
            begin(impatient)
        fcntl.flock(holder, fcntl.LOCK_UN)
        impatient.set_autocommit(True)
        begin(impatient)
        assert not turn_free(database)  # its turn, now that the holder let go
        end(impatient, commit=False)
        assert turn_free(database)
    finally:
        impatient.close()
        os.close(holder)


def test_a_writer_waiting_for_its_turn_goes_once_the_holder_commits(database):
    order: list[str] = []
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        holder = connect(database)
        try:
            begin(holder)
            holder.cursor().execute("INSERT INTO t VALUES ('holder')")
            holding.set()
            release.wait(10)
            order.append("holder commits")
            end(holder)
        finally:
            holder.close()

    def wait_then_write() -> None:
        holding.wait(10)
        writer = connect(database)
        try:
            begin(writer)
            order.append("writer has its turn")
            writer.cursor().execute("INSERT INTO t VALUES ('writer')")
            end(writer)
        finally:
            writer.close()

    threads = [threading.Thread(target=hold), threading.Thread(target=wait_then_write)]
    for thread in threads:
        thread.start()
    holding.wait(10)
    order.append("released")
    release.set()
    for thread in threads:
        thread.join(30)
    assert order == ["released", "holder commits", "writer has its turn"]
    reader = connect(database)
    try:
        assert rows(reader) == ["holder", "writer"]
    finally:
        reader.close()


def test_threads_of_one_process_queue_for_the_turn_within_the_busy_timeout(database):
    """A thread waits on its process's lock behind another thread of the process that holds
    the turn (not polling the file), fails after the busy timeout as SQLite would, and has
    its turn once the holder commits."""
    holder = connect(database)
    outcome: list[str] = []

    def write(timeout: float) -> None:
        writer = connect(database, timeout=timeout)
        try:
            begin(writer)
            writer.cursor().execute("INSERT INTO t VALUES ('writer')")
            end(writer)
            outcome.append("written")
        except OperationalError as error:
            outcome.append(str(error))
        finally:
            writer.close()

    try:
        begin(holder)
        holder.cursor().execute("INSERT INTO t VALUES ('holder')")
        impatient = threading.Thread(target=write, args=(0.3,))
        impatient.start()
        impatient.join(30)
        assert outcome == ["database is locked"]
        patient = threading.Thread(target=write, args=(30,))
        patient.start()
        patient.join(0.3)
        assert patient.is_alive() and outcome == ["database is locked"]  # queued behind the holder
        end(holder)
        patient.join(30)
        assert outcome == ["database is locked", "written"]
        assert rows(holder) == ["holder", "writer"]
    finally:
        holder.close()


def test_a_deferred_transaction_takes_no_turn(database):
    holder = os.open(f"{database}.writers", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(holder, fcntl.LOCK_EX)
    reader = connect(database, timeout=0.3)
    try:
        reader.ensure_connection()
        reader.transaction_mode = "DEFERRED"
        begin(reader)  # would fail after 0.3 s if it waited for a turn
        assert rows(reader) == []
        end(reader, commit=False)
    finally:
        reader.close()
        os.close(holder)


@pytest.mark.django_db(transaction=True)
def test_a_read_snapshot_on_a_new_connection_takes_no_write_lock():
    """On the run's database: SQLite begins it ``DEFERRED`` (no turn, no write lock, even on a
    connection not opened yet, whose connecting sets the configured mode again); PostgreSQL
    runs it ``REPEATABLE READ``."""
    connection.close()
    with read_snapshot(), connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            assert turn_free(Path(connection.settings_dict["NAME"]))
            cursor.execute("SELECT 1")
        else:
            cursor.execute("SHOW transaction_isolation")
            assert cursor.fetchone()[0] == "repeatable read"
    assert not connection.in_atomic_block


# The SQLite backend turns Django's ``%s`` placeholders into SQLite's ``?``
# as Django's own backend does (``infra.sqlite_backend``), remembering each statement's
# conversion, and without a regular expression when the statement holds no escaped ``%``.
STATEMENTS = [
    "SELECT 1",
    "SELECT a FROM t WHERE b = %s",
    "INSERT INTO t (a, b) VALUES (%s, %s), (%s, %s), (%s, %s)",
    "SELECT a FROM t WHERE b LIKE '%%x%%' AND c = %s",
    "SELECT '%%s', %s",
    "SELECT '100%%' || %s",
    "SELECT '%d', %s",
    "SELECT %s%s",
    "SELECT '%%%s'",
]


@pytest.mark.parametrize("statement", STATEMENTS)
def test_placeholders_convert_as_djangos_sqlite_backend_converts_them(statement):
    assert qmark_style(statement) == FORMAT_QMARK_REGEX.sub("?", statement).replace("%%", "%")


def test_a_window_statement_converts_every_placeholder():
    rows = ", ".join(["(%s, %s, %s)"] * 500)
    converted = qmark_style(f"INSERT INTO t (a, b, c) VALUES {rows}")
    assert converted.count("?") == 1500
    assert "%" not in converted
