"""``manage.py backup`` and ``restore``: a copy of the database and its way back."""

from __future__ import annotations

import os
import signal
import sqlite3
import stat
import subprocess
import threading
import time
from io import StringIO
from pathlib import Path

import factory
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from causal.clock import system_clock
from causal.models import Event
from conduit_site.doctor import loop_heartbeats
from tests.causal.factories import EventFactory
from tests.support import ROOT, child_env, free_port, manage_command, run_manage
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
def test_restore_is_accepted_at_once_after_serve_stops_cleanly(tmp_path):
    accept(5, "a")
    call_command("backup", str(tmp_path / "copy.sqlite3"), stdout=StringIO())
    accept(5, "b")
    server = subprocess.Popen(
        manage_command("serve", "--workers", "1", "--port", str(free_port())),
        cwd=ROOT,
        env=child_env(CONDUIT_VAR_DIR=str(tmp_path / "var"), LOG_LEVEL="WARNING"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert any("Conduit console" in line for line in server.stdout)
        beats = loop_heartbeats(now=system_clock())
        deadline = time.monotonic() + 30
        while not (beats["route_loop"].alive and beats["work_loop"].alive) and time.monotonic() < deadline:
            time.sleep(0.2)
            beats = loop_heartbeats(now=system_clock())
        assert beats["route_loop"].alive and beats["work_loop"].alive
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=60)
    assert server.returncode == 0
    out = StringIO()
    call_command("restore", str(tmp_path / "copy.sqlite3"), stdout=out)
    assert "restored 5 Events" in out.getvalue()


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


# --- a backup never touches the live files -------------------------------------------------------


def live_database() -> Path:
    return Path(connection.settings_dict["NAME"]).resolve()


def live_files() -> dict[str, tuple[int, int, int]]:
    """Each live file of the database (the database, its -wal, -shm, -journal and writers' lock)
    that exists: its inode, size and modification time, which a refused backup leaves alone."""
    database = live_database()
    found = {}
    for suffix in ("", "-wal", "-shm", "-journal", ".writers"):
        path = database.with_name(database.name + suffix)
        if path.exists():
            info = path.stat()
            found[suffix] = (info.st_ino, info.st_size, info.st_mtime_ns)
    return found


def leftovers(*folders: Path) -> list[Path]:
    return [path for folder in folders for path in folder.iterdir() if path.name.endswith(".partial")]


@pytest.fixture
def var_apart(settings, tmp_path):
    """CONDUIT_VAR_DIR somewhere else than the test database, so that only the rule on the live
    files can refuse a target beside the database."""
    settings.VAR_DIR = tmp_path / "var"
    settings.VAR_DIR.mkdir()
    return settings.VAR_DIR


def in_wal_mode() -> None:
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        assert cursor.fetchone()[0] == "wal"


LIVE_SPELLINGS = {
    "the-database": lambda db, here: str(db),
    "its-wal": lambda db, here: f"{db}-wal",
    "its-shm": lambda db, here: f"{db}-shm",
    "its-journal": lambda db, here: f"{db}-journal",
    "its-writers-lock": lambda db, here: f"{db}.writers",
    "a-relative-path": lambda db, here: os.path.relpath(f"{db}-wal", here),
    "a-path-through-dot-dot": lambda db, here: f"{db.parent}/./nowhere/../{db.name}-wal",
    "a-symlink": lambda db, here: str(symlinked(here / "latest.sqlite3", Path(f"{db}-wal"))),
    "a-symlinked-folder": lambda db, here: str(symlinked(here / "db-folder", db.parent) / f"{db.name}-shm"),
}


def symlinked(link: Path, to: Path) -> Path:
    link.symlink_to(to)
    return link


@sqlite_only
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("spelling", LIVE_SPELLINGS)
def test_a_backup_refuses_the_live_database_files_in_every_spelling(
    tmp_path, monkeypatch, var_apart, spelling
):
    accept(20, "a")
    in_wal_mode()
    database = live_database()
    monkeypatch.chdir(tmp_path)
    target = LIVE_SPELLINGS[spelling](database, tmp_path)
    before = live_files()
    assert "-wal" in before and "-shm" in before
    with pytest.raises(CommandError, match="of the live database .*: nothing was written"):
        call_command("backup", target, stdout=StringIO())
    assert live_files() == before
    assert leftovers(database.parent, tmp_path) == []
    assert len(seqs()) == 20


@sqlite_only
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "spelling", ["a-new-file", "a-live-file", "a-relative-path", "a-symlinked-folder", "the-folder"]
)
def test_a_backup_refuses_any_target_inside_the_var_dir(tmp_path, monkeypatch, var_apart, spelling):
    accept(5, "a")
    (var_apart / "backups").mkdir()
    channels = var_apart / "channels.sqlite3"
    channels.write_bytes(b"the channel layer's")
    monkeypatch.chdir(var_apart / "backups")
    target = {
        "a-new-file": var_apart / "backups" / "copy.sqlite3",
        "a-live-file": channels,
        "a-relative-path": Path("copy.sqlite3"),
        "a-symlinked-folder": symlinked(tmp_path / "elsewhere", var_apart / "backups") / "copy.sqlite3",
        "the-folder": var_apart,
    }[spelling]
    with pytest.raises(CommandError, match="inside CONDUIT_VAR_DIR .*: nothing was written"):
        call_command("backup", str(target), stdout=StringIO())
    assert sorted(path.name for path in (var_apart / "backups").iterdir()) == []
    assert channels.read_bytes() == b"the channel layer's"
    # Outside it, the same command writes the backup.
    call_command("backup", str(tmp_path / "copy.sqlite3"), stdout=StringIO())
    assert copy_events(tmp_path / "copy.sqlite3") == seqs()


@sqlite_only
@pytest.mark.django_db(transaction=True)
def test_a_backup_in_its_own_process_refuses_the_live_wal_and_every_event_stays(tmp_path):
    """The command as an operator runs it, while the database holds commits not yet checkpointed
    into the database file: the write-ahead log that holds them is never replaced."""
    accept(30, "a")
    in_wal_mode()
    database = live_database()
    wal = Path(f"{database}-wal")
    before = live_files()
    done = run_manage("backup", str(wal), CONDUIT_VAR_DIR=str(tmp_path / "var"))
    assert done.returncode != 0
    assert "the write-ahead log of the live database" in done.stderr and "nothing was written" in done.stderr
    assert live_files()["-wal"][:2] == before["-wal"][:2]  # the same file, as long as before
    assert leftovers(database.parent) == []
    fresh = sqlite3.connect(database)
    try:
        assert fresh.execute("SELECT count(*) FROM causal_event").fetchone()[0] == 30
    finally:
        fresh.close()


@sqlite_only
@pytest.mark.django_db(transaction=True)
def test_restore_refuses_the_live_database_under_another_name(tmp_path):
    """A hard link to the database file is the database: read as a backup it lacks the commits
    still in the write-ahead log, and putting it back would drop them."""
    accept(10, "a")
    in_wal_mode()
    database = live_database()
    link = database.with_name(f"{database.name}.restore-test-link")
    os.link(database, link)
    try:
        for source in (link, symlinked(tmp_path / "link.sqlite3", database), Path(f"{database}-wal")):
            with pytest.raises(CommandError, match="of the live database .*: nothing was restored"):
                call_command("restore", str(source), stdout=StringIO())
    finally:
        link.unlink()
    assert len(seqs()) == 10
    # A backup inside CONDUIT_VAR_DIR (where backups were once suggested) is still restored.
    call_command("backup", str(tmp_path / "copy.sqlite3"), stdout=StringIO())
    kept = database.with_name(f"{database.name}.restore-test-copy")
    os.replace(tmp_path / "copy.sqlite3", kept)
    try:
        call_command("restore", str(kept), stdout=StringIO())
    finally:
        kept.unlink()
    assert len(seqs()) == 10


@pytest.mark.skipif("connection.vendor != 'postgresql'")
@pytest.mark.django_db
def test_on_postgresql_backup_refuses_a_dump_inside_the_var_dir(var_apart):
    out = StringIO()
    with pytest.raises(CommandError, match="inside CONDUIT_VAR_DIR .*: nothing was written"):
        call_command("backup", str(var_apart / "operator-password"), stdout=out)
    assert "pg_dump" not in out.getvalue()
