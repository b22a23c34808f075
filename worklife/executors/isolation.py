"""Isolation: what an attempt's processes cannot reach of the server.

The loop that starts attempts is made undumpable (``PR_SET_DUMPABLE`` 0): no process of another
user, nor of its own user without ``CAP_SYS_PTRACE``, reads its ``/proc/PID/environ``, ``mem``
or file descriptors. Each attempt process then starts, before it runs anything:

* **as the work user** when the loop runs as root: ``CONDUIT_WORK_USER`` (``nobody`` unless
  set), with that user's group and no supplementary groups;
* **in a mount namespace of its own** (a user namespace too when the loop is not root) where
  ``CONDUIT_VAR_DIR``, ``CONDUIT_SECRETS_DIR`` and an SQLite database file elsewhere are covered
  (an empty read-only tmpfs, ``/dev/null`` over a file). Where the work user cannot search a
  folder on the way to the interpreter, the virtualenv or the project (Python under ``/root``),
  that folder is replaced there by a read-only tmpfs holding just those paths.

What the machine allows is tried once (a trial process) and the rest left out, saying so
(:func:`isolation`, ``doctor``, the loop's ``executors.isolation`` log line).
"""

from __future__ import annotations

import ctypes
import logging
import os
import pwd
import stat
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from functools import lru_cache

from django.conf import settings as django_settings
from django.db import connections

logger = logging.getLogger(__name__)

DEFAULT_WORK_USER = "nobody"
PR_SET_DUMPABLE = 4
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)
_libc.prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)


def _mount(source: str | None, target: str, kind: str | None, flags: int, data: str | None = None) -> None:
    encoded = [None if value is None else value.encode() for value in (source, target, kind, data)]
    if _libc.mount(encoded[0], encoded[1], encoded[2], flags, encoded[3]) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"mount {target}: {os.strerror(code)}")


def make_undumpable() -> bool:
    """``PR_SET_DUMPABLE`` 0 for this process: its ``/proc`` entries (environ, mem, fd) become
    root's and need ``CAP_SYS_PTRACE`` to read. Whether it took."""
    return _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0


@dataclass(frozen=True)
class Isolation:
    """How attempt processes start: the user they run as, the paths they cannot see."""

    user: str = ""
    uid: int | None = None
    gid: int | None = None
    namespace: bool = False
    user_namespace: bool = False
    hidden: tuple[str, ...] = ()
    exposed: tuple[tuple[str, tuple[str, ...]], ...] = ()
    missing: tuple[str, ...] = field(default=(), compare=False)

    def describe(self) -> str:
        """One line for the log and ``doctor``."""
        parts = [
            f"children run as {self.user}" if self.uid is not None else "children run as the loop's user"
        ]
        if self.namespace:
            kind = "user and mount namespace" if self.user_namespace else "mount namespace"
            parts.append(f"in a {kind} hiding {', '.join(self.hidden) or 'nothing'}")
        else:
            parts.append("with the loop's mounts (nothing hidden)")
        if self.missing:
            parts.append("not in effect: " + "; ".join(self.missing))
        return ", ".join(parts)

    def enter(self) -> None:
        """In the attempt process, after fork and before exec: enter the namespace, cover the
        hidden paths, drop to the work user. Only system calls (it runs in a fork of a threaded
        process)."""
        if self.namespace:
            if self.user_namespace:
                # No uid map (an undumpable loop's child cannot write its own): its user is
                # unmapped there, so it keeps its rights on files and loses every capability at
                # exec (it cannot unmount what covers var/).
                os.unshare(os.CLONE_NEWUSER | os.CLONE_NEWNS)
            else:
                os.unshare(os.CLONE_NEWNS)
            _mount(None, "/", None, MS_REC | MS_PRIVATE)
            for top, paths in self.exposed:
                fds = [os.open(path, os.O_PATH | os.O_CLOEXEC) for path in paths]
                _mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k")
                for path, fd in zip(paths, fds, strict=True):
                    os.makedirs(path, exist_ok=True)
                    _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
                    os.close(fd)
                _mount(None, top, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "mode=0755")
            for path in self.hidden:
                if os.path.isdir(path):
                    _mount(
                        "tmpfs",
                        path,
                        "tmpfs",
                        MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                        "mode=000,size=4k",
                    )
                else:
                    _mount("/dev/null", path, None, MS_BIND)
        if self.uid is not None:
            os.setgroups([])
            os.setgid(self.gid)
            os.setuid(self.uid)

    def preexec(self, before: Callable[[], None] | None = None) -> Callable[[], None] | None:
        """A ``preexec_fn`` that runs ``before`` (joining a cgroup, as root still), then enters."""
        if before is None and not self.namespace and self.uid is None:
            return None

        def run() -> None:
            if before is not None:
                before()
            self.enter()

        return run


# --- what the loop works out once -----------------------------------------------------------


def work_user() -> str:
    """The user attempts run as when the loop is root: ``CONDUIT_WORK_USER``, else ``nobody``;
    ``""`` when the loop is not root (it cannot change user)."""
    if os.geteuid() != 0:
        return ""
    return str(getattr(django_settings, "CONDUIT_WORK_USER", "") or DEFAULT_WORK_USER)


def hidden_paths() -> list[str]:
    """``CONDUIT_VAR_DIR``, ``CONDUIT_SECRETS_DIR`` and SQLite database files outside them."""
    folders = [
        getattr(django_settings, "VAR_DIR", None),
        getattr(django_settings, "CONDUIT_SECRETS_DIR", None),
    ]
    paths = [os.path.realpath(str(folder)) for folder in folders if folder and os.path.isdir(folder)]
    for alias in connections:
        settings_dict = connections[alias].settings_dict
        if "sqlite" not in str(settings_dict.get("ENGINE", "")):
            continue
        for database in (str(settings_dict.get("NAME") or ""),):
            for companion in ("", "-wal", "-shm", "-journal"):
                path = os.path.realpath(database + companion) if database else ""
                if path and os.path.isfile(path) and not any(_under(path, top) for top in paths):
                    paths.append(path)
    return _outermost(paths)


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _outermost(paths: Iterable[str]) -> list[str]:
    kept: list[str] = []
    for path in sorted(set(paths), key=len):
        if not any(_under(path, top) for top in kept):
            kept.append(path)
    return kept


def needed_paths() -> list[str]:
    """What an attempt process must reach: the interpreter, the virtualenv, the import path and
    the project."""
    candidates = [
        os.path.dirname(os.path.realpath(sys.executable)),
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        str(getattr(django_settings, "BASE_DIR", "") or ""),
        *sys.path,
    ]
    return _outermost(os.path.realpath(path) for path in candidates if path and os.path.isdir(path))


def _searchable(path: str, uid: int, gid: int) -> bool:
    info = os.stat(path)
    if info.st_uid == uid:
        return bool(info.st_mode & stat.S_IXUSR)
    if info.st_gid == gid:
        return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)


def exposures(paths: Iterable[str], uid: int, gid: int) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """For each path the user cannot reach: the outermost folder on its way it cannot search,
    with the paths to bind inside it."""
    blocked: dict[str, list[str]] = {}
    for path in paths:
        parts = path.strip("/").split("/")
        for depth in range(1, len(parts)):
            folder = "/" + "/".join(parts[:depth])
            if not _searchable(folder, uid, gid):
                blocked.setdefault(folder, []).append(path)
                break
    tops = _outermost(blocked)
    return tuple(
        (top, tuple(_outermost(p for folder, group in blocked.items() if _under(folder, top) for p in group)))
        for top in tops
    )


def _trial(plan: Isolation) -> str:
    """Start the interpreter under ``plan``: ``""`` when it ran, else what went wrong."""
    argv = [sys.executable, "-c", "import worklife.child"]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
    }
    try:
        done = subprocess.run(
            argv,
            env=env,
            cwd="/",
            preexec_fn=plan.preexec(),
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    return (
        ""
        if done.returncode == 0
        else (done.stderr.decode(errors="replace").strip()[-200:] or f"exit {done.returncode}")
    )


@lru_cache(maxsize=1)
def isolation() -> Isolation:
    """How this loop's attempt processes start (worked out and tried once; logged). Also makes
    this process undumpable."""
    missing: list[str] = []
    if not make_undumpable():
        missing.append("the loop could not make itself undumpable")
    user = work_user()
    plan = Isolation()
    if user:
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            missing.append(f"no user {user!r}: children run as root")
        else:
            plan = Isolation(user=user, uid=entry.pw_uid, gid=entry.pw_gid)
    uid = plan.uid if plan.uid is not None else os.getuid()
    gid = plan.gid if plan.gid is not None else os.getgid()
    hidden = tuple(hidden_paths())
    full = replace(
        plan,
        namespace=True,
        user_namespace=os.geteuid() != 0,
        hidden=hidden,
        exposed=exposures(needed_paths(), uid, gid) if plan.uid is not None else (),
    )
    problem = _trial(full)
    if not problem:
        plan = full
    else:
        missing.append(f"no mount namespace ({problem})")
        if plan.uid is not None and _trial(plan):
            missing.append("the work user cannot start the interpreter: children run as root")
            plan = Isolation()
    plan = replace(plan, missing=tuple(missing))
    logger.info("executors.isolation", extra={"isolation": plan.describe()})
    return plan
