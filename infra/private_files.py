"""Files that hold Events and credentials are readable by their owner only.

The SQLite database and the operator's password file live in ``CONDUIT_VAR_DIR`` (``var/``).
That folder is created mode 0700 (and an existing one of ours is tightened to it), and those files
mode 0600: SQLite creates a database with the process's umask (often 0644), so a file we open
ourselves is created beforehand (:func:`private_file`) and the database is tightened right after
Django opens it (with its ``-wal`` and ``-shm`` companions); inside a 0700 folder no one else
could open it meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Any

DIRECTORY_MODE = 0o700
FILE_MODE = 0o600
SQLITE_COMPANIONS = ("", "-wal", "-shm", "-journal")


def _tighten(path: Path, mode: int) -> None:
    """Remove every permission bit beyond ``mode`` from ``path`` when this user owns it."""
    with contextlib.suppress(FileNotFoundError):
        info = path.stat()
        if info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) & ~mode:
            path.chmod(stat.S_IMODE(info.st_mode) & mode)


def private_directory(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` (and its parents) mode 0700, or tighten it to 0700 if it exists and is ours."""
    directory = Path(path)
    directory.mkdir(mode=DIRECTORY_MODE, parents=True, exist_ok=True)
    _tighten(directory, DIRECTORY_MODE)
    return directory


def private_file(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` empty with mode 0600 unless it exists; an existing one of ours is tightened
    to 0600. Its folder is created 0700 if missing."""
    file = Path(path)
    if not file.parent.exists():
        private_directory(file.parent)
    fd = os.open(file, os.O_CREAT | os.O_WRONLY | getattr(os, "O_CLOEXEC", 0), FILE_MODE)
    os.close(fd)
    _tighten(file, FILE_MODE)
    return file


def sqlite_database_path(settings_dict: dict[str, Any]) -> Path | None:
    """The file of an SQLite database's settings, or ``None`` for an in-memory one."""
    name = str(settings_dict.get("NAME") or "")
    if not name or name == ":memory:" or name.startswith("file:"):
        return None
    return Path(name)


def tighten_sqlite_files(sender: Any, connection: Any, **kwargs: Any) -> None:
    """``connection_created`` receiver: an SQLite database and its companions are mode 0600."""
    if connection.vendor != "sqlite":
        return
    path = sqlite_database_path(connection.settings_dict)
    if path is None:
        return
    for suffix in SQLITE_COMPANIONS:
        _tighten(path.with_name(path.name + suffix), FILE_MODE)
