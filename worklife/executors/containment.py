"""Containment: every process an attempt process started, ``setsid`` and double forks
included, ended with it (a cgroup v2 per attempt where the machine offers one, else a marker
in the environment)."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from django.conf import settings as django_settings

from worklife.executors.environment import PROCESS_MARK_ENV
from worklife.executors.isolation import isolation

logger = logging.getLogger(__name__)

# --- containment: every process an attempt started ------------------------------------------

CGROUP_PREFIX = "conduit-"
SWEEP_SECONDS = 30.0
cgroup_state: dict[str, Any] = {"broken": False, "swept": None}
_cgroup_lock = threading.Lock()
_own_cgroups: set[str] = set()


def _cgroups_wanted() -> bool:
    return bool(getattr(django_settings, "CONDUIT_ATTEMPT_CGROUPS", True))


@lru_cache(maxsize=1)
def cgroup_home() -> str | None:
    """The directory of this process's own cgroup v2 when attempts' cgroups can be made in
    it (a ``cgroup2`` mount, writable), else ``None``."""
    try:
        with open("/proc/self/cgroup") as handle:
            own = next((line[3:].strip() for line in handle if line.startswith("0::")), None)
        with open("/proc/self/mountinfo") as handle:
            mounts = handle.read().splitlines()
    except OSError:
        return None
    if own is None or own.endswith(" (deleted)"):
        return None
    for line in mounts:
        fields = line.split()
        if "-" not in fields:
            continue
        dash = fields.index("-")
        if dash + 1 >= len(fields) or fields[dash + 1] != "cgroup2":
            continue
        root, point = fields[3], fields[4]
        if own != root and not own.startswith(root.rstrip("/") + "/"):
            continue
        path = os.path.join(point, own[len(root) :].lstrip("/"))
        if os.access(path, os.W_OK) and os.path.exists(os.path.join(path, "cgroup.procs")):
            return path.rstrip("/")
    return None


def containment_mechanism() -> str:
    """How this process ends an attempt's processes: ``"cgroup"`` (one cgroup v2 per attempt
    process, ended with ``cgroup.kill``) or ``"marker"`` (the processes whose environment
    carries the attempt process's mark, its process group and their descendants)."""
    if cgroup_state["broken"] or not _cgroups_wanted() or cgroup_home() is None:
        return "marker"
    return "cgroup"


def _cgroup_create(mark: str) -> str | None:
    """A new cgroup for one attempt process, or ``None`` where there can be none."""
    if containment_mechanism() != "cgroup":
        return None
    home = cgroup_home()
    assert home is not None
    _sweep_dead_loops(home)
    path = os.path.join(home, f"{CGROUP_PREFIX}{os.getpid()}-{mark}")
    try:
        os.mkdir(path)
    except OSError as exc:
        _cgroups_broken(f"cannot make a cgroup in {home}: {exc}")
        return None
    if not os.path.exists(os.path.join(path, "cgroup.kill")):  # Linux before 5.14
        _cgroup_remove(path)
        _cgroups_broken("the kernel's cgroups have no cgroup.kill")
        return None
    with _cgroup_lock:
        if not _own_cgroups:
            atexit.register(_remove_own_cgroups)
        _own_cgroups.add(path)
    return path


def _remove_own_cgroups() -> None:
    """At exit: what this loop's attempts left (idle workers, whose watchers are daemon
    threads) ends with it, and their cgroups go."""
    with _cgroup_lock:
        paths = list(_own_cgroups)
    for path in paths:
        _cgroup_kill(path)
        _cgroup_remove(path, within=1.0)


def _cgroups_broken(reason: str) -> None:
    with _cgroup_lock:
        if cgroup_state["broken"]:
            return
        cgroup_state["broken"] = True
    logger.warning("executors.cgroups_unusable", extra={"reason": reason})


def _cgroup_pids(path: str) -> list[int]:
    try:
        with open(os.path.join(path, "cgroup.procs")) as handle:
            return [int(line) for line in handle if line.strip()]
    except (OSError, ValueError):
        return []


def _cgroup_kill(path: str) -> bool:
    try:
        with open(os.path.join(path, "cgroup.kill"), "w") as handle:
            handle.write("1")
    except OSError:
        return False
    return True


def _cgroup_remove(path: str, *, within: float = 2.0) -> bool:
    """Remove an attempt's cgroup once its processes are gone (ending what is left)."""
    deadline = time.monotonic() + within
    while True:
        try:
            os.rmdir(path)
        except FileNotFoundError:
            pass
        except OSError:
            if time.monotonic() > deadline:
                logger.warning("executors.cgroup_left", extra={"cgroup": path})
                return False
            _cgroup_kill(path)
            time.sleep(0.01)
            continue
        with _cgroup_lock:
            _own_cgroups.discard(path)
        return True


def _sweep_dead_loops(home: str) -> None:
    """End and remove the attempts' cgroups of loops of this cgroup that are gone (a loop
    killed with SIGKILL leaves its attempts' processes and their cgroups): when this loop
    starts an attempt, at most every :data:`SWEEP_SECONDS`."""
    now = time.monotonic()
    with _cgroup_lock:
        if cgroup_state["swept"] is not None and now - cgroup_state["swept"] < SWEEP_SECONDS:
            return
        cgroup_state["swept"] = now
    try:
        names = os.listdir(home)
    except OSError:
        return
    for name in names:
        owner = name[len(CGROUP_PREFIX) :].partition("-")[0] if name.startswith(CGROUP_PREFIX) else ""
        if not owner.isdigit() or int(owner) == os.getpid() or _pid_alive(int(owner)):
            continue
        path = os.path.join(home, name)
        _cgroup_kill(path)
        if _cgroup_remove(path, within=1.0):
            logger.info("executors.cgroup_swept", extra={"cgroup": path})


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _marked_processes(needle: bytes, leader: int | None) -> set[int]:
    """Live processes whose environment carries ``needle``, the process ``leader`` and its
    process group, and every descendant of those (by their parents, now)."""
    me = os.getpid()
    parents: dict[int, int] = {}
    found: set[int] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid == me:
            continue
        try:
            fields = _stat_fields(pid)
            if fields[0] in (b"Z", b"X"):
                continue  # dead already: its parent reaps it
            parent, group = int(fields[1]), int(fields[2])
        except (OSError, ValueError, IndexError):
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                environ = handle.read()
        except OSError:
            environ = b""  # an undumpable process (a forked Python attempt): found by its tree
        parents[pid] = parent
        if (needle in environ and needle in environ.split(b"\0")) or (
            leader is not None and (pid == leader or group == leader)
        ):
            found.add(pid)
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    stack = list(found)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def end_marked(needle: bytes, leader: int | None, *, keep: int | None = None) -> int:
    """Stop, then kill, the processes :func:`_marked_processes` finds (but ``keep``): each
    round stops what it found, until a round finds nothing new, so a process that forks while
    it is ended cannot outrun it. Returns how many were killed."""
    stopped: set[int] = set()
    found: set[int] = set()
    for _ in range(20):
        found = _marked_processes(needle, leader) - {keep}
        fresh = found - stopped
        if not fresh:
            break
        for pid in fresh:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGSTOP)
        stopped |= fresh
    for pid in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return len(found)


class Containment:
    """Every process one attempt process (a command, a Python worker) started, ``setsid``
    and double forks included.

    Where this loop's cgroup is a writable cgroup v2, the process starts in a cgroup of its
    own (``conduit-<loop pid>-<mark>`` beside the loop), which its descendants cannot leave
    without privileges, and ``cgroup.kill`` ends them all at once. Else (or when the setting
    ``CONDUIT_ATTEMPT_CGROUPS`` is false) every process whose environment carries the
    attempt process's mark (:data:`PROCESS_MARK_ENV`), its process group and their
    descendants are stopped, then killed. Both also signal the process group."""

    def __init__(self) -> None:
        self.mark = secrets.token_hex(12)
        self.needle = f"{PROCESS_MARK_ENV}={self.mark}".encode()
        self.cgroup = _cgroup_create(self.mark)
        self.leader: int | None = None
        self._reaped = lambda: False

    @property
    def mechanism(self) -> str:
        return "cgroup" if self.cgroup else "marker"

    def spawn(self, popen: Callable[..., subprocess.Popen]) -> subprocess.Popen:
        """Start the process with ``popen(preexec_fn=...)``, inside the cgroup if there is one,
        isolated as :func:`~worklife.executors.isolation.isolation` says."""
        plan = isolation()
        if self.cgroup is None:
            return popen(preexec_fn=plan.preexec())
        fd = self.procs_fd()
        try:
            # Joins the cgroup first (as the loop's user still), then isolates.
            return popen(preexec_fn=plan.preexec(lambda: os.write(fd, b"0")))
        except subprocess.SubprocessError as exc:
            _cgroup_remove(self.cgroup)
            self.cgroup = None
            _cgroups_broken(f"a child cannot join its cgroup: {exc}")
            return popen(preexec_fn=plan.preexec())
        finally:
            os.close(fd)

    def procs_fd(self) -> int:
        """The cgroup's ``cgroup.procs`` open for writing (a process joins by writing ``0``)."""
        assert self.cgroup is not None
        return os.open(os.path.join(self.cgroup, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)

    def started(self, popen: subprocess.Popen) -> None:
        self.leader = popen.pid
        self._reaped = lambda: popen.returncode is not None

    def _leader(self) -> int | None:
        # Once reaped, its pid (and process group id) may be another process's.
        return None if self.leader is None or self._reaped() else self.leader

    def others(self) -> bool:
        """Whether a process of it other than the leader is alive."""
        if self.cgroup is not None:
            return any(pid != self.leader for pid in _cgroup_pids(self.cgroup))
        return bool(_marked_processes(self.needle, self._leader()) - {self.leader})

    def kill(self) -> None:
        """End every process of it now, the leader included."""
        if self.cgroup is not None:
            _cgroup_kill(self.cgroup)
        leader = self._leader()
        if leader is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(leader, signal.SIGKILL)
        # Also what left the cgroup (a privileged child can): the mark and the tree.
        end_marked(self.needle, leader)

    def remove(self) -> None:
        """Once the leader has exited: remove the cgroup (ending what is left in it)."""
        if self.cgroup is not None:
            _cgroup_remove(self.cgroup)

    def end(self) -> None:
        """Once the leader has exited: end what it left running, remove the cgroup."""
        if self.cgroup is not None:
            if _cgroup_pids(self.cgroup):
                _cgroup_kill(self.cgroup)
            _cgroup_remove(self.cgroup)
        else:
            end_marked(self.needle, None)


# --- a lost attempt's process (a loop of this host died) ---------------------------------------


def pid_alive(pid: str) -> bool:
    """Whether the process ``pid`` (text, from a loop's name) may still run (not a number: assumed so)."""
    try:
        os.kill(int(pid), 0)
    except ValueError:
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_started(pid: int | None) -> int | None:
    """When process ``pid`` of this host started, in clock ticks after boot (``/proc/PID/stat``,
    field 22), or ``None`` when it is gone or unreadable: with the pid, it names one process,
    never another the pid is given to later."""
    if pid is None:
        return None
    try:
        return int(_stat_fields(pid)[19])
    except (OSError, ValueError, IndexError):
        return None


def _stat_fields(pid: int) -> list[bytes]:
    """The fields of ``/proc/PID/stat`` after the command name (the state first)."""
    with open(f"/proc/{pid}/stat", "rb") as handle:
        stat = handle.read()
    return stat[stat.rindex(b")") + 2 :].split()


def lost_attempt_process_kill(pid: int, attempt_id: int, started: int | None = None) -> None:
    """End the process group of a lost attempt of this host, if the process is still the
    attempt's: it started when the attempt's process did (``started``, recorded with the pid),
    or, where no start was recorded, its environment names the attempt or it is a Python
    attempt's process."""
    if started is not None:
        if process_started(pid) == started:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        return
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            cmdline = handle.read()
    except OSError:
        return
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            environ = handle.read()
    except OSError:
        environ = b""  # a Python attempt's process is undumpable: its command line says what it is
    if f"CONDUIT_ATTEMPT_ID={attempt_id}".encode() not in environ.split(b"\0") and not any(
        module in cmdline for module in (b"worklife.child", b"worklife.forkserver")
    ):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
