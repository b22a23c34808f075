"""Backups of the database: ``manage.py backup PATH`` and ``restore PATH``.

SQLite in WAL mode cannot be copied as a file while it is written (the copy may miss pages still
in the ``-wal`` file, or mix two states): both directions go through SQLite's online backup API,
which copies a consistent snapshot page by page while writers go on (a backup), or replaces the
database's content in one write transaction (a restore). A backup is written mode 0600 beside its
final name and renamed into place once its ``integrity_check`` passed. PostgreSQL is backed up with
its own tools: :func:`pg_dump_command` says the command line.

A backup never lands on a live file: its target may not be the database or a file SQLite keeps
beside it (``-wal``, ``-shm``, ``-journal``, the writers' lock), however spelled (relative, through
``..``, a symbolic link, a hard link), nor anything inside ``CONDUIT_VAR_DIR``, which holds the live
files (the database, the operator's password) and shares their fate: a backup
is kept somewhere else (:func:`backup_target_check`). A restore reads no live file as its backup.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import connection, connections

from causal.clock import Clock
from conduit_site.doctor import HEARTBEAT_STALE, loop_heartbeats
from infra.private_files import FILE_MODE

# The tables a file must hold to be taken for a Conduit database.
CONDUIT_TABLES = ("django_migrations", "causal_event", "worklife_work", "routing_routerecord")
# The whole database in one step of the backup API: a step copies one snapshot (a reader in WAL
# mode blocks no writer), where several steps restart whenever another connection writes between
# them, and under steady writes might never end.
BACKUP_PAGES = -1
# The files of a database in use, by what follows its name: SQLite's (and the writers' turn lock,
# ``infra.sqlite_backend``). Replacing one under a running Conduit loses acknowledged commits.
LIVE_FILES = {
    "": "the file",
    "-wal": "the write-ahead log",
    "-shm": "the shared-memory index",
    "-journal": "the rollback journal",
    ".writers": "the writers' lock",
}


class BackupError(Exception):
    """A backup or restore that cannot be done; the message says why."""


@dataclass(frozen=True, slots=True)
class BackupResult:
    path: Path
    bytes: int
    events: int


def is_sqlite() -> bool:
    return connection.vendor == "sqlite"


def sqlite_path() -> Path:
    """The file of the SQLite database in use."""
    name = str(connection.settings_dict["NAME"])
    if connection.is_in_memory_db() or name.startswith("file:"):
        raise BackupError("the database is in memory: there is no file to back up or restore")
    return Path(name)


def pg_dump_command(path: str) -> str:
    """The ``pg_dump`` line that backs up the PostgreSQL database in use to ``path`` (its
    password, if any, goes in ``PGPASSWORD`` or ``~/.pgpass``, never on the command line)."""
    db = connection.settings_dict
    args = ["pg_dump", "--format=custom", f"--file={path}"]
    for option, key in (("--host", "HOST"), ("--port", "PORT"), ("--username", "USER")):
        if db.get(key):
            args.append(f"{option}={db[key]}")
    args.append(f"--dbname={db['NAME']}")
    return shlex.join(args)


def _check(db: sqlite3.Connection, what: str) -> None:
    """Refuse a file that fails ``integrity_check`` or lacks Conduit's tables."""
    try:
        verdict = [row[0] for row in db.execute("PRAGMA integrity_check")]
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as exc:
        raise BackupError(f"{what} is not an SQLite database: {exc}") from exc
    if verdict != ["ok"]:
        raise BackupError(f"{what} fails integrity_check: {'; '.join(verdict[:5])}")
    missing = [table for table in CONDUIT_TABLES if table not in tables]
    if missing:
        raise BackupError(f"{what} is not a Conduit database (no {', '.join(missing)} table)")


def _same_file(one: Path, other: Path) -> bool:
    """Whether both paths name one file (a hard link, a bind mount); ``False`` when one is missing."""
    try:
        return os.path.samefile(one, other)
    except OSError:
        return False


def live_file(path: str | os.PathLike[str]) -> str | None:
    """What ``path`` is of the SQLite database in use (:data:`LIVE_FILES`), or ``None``: compared
    once relative paths, ``..`` and symbolic links are resolved, and by file identity too."""
    database = sqlite_path().resolve()
    candidate = Path(path).resolve()
    for suffix, what in LIVE_FILES.items():
        live = database.with_name(database.name + suffix)
        beside = candidate.parent == live.parent or _same_file(candidate.parent, live.parent)
        if (beside and candidate.name == live.name) or _same_file(candidate, live):
            return what
    return None


def _inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` (resolved) is ``folder`` or lies under it, however either is reached."""
    folder = folder.resolve()
    return any(ancestor == folder or _same_file(ancestor, folder) for ancestor in (path, *path.parents))


def backup_target_check(path: str | os.PathLike[str]) -> Path:
    """The resolved ``path`` a backup may be written to, or :class:`BackupError` saying why not:
    a live file of the database (:func:`live_file`, on SQLite), anything inside
    ``CONDUIT_VAR_DIR``, or a folder."""
    target = Path(path).resolve()
    if is_sqlite():
        what = live_file(target)
        if what is not None:
            raise BackupError(
                f"{path} is {what} of the live database {sqlite_path().resolve()}, which a backup "
                "written there would destroy with what Conduit acknowledged: nothing was written "
                "(write backups outside CONDUIT_VAR_DIR)"
            )
    var_dir = Path(settings.VAR_DIR)
    if _inside(target, var_dir):
        raise BackupError(
            f"{path} is inside CONDUIT_VAR_DIR ({var_dir.resolve()}), which holds the live files (the "
            "database and its -wal and -shm, the operator's password) and "
            "shares their disk: nothing was written. Write backups to a folder of their own outside it"
        )
    if target.is_dir():
        raise BackupError(f"{path} is a folder: name the backup's file in it; nothing was written")
    return target


def database_backup(*, path: str | os.PathLike[str]) -> BackupResult:
    """Copy the SQLite database to ``path`` (mode 0600) with the online backup API, while the
    loops and the web server go on writing; the copy is checked before it takes its name.
    A target :func:`backup_target_check` refuses is refused first, nothing written."""
    source_path = sqlite_path()
    target = backup_target_check(path)
    if not target.parent.is_dir():
        raise BackupError(f"{target.parent} is not a folder")
    partial = target.with_name(f".{target.name}.partial")
    with contextlib.suppress(FileNotFoundError):
        partial.unlink()
    os.close(os.open(partial, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, FILE_MODE))
    try:
        source = sqlite3.connect(f"file:{source_path}?mode=ro", uri=True, timeout=30)
        copy = sqlite3.connect(partial)
        try:
            source.backup(copy, pages=BACKUP_PAGES)
            # A copy that opens in rollback-journal mode is one file, whatever the source's mode.
            copy.execute("PRAGMA journal_mode=DELETE")
            _check(copy, "the copy")
            events = copy.execute("SELECT count(*) FROM causal_event").fetchone()[0]
        finally:
            copy.close()
            source.close()
        os.chmod(partial, FILE_MODE)
        os.replace(partial, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
        raise
    return BackupResult(path=target, bytes=target.stat().st_size, events=events)


def loops_running(*, clock: Clock) -> list[str]:
    """The kinds of loop with a heartbeat fresher than doctor's staleness limit."""
    beats = loop_heartbeats(now=clock())
    return [f"{beat.alive} {kind}" for kind, beat in beats.items() if beat.alive]


def database_restore(*, path: str | os.PathLike[str], clock: Clock) -> BackupResult:
    """Replace the SQLite database's content with the backup at ``path``, in one transaction of
    the backup API. Refused while a route or work loop beats (their heartbeats are fresher than
    doctor's limit), for a live file of the database (:func:`live_file`: the database under
    another name lacks the commits still in its write-ahead log), and for a file that fails
    ``integrity_check`` or is not a Conduit database."""
    target_path = sqlite_path()
    source_file = Path(path)
    what = live_file(source_file)
    if what is not None:
        raise BackupError(
            f"{source_file} is {what} of the live database {target_path.resolve()}, not a backup: "
            "nothing was restored"
        )
    if not source_file.is_file():
        raise BackupError(f"{source_file} is not a file")
    running = loops_running(clock=clock)
    if running:
        seconds = int(HEARTBEAT_STALE.total_seconds())
        raise BackupError(
            f"loops are running ({', '.join(running)} with a heartbeat in the last {seconds} s): "
            "stop serve and every route_loop and work_loop first"
        )
    source = sqlite3.connect(f"file:{source_file}?mode=ro", uri=True)
    try:
        _check(source, str(source_file))
        events = source.execute("SELECT count(*) FROM causal_event").fetchone()[0]
        # Django's connections let go of the file; the backup API then takes the write lock and
        # swaps every page in one transaction (WAL included): a reader sees the old or the new.
        connections.close_all()
        live = sqlite3.connect(target_path, timeout=30)
        try:
            source.backup(live)
        finally:
            live.close()
    finally:
        source.close()
    # The next connection tightens the file's mode again (infra.private_files).
    return BackupResult(path=target_path, bytes=target_path.stat().st_size, events=events)
