"""Executors: what runs an attempt of Work, and the registry that names them.

An executor class is registered in ``CONDUIT_EXECUTORS`` (name -> dotted path, either
``"pkg.mod.Class"`` or ``"pkg.mod:Class"``) and a binding names it. The router never calls an
executor (R33); a scheduler starts attempts with :meth:`Executor.start`.

Optional controls (R2). ``inject`` (give a running attempt more input) and ``interrupt`` (ask
it to stop what it is doing) are optional. An implementation supports a control only when its
class really implements it, as a method named after the control::

    class MyExecutor(Executor):
        def start(self, *, work_id, attempt_id, binding_settings, inputs) -> Execution: ...
        def inject(self, *, attempt_id, inputs) -> None: ...           # optional
        def interrupt(self, *, attempt_id, reason="") -> None: ...     # optional

The base class defines neither, so a subclass that does not write them does not support
them; a capability flag (``inject = True``, ``capabilities = {"inject"}``) establishes
nothing. A binding claims the controls it wants in the configuration and
:func:`validate_binding` refuses a claim the implementation cannot honour.

An executor class may also check its binding settings at configuration time with a
classmethod ``validate_settings(settings) -> Iterable[tuple[str, str]]`` yielding
``(place inside settings, message)`` for each problem.
"""

from __future__ import annotations

import abc
import atexit
import contextlib
import importlib
import inspect
import json
import logging
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Any

from django.conf import settings as django_settings

from worklife.child import ATTEMPT_ID_ENV, CALL_FD_ENV, CALL_PREFIX, WORK_ID_ENV, Run

PythonRun = Run  # the name targets of the first version import

logger = logging.getLogger(__name__)

CONTROLS: tuple[str, ...] = ("inject", "interrupt")
"""The optional controls a binding may claim, in a stable order."""


# --- loading dotted paths ----------------------------------------------------------------


class RegistrationError(ImportError):
    """A registered dotted path cannot be imported, or names the wrong kind of object."""


_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def split_dotted(path: str) -> tuple[str, str]:
    """Split ``"pkg.mod:Attr"`` or ``"pkg.mod.Attr"`` into ``("pkg.mod", "Attr")``.

    The part after a colon may itself be dotted (``"pkg.mod:Outer.Inner"``).
    """
    if not isinstance(path, str):
        raise RegistrationError(f"expected a dotted path string, got {type(path).__name__}")
    if ":" in path:
        module, _, attr = path.partition(":")
    else:
        module, _, attr = path.rpartition(".")
    if not module or not attr or not _DOTTED.match(module) or not _DOTTED.match(attr):
        raise RegistrationError(f"{path!r} is not a dotted path like 'pkg.mod.Name' or 'pkg.mod:Name'")
    return module, attr


@lru_cache(maxsize=256)
def import_dotted(path: str) -> Any:
    """Import and return the object a dotted path names (cached per path).

    Raises :class:`RegistrationError` naming the path when the module or attribute is
    missing.
    """
    module_name, attr = split_dotted(path)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise RegistrationError(f"cannot import {module_name!r} for {path!r}: {exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise RegistrationError(f"{module_name!r} has no attribute {attr!r} (from {path!r})") from None
    return obj


# --- the executor contract ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an attempt ended: ``ok`` with an optional JSON-like ``result``, or an ``error``.

    ``exit_status`` is the process's exit status when a process ran the attempt."""

    ok: bool
    result: Any = None
    error: str = ""
    exit_status: int | None = None


class Execution(abc.ABC):
    """A handle on one started attempt, returned by :meth:`Executor.start`.

    ``poll`` and ``wait`` are required. The rest have defaults for executors that run
    nothing the loop can talk to: no calls, no output, nothing to end."""

    attempt_id: int
    pid: int | None = None

    @abc.abstractmethod
    def poll(self) -> Outcome | None:
        """The outcome when the attempt has ended, else ``None``; never blocks."""

    @abc.abstractmethod
    def wait(self, timeout: float | None = None) -> Outcome | None:
        """Block up to ``timeout`` seconds (for ever when ``None``) for the outcome."""

    def take_calls(self) -> list[dict]:
        """The attempt API calls the process made since the last time (emit, wait, …)."""
        return []

    def reply(self, call_id: Any, *, ok: bool, value: Any = None, error: str = "") -> None:
        """Answer a call that carried an ``id``."""
        return None

    def send_inputs(self, events: Sequence[Any]) -> bool:
        """Give the running attempt more input (inject); ``False`` when it cannot take it."""
        return False

    def send_interrupt(self, reason: str) -> bool:
        """Tell the running attempt to stop what it is doing; ``False`` when it cannot."""
        return False

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the attempt's process group (no-op without a process)."""
        return None

    def kill(self) -> None:
        """End at once every process the attempt started (``setsid`` included)."""
        return None

    def output(self) -> tuple[str, str]:
        """The last :data:`OUTPUT_TAIL` bytes of standard output and standard error."""
        return "", ""

    def release(self) -> None:
        """Give back what the execution holds (a reusable worker) once its outcome is in."""
        return None


class Executor(abc.ABC):
    """Base class of executors. Subclasses implement :meth:`start`, and optionally ``inject``
    and ``interrupt`` (deliberately not defined here: see the module docstring, R2).

    An executor is instantiated with no arguments; the scheduler passes each attempt's
    binding settings to :meth:`start`.
    """

    @abc.abstractmethod
    def start(
        self,
        *,
        work_id: int,
        attempt_id: int,
        binding_settings: Mapping[str, Any],
        inputs: Sequence[Any],
    ) -> Execution:
        """Start one attempt of a Work with its first inputs; return a handle on it."""

    @classmethod
    def validate_settings(cls, settings: Mapping[str, Any]) -> Iterable[tuple[str, str]]:
        """Yield ``(place, message)`` for each problem in a binding's settings; none here."""
        return ()

    def close(self) -> None:
        """End what the executor keeps between attempts (idle workers)."""
        return None


def _settings_keys(settings: Mapping[str, Any], allowed: Iterable[str]) -> Iterator[tuple[str, str]]:
    allowed = tuple(allowed)
    for key in settings:
        if key not in allowed:
            yield str(key), f"unknown setting {key!r} (expected one of: {', '.join(allowed)})"


# Settings every process executor takes: the run-time bound and the interrupt's grace.
COMMON_SETTINGS = ("timeout", "interrupt_grace")
OUTPUT_TAIL = 64 * 1024
"""Bytes of standard output and of standard error kept per attempt (the last ones)."""
OUTPUT_LINE_LIMIT = OUTPUT_TAIL
"""The longest line of output read whole; a longer one keeps its first bytes and a mark."""
CALL_LINE_LIMIT = 4 * 1024 * 1024
"""The longest call line read (at least eight times ``CONDUIT_MAX_EVENT_BYTES``: an emitted
Event's data, escaped); a longer call is refused and fails the attempt."""
PENDING_CALLS = 1000
"""Calls read and not yet taken by the loop; past this the reader waits (the child's writes
block) until the loop takes them."""
_DISCARD = 64 * 1024


# --- the child's environment --------------------------------------------------------------

ENV_ALLOWED = frozenset({"PATH", "HOME", "LANG", "TZ", "TMPDIR"})
"""Variables of the loop's own environment a child inherits (with every ``LC_*``): nothing
else of the server's environment reaches a child (``SECRET_KEY``, ``DATABASE_URL``, the
server's ``CONDUIT_*`` settings...)."""
ENV_ALLOWED_PREFIXES = ("LC_",)
PROCESS_MARK_ENV = "CONDUIT_PROCESS_MARK"
"""A random value per attempt process (not a secret) that its descendants inherit: what ends
them all where the machine offers no cgroup v2 (see :class:`_Containment`)."""
ATTEMPT_ENV = frozenset({WORK_ID_ENV, ATTEMPT_ID_ENV, CALL_FD_ENV, PROCESS_MARK_ENV})
"""The variables the attempt protocol sets in a child; a binding's ``env`` may not set them."""


def inherited_environment() -> dict[str, str]:
    """The part of the loop's environment every child gets: the allow-list, nothing more."""
    return {
        name: value
        for name, value in os.environ.items()
        if name in ENV_ALLOWED or name.startswith(ENV_ALLOWED_PREFIXES)
    }


def _env_setting(settings: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """``env``: a mapping of variable names to strings, set in the child's environment."""
    env = settings.get("env")
    if env is None:
        return
    if not isinstance(env, Mapping):
        yield "env", "expected a mapping of names to strings"
        return
    for name, value in env.items():
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            yield f"env.{name}", "not a variable name"
        elif name in ATTEMPT_ENV:
            yield f"env.{name}", "set by the attempt protocol (a binding cannot set it)"
        elif not isinstance(value, str):
            yield f"env.{name}", "expected a string (quote numbers)"
        elif "\0" in value:
            yield f"env.{name}", "a NUL character cannot be in the environment"


def _binding_env(settings: Mapping[str, Any]) -> dict[str, str]:
    return {str(name): str(value) for name, value in (settings.get("env") or {}).items()}


def _common_settings(settings: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    for key in COMMON_SETTINGS:
        value = settings.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            yield key, f"expected a positive number of seconds, got {value!r}"


class _Tail:
    """The last ``limit`` bytes written, thread-safe."""

    def __init__(self, limit: int = OUTPUT_TAIL) -> None:
        self._data = bytearray()
        self._limit = limit
        self._lock = threading.Lock()

    def add(self, chunk: bytes) -> None:
        with self._lock:
            if len(chunk) >= self._limit:
                self._data = bytearray(chunk[len(chunk) - self._limit :])
                return
            self._data += chunk
            if len(self._data) > self._limit:
                del self._data[: len(self._data) - self._limit]

    def text(self) -> str:
        with self._lock:
            return self._data.decode("utf-8", errors="replace")


def call_line_limit() -> int:
    """:data:`CALL_LINE_LIMIT`, or more when ``CONDUIT_MAX_EVENT_BYTES`` is set higher."""
    event_bytes = getattr(django_settings, "CONDUIT_MAX_EVENT_BYTES", 0) or 0
    return max(CALL_LINE_LIMIT, 8 * int(event_bytes))


def cut_mark(count: int) -> bytes:
    """What replaces the bytes cut from a line over its limit."""
    return f" … [cut {count} bytes]".encode()


def _lines(
    stream: Any,
    sink: Callable[[bytes], None],
    *,
    limit: int = OUTPUT_LINE_LIMIT,
    calls: Callable[[bytes], bool] | None = None,
    call_limit: int = 0,
    overlong: Callable[[int], None] | None = None,
) -> None:
    """Feed each line of ``stream`` to ``sink`` until EOF (a reader thread's body), holding
    no more than a line's limit at a time, however the child writes.

    A line is read whole up to ``limit`` bytes, or ``call_limit`` when ``calls(line)`` says
    it is a call. Output over the limit goes to ``sink`` as its first ``limit`` bytes, then,
    once the line ends, the mark ``… [cut N bytes]`` (and the newline); the bytes between are
    read and dropped. A call over its limit cannot be answered: ``overlong(bytes so far)`` is
    told at once and nothing of it reaches ``sink``."""
    try:
        while True:
            line = stream.readline(limit + 1)
            if not line:
                break
            if len(line) <= limit or line.endswith(b"\n"):
                sink(line)
                continue
            is_call = calls is not None and calls(line)
            if is_call and call_limit > limit:
                line += stream.readline(call_limit - limit)
                if len(line) <= call_limit or line.endswith(b"\n"):
                    sink(line)
                    continue
            kept = min(len(line), max(limit, call_limit) if is_call else limit)
            cut = len(line) - kept
            if is_call:
                if overlong is not None:
                    overlong(kept)
            else:
                sink(line[:kept])
            del line
            end = b""
            while True:
                chunk = stream.readline(_DISCARD)
                if not chunk:
                    break
                if chunk.endswith(b"\n"):
                    cut += len(chunk) - 1
                    end = b"\n"
                    break
                cut += len(chunk)
            if not is_call:
                sink(cut_mark(cut) + end)
    except (OSError, ValueError):
        pass  # the pipe closed under us: the process is gone
    finally:
        with contextlib.suppress(OSError):
            stream.close()


def _reader(name: str, stream: Any, sink: Callable[[bytes], None], **limits: Any) -> threading.Thread:
    thread = threading.Thread(target=_lines, args=(stream, sink), kwargs=limits, name=name, daemon=True)
    thread.start()
    return thread


def _is_call_line(line: bytes) -> bool:
    return line.startswith(CALL_PREFIX.encode())


def _always(line: bytes) -> bool:
    return True


# --- containment: every process an attempt started ------------------------------------------

CGROUP_PREFIX = "conduit-"
SWEEP_SECONDS = 30.0
_cgroup_state: dict[str, Any] = {"broken": False, "swept": None}
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
    if _cgroup_state["broken"] or not _cgroups_wanted() or cgroup_home() is None:
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
        if _cgroup_state["broken"]:
            return
        _cgroup_state["broken"] = True
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
        if _cgroup_state["swept"] is not None and now - _cgroup_state["swept"] < SWEEP_SECONDS:
            return
        _cgroup_state["swept"] = now
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
            with open(f"/proc/{pid}/stat", "rb") as handle:
                stat = handle.read()
            fields = stat[stat.rindex(b")") + 2 :].split()
            if fields[0] in (b"Z", b"X"):
                continue  # dead already: its parent reaps it
            parent, group = int(fields[1]), int(fields[2])
            with open(f"/proc/{pid}/environ", "rb") as handle:
                environ = handle.read()
        except (OSError, ValueError, IndexError):
            continue
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


def _end_marked(needle: bytes, leader: int | None, *, keep: int | None = None) -> int:
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


class _Containment:
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
        """Start the process with ``popen(preexec_fn=...)``, inside the cgroup if there is one."""
        if self.cgroup is None:
            return popen(preexec_fn=None)
        fd = os.open(os.path.join(self.cgroup, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
        try:
            # Only a write in the child before exec (nothing that could take a lock).
            return popen(preexec_fn=lambda: os.write(fd, b"0"))
        except subprocess.SubprocessError as exc:
            _cgroup_remove(self.cgroup)
            self.cgroup = None
            _cgroups_broken(f"a child cannot join its cgroup: {exc}")
            return popen(preexec_fn=None)
        finally:
            os.close(fd)

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
        _end_marked(self.needle, leader)

    def end(self) -> None:
        """Once the leader has exited: end what it left running, remove the cgroup."""
        if self.cgroup is not None:
            if _cgroup_pids(self.cgroup):
                _cgroup_kill(self.cgroup)
            _cgroup_remove(self.cgroup)
        else:
            _end_marked(self.needle, None)


class _Process:
    """A child process in its own process group with the protocol's pipes: standard input
    (the loop's lines), standard output and error (kept as tails, or parsed for ``@conduit``
    calls), and the call pipe named by ``CONDUIT_CALL_FD``."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str | None,
        on_call: Callable[[bytes], None],
        on_stdout: Callable[[bytes], None],
        on_overlong: Callable[[int], None],
        calls_on_stdout: bool = False,
    ) -> None:
        read_fd, write_fd = os.pipe()
        os.set_inheritable(write_fd, True)
        self.containment = _Containment()
        full_env = {**env, CALL_FD_ENV: str(write_fd), PROCESS_MARK_ENV: self.containment.mark}
        try:
            self.popen = self.containment.spawn(
                partial(
                    subprocess.Popen,
                    list(argv),
                    cwd=cwd,
                    env=full_env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    pass_fds=(write_fd,),
                    start_new_session=True,  # its own process group (signals reach its children)
                )
            )
        except BaseException:
            os.close(read_fd)
            self.containment.end()
            raise
        finally:
            os.close(write_fd)
        self.containment.started(self.popen)
        self.pid = self.popen.pid
        self._stdin_lock = threading.Lock()
        self.stderr = _Tail()
        call_stream = os.fdopen(read_fd, "rb")
        call_limit = call_line_limit()
        self._threads = [
            _reader(
                f"conduit-calls-{self.pid}",
                call_stream,
                on_call,
                calls=_always,
                call_limit=call_limit,
                overlong=on_overlong,
            ),
            _reader(
                f"conduit-stdout-{self.pid}",
                self.popen.stdout,
                on_stdout,
                calls=_is_call_line if calls_on_stdout else None,
                call_limit=call_limit,
                overlong=on_overlong,
            ),
            _reader(f"conduit-stderr-{self.pid}", self.popen.stderr, self.stderr.add),
        ]

    def send(self, message: dict) -> bool:
        line = (json.dumps(message, default=str) + "\n").encode("utf-8")
        with self._stdin_lock:
            try:
                self.popen.stdin.write(line)
                self.popen.stdin.flush()
            except (BrokenPipeError, OSError, ValueError):
                return False
        return True

    def close_stdin(self) -> None:
        with self._stdin_lock, contextlib.suppress(OSError, ValueError):
            self.popen.stdin.close()

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)

    def kill(self) -> None:
        """End the process and every process it started (:class:`_Containment`)."""
        self.containment.kill()

    def exited(self) -> int | None:
        return self.popen.poll()

    def join_readers(self, timeout: float = 2.0) -> None:
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))


def _overlong_error(limit: int) -> str:
    return f"a call line longer than {limit} bytes (the limit) was refused"


def _parse_call(line: bytes) -> dict | None:
    """A call line as a dict, or ``None`` for anything else (never raises: a reader thread
    must outlive a hostile line, such as JSON nested past the interpreter's recursion limit)."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return message if isinstance(message, dict) and isinstance(message.get("op"), str) else None


class ProcessExecution(Execution):
    """An attempt run by a process: its calls, its output, its outcome."""

    def __init__(self, attempt_id: int) -> None:
        self.attempt_id = attempt_id
        self._calls: list[dict] = []
        self._lock = threading.Lock()
        self._taken = threading.Condition(self._lock)
        self._done = threading.Event()
        self._outcome: Outcome | None = None
        self.stdout = _Tail()
        self.stderr = _Tail()
        self.result: Any = None

    # -- what the reader threads feed ---------------------------------------------------------
    def _call(self, message: dict) -> None:
        op = message["op"]
        if op == "output":
            tail = self.stderr if message.get("stream") == "stderr" else self.stdout
            tail.add(str(message.get("text", "")).encode("utf-8", errors="replace"))
            return
        if op == "complete":
            self.result = message.get("result")
        with self._lock:
            # A child that calls faster than the loop answers waits (its writes block).
            while len(self._calls) >= PENDING_CALLS and not self._done.is_set():
                self._taken.wait(0.1)
            self._calls.append(message)

    def _finish(self, outcome: Outcome) -> None:
        with self._lock:
            if self._outcome is None:
                self._outcome = outcome
        self._done.set()

    # -- the Execution API --------------------------------------------------------------------
    def poll(self) -> Outcome | None:
        return self._outcome if self._done.is_set() else None

    def wait(self, timeout: float | None = None) -> Outcome | None:
        self._done.wait(timeout)
        return self.poll()

    def take_calls(self) -> list[dict]:
        with self._lock:
            calls, self._calls = self._calls, []
            self._taken.notify_all()
        return calls

    def output(self) -> tuple[str, str]:
        return self.stdout.text(), self.stderr.text()


# --- PythonExecutor ----------------------------------------------------------------------

_TARGET = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")


class _Worker:
    """A ``python -m worklife.child`` process that runs Python targets one attempt at a time."""

    def __init__(self, binding_env: Mapping[str, str] | None = None) -> None:
        self.current: PythonExecution | None = None
        self.binding_env = dict(binding_env or {})
        env = {**inherited_environment(), **self.binding_env}
        # The worker imports ``worklife.child`` and the targets from where this loop imports
        # them (the project, its virtualenv): the loop's own import path, after the binding's.
        paths = [self.binding_env.get("PYTHONPATH", ""), *sys.path]
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        env["PYTHONUNBUFFERED"] = "1"
        self.process = _Process(
            [sys.executable, "-m", "worklife.child"],
            env=env,
            cwd=str(getattr(django_settings, "BASE_DIR", "") or "") or None,
            on_call=self._on_call,
            on_stdout=self._on_stdout,
            on_overlong=self._on_overlong,
        )
        self.pid = self.process.pid
        self._watcher = threading.Thread(target=self._watch, name=f"conduit-worker-{self.pid}", daemon=True)
        self._watcher.start()

    def _on_call(self, line: bytes) -> None:
        message = _parse_call(line)
        execution = self.current
        if message is None or execution is None:
            return
        if message["op"] == "result":
            error = message.get("error", "")
            if message.get("traceback"):
                execution.stderr.add(message["traceback"].encode("utf-8", errors="replace"))
            self.current = None
            execution._finish(Outcome(ok=bool(message.get("ok")), result=message.get("value"), error=error))
            return
        execution._call(message)

    def _on_stdout(self, line: bytes) -> None:
        execution = self.current
        if execution is not None:
            execution.stdout.add(line)

    def _on_overlong(self, limit: int) -> None:
        """A call (a result) over the line limit: the attempt fails and the worker ends (its
        target may be waiting for an answer that cannot come)."""
        execution, self.current = self.current, None
        if execution is not None:
            execution._tainted = True
            execution._finish(Outcome(ok=False, error=_overlong_error(limit)))
        self.process.kill()

    def _watch(self) -> None:
        code = self.process.popen.wait()
        self.process.containment.end()
        self.process.join_readers()
        execution, self.current = self.current, None
        if execution is not None:
            stderr = self.process.stderr.text().strip()[-500:]
            execution.stderr.add(self.process.stderr.text().encode("utf-8", errors="replace"))
            execution._finish(
                Outcome(
                    ok=False,
                    error=f"the Python worker exited with status {code}" + (f": {stderr}" if stderr else ""),
                    exit_status=code,
                )
            )

    @property
    def alive(self) -> bool:
        return self.process.exited() is None

    def run(self, execution: PythonExecution, message: dict) -> bool:
        self.current = execution
        if not self.process.send(message):
            self.current = None
            return False
        return True


class PythonExecution(ProcessExecution):
    """An attempt of a Python target, run by a worker process of its own."""

    def __init__(self, attempt_id: int, worker: _Worker, pool: PythonExecutor) -> None:
        super().__init__(attempt_id)
        self.worker = worker
        self.pid = worker.pid
        self._pool = pool
        self._tainted = False

    def reply(self, call_id: Any, *, ok: bool, value: Any = None, error: str = "") -> None:
        self.worker.process.send({"kind": "reply", "id": call_id, "ok": ok, "value": value, "error": error})

    def send_inputs(self, events: Sequence[Any]) -> bool:
        return all(self.worker.process.send({"kind": "input", "event": e, "injected": True}) for e in events)

    def send_interrupt(self, reason: str) -> bool:
        self._tainted = True  # an interrupted target may leave state behind: not reused
        return self.worker.process.send({"kind": "interrupt", "reason": reason})

    def signal(self, signum: int) -> None:
        self._tainted = True
        self.worker.process.signal(signum)

    def kill(self) -> None:
        self._tainted = True
        self.worker.process.kill()

    def release(self) -> None:
        self._pool._give_back(self.worker, reusable=not self._tainted and self.poll() is not None)


class PythonExecutor(Executor):
    """Runs a Python function in a worker process: settings ``{"target": "module:function"}``
    (plus ``params``, a mapping the function reads as ``run.params``, ``env``, variables added
    to the worker's environment, ``timeout`` and ``interrupt_grace``).

    The worker's environment is built, never inherited: the allow-list of the loop's own
    (:data:`ENV_ALLOWED`), the binding's ``env``, ``PYTHONPATH`` (the binding's, then the
    loop's import path, so the worker imports what the loop imports) and, while an attempt
    runs, ``CONDUIT_WORK_ID`` and ``CONDUIT_ATTEMPT_ID``. A worker is reused only for a
    binding with the same ``env``, and only when its attempt left no process running (else it
    is ended with them: :class:`_Containment`).

    The function is called with a :class:`worklife.child.Run`. A worker whose attempt ended
    normally runs the next attempt (no start-up cost); one that was interrupted, timed out,
    cancelled or crashed is ended. Implements ``inject`` (input the function reads with
    ``run.receive()``) and ``interrupt`` (sets ``run.interrupted``).
    """

    IDLE_WORKERS = 16

    def __init__(self) -> None:
        self._idle: list[_Worker] = []
        self._runs: dict[int, PythonExecution] = {}
        self._lock = threading.Lock()

    @classmethod
    def validate_settings(cls, settings: Mapping[str, Any]) -> Iterable[tuple[str, str]]:
        """``target`` is required and must look like ``"package.module:function"``; ``env``
        maps names to strings."""
        problems = list(_settings_keys(settings, ("target", "params", "env", *COMMON_SETTINGS)))
        problems.extend(_env_setting(settings))
        params = settings.get("params")
        if params is not None and not isinstance(params, Mapping):
            problems.append(("params", "expected a mapping (the target reads it as run.params)"))
        target = settings.get("target")
        if target is None:
            problems.append(("target", "required: the function to run, as 'package.module:function'"))
        elif not isinstance(target, str) or not _TARGET.match(target):
            problems.append(("target", f"{target!r} is not a 'package.module:function' reference"))
        problems.extend(_common_settings(settings))
        return problems

    def start(
        self,
        *,
        work_id: int,
        attempt_id: int,
        binding_settings: Mapping[str, Any],
        inputs: Sequence[Any],
    ) -> PythonExecution:
        """Run the target on an idle worker (or a new one) with the first inputs."""
        message = {
            "kind": "run",
            "target": binding_settings["target"],
            "work_id": work_id,
            "attempt_id": attempt_id,
            "settings": dict(binding_settings),
            "inputs": list(inputs),
        }
        binding_env = _binding_env(binding_settings)
        for _ in range(3):
            worker = self._take(binding_env)
            execution = PythonExecution(attempt_id, worker, self)
            if worker.run(execution, message):
                with self._lock:
                    self._forget_finished()
                    self._runs[attempt_id] = execution
                return execution
            worker.process.kill()
        raise OSError("could not start a Python worker process")

    def inject(self, *, attempt_id: int, inputs: Sequence[Any]) -> None:
        """Hand more input to a running attempt, in order."""
        if not self._running(attempt_id).send_inputs(inputs):
            raise LookupError(f"attempt {attempt_id} cannot take input")

    def interrupt(self, *, attempt_id: int, reason: str = "") -> None:
        """Ask a running attempt to stop what it is doing."""
        self._running(attempt_id).send_interrupt(reason)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.process.close_stdin()
            worker.process.signal(signal.SIGTERM)

    def _take(self, binding_env: Mapping[str, str]) -> _Worker:
        """An idle worker started with the same binding ``env`` (its environment is the
        attempt's), or a new one."""
        with self._lock:
            for index in range(len(self._idle) - 1, -1, -1):
                worker = self._idle[index]
                if not worker.alive:
                    del self._idle[index]
                elif worker.binding_env == binding_env:
                    del self._idle[index]
                    return worker
        return _Worker(binding_env)

    def _give_back(self, worker: _Worker, *, reusable: bool) -> None:
        # A worker whose attempt left a process running is not reused: it is ended with it.
        if reusable and worker.alive and worker.current is None and not worker.process.containment.others():
            with self._lock:
                if len(self._idle) < self.IDLE_WORKERS:
                    self._idle.append(worker)
                    return
        worker.process.close_stdin()
        worker.process.kill()

    def _running(self, attempt_id: int) -> PythonExecution:
        with self._lock:
            execution = self._runs.get(attempt_id)
        if execution is None or execution.poll() is not None:
            raise LookupError(f"attempt {attempt_id} is not running on this executor")
        return execution

    def _forget_finished(self) -> None:
        for attempt_id in [a for a, e in self._runs.items() if e.poll() is not None]:
            del self._runs[attempt_id]


# --- CommandExecutor ---------------------------------------------------------------------


class CommandExecution(ProcessExecution):
    """A command in its own process group: exit status 0 is success."""

    def __init__(
        self, attempt_id: int, argv: Sequence[str], *, env: Mapping[str, str], cwd: str | None
    ) -> None:
        super().__init__(attempt_id)
        self._refused = ""
        self.process = _Process(
            argv,
            env=env,
            cwd=cwd,
            on_call=self._on_call_line,
            on_stdout=self._on_stdout,
            on_overlong=self._on_overlong,
            calls_on_stdout=True,
        )
        self.pid = self.process.pid
        self._waiter = threading.Thread(target=self._watch, name=f"conduit-command-{self.pid}", daemon=True)
        self._waiter.start()

    def _on_call_line(self, line: bytes) -> None:
        message = _parse_call(line)
        if message is not None:
            self._call(message)

    def _on_stdout(self, line: bytes) -> None:
        if line.startswith(CALL_PREFIX.encode()):
            message = _parse_call(line[len(CALL_PREFIX) :])
            if message is not None:
                self._call(message)
                return
        self.stdout.add(line)

    def _on_overlong(self, limit: int) -> None:
        """A call over the line limit cannot be answered: the attempt fails, its process ends."""
        self._refused = _overlong_error(limit)
        self.kill()

    def _watch(self) -> None:
        code = self.process.popen.wait()
        self.process.containment.end()  # what it left running ends with it
        self.process.join_readers()
        self.process.close_stdin()
        self.stderr.add(self.process.stderr.text().encode("utf-8", errors="replace"))
        if self._refused:
            outcome = Outcome(ok=False, result=self.result, error=self._refused, exit_status=code)
        elif code == 0:
            outcome = Outcome(ok=True, result=self.result, exit_status=0)
        else:
            tail = self.process.stderr.text().strip()[-500:]
            how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
            outcome = Outcome(
                ok=False, result=self.result, error=how + (f": {tail}" if tail else ""), exit_status=code
            )
        self._finish(outcome)

    def reply(self, call_id: Any, *, ok: bool, value: Any = None, error: str = "") -> None:
        self.process.send({"kind": "reply", "id": call_id, "ok": ok, "value": value, "error": error})

    def send_inputs(self, events: Sequence[Any]) -> bool:
        return all(self.process.send({"kind": "input", "event": e, "injected": True}) for e in events)

    def send_interrupt(self, reason: str) -> bool:
        sent = self.process.send({"kind": "interrupt", "reason": reason})
        self.process.signal(signal.SIGINT)
        return sent

    def signal(self, signum: int) -> None:
        self.process.signal(signum)

    def kill(self) -> None:
        self.process.kill()


class CommandExecutor(Executor):
    """Runs a command: settings ``{"argv": [...], "cwd": "...", "env": {...}}`` (``cwd``,
    ``env``, ``timeout`` and ``interrupt_grace`` optional).

    The process runs in its own process group. Its environment is built, never inherited:
    the allow-list of the loop's own (:data:`ENV_ALLOWED`), the binding's ``env``,
    ``PYTHONPATH`` (the project's directory, unless ``env`` sets it), ``CONDUIT_WORK_ID``,
    ``CONDUIT_ATTEMPT_ID``, ``CONDUIT_CALL_FD`` and ``CONDUIT_PROCESS_MARK``. Its inputs arrive
    on standard input as JSON lines (``{"kind": "input", "event": …}``, then
    ``{"kind": "started", …}``); injected input arrives as more such lines and is confirmed
    once written; an interrupt is a ``{"kind": "interrupt"}`` line and SIGINT to its process
    group, then SIGTERM and, after the grace, the kill. Exit status 0 completes the Work.

    Ending the attempt (a kill, or the command's own exit) ends every process it started,
    ``setsid`` included (:class:`_Containment`).
    """

    def __init__(self) -> None:
        self._runs: dict[int, CommandExecution] = {}
        self._lock = threading.Lock()

    @classmethod
    def validate_settings(cls, settings: Mapping[str, Any]) -> Iterable[tuple[str, str]]:
        """``argv`` is a non-empty list of strings; ``cwd`` a string; ``env`` string to string."""
        problems = list(_settings_keys(settings, ("argv", "cwd", "env", *COMMON_SETTINGS)))
        argv = settings.get("argv")
        if argv is None:
            problems.append(("argv", "required: the command to run, as a list of strings"))
        elif not isinstance(argv, Sequence) or isinstance(argv, str) or not argv:
            problems.append(("argv", "expected a non-empty list of strings"))
        else:
            for index, arg in enumerate(argv):
                if not isinstance(arg, str):
                    problems.append((f"argv[{index}]", f"expected a string, got {type(arg).__name__}"))
        cwd = settings.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            problems.append(("cwd", "expected a string"))
        problems.extend(_env_setting(settings))
        problems.extend(_common_settings(settings))
        return problems

    def start(
        self,
        *,
        work_id: int,
        attempt_id: int,
        binding_settings: Mapping[str, Any],
        inputs: Sequence[Any],
    ) -> CommandExecution:
        """Start the command and write its first inputs as JSON lines on standard input."""
        binding_env = _binding_env(binding_settings)
        env = {**inherited_environment(), **binding_env}
        env[WORK_ID_ENV] = str(work_id)
        env[ATTEMPT_ID_ENV] = str(attempt_id)
        base = str(getattr(django_settings, "BASE_DIR", "") or "")
        if base and "PYTHONPATH" not in binding_env:
            # The project's packages (``python3 -m demo.agents``) import from any Python.
            env["PYTHONPATH"] = os.pathsep.join(p for p in (base, os.environ.get("PYTHONPATH", "")) if p)
        cwd = binding_settings.get("cwd") or base or None
        execution = CommandExecution(attempt_id, list(binding_settings["argv"]), env=env, cwd=cwd)
        for event in inputs:
            execution.process.send({"kind": "input", "event": event})
        execution.process.send({"kind": "started", "work_id": work_id, "attempt_id": attempt_id})
        with self._lock:
            for done in [a for a, e in self._runs.items() if e.poll() is not None]:
                del self._runs[done]
            self._runs[attempt_id] = execution
        return execution

    def inject(self, *, attempt_id: int, inputs: Sequence[Any]) -> None:
        """Write more input lines to a running command."""
        with self._lock:
            execution = self._runs.get(attempt_id)
        if execution is None or not execution.send_inputs(inputs):
            raise LookupError(f"attempt {attempt_id} is not running on this executor")

    def interrupt(self, *, attempt_id: int, reason: str = "") -> None:
        """Send the interrupt line and SIGINT to a running command."""
        with self._lock:
            execution = self._runs.get(attempt_id)
        if execution is None:
            raise LookupError(f"attempt {attempt_id} is not running on this executor")
        execution.send_interrupt(reason)


# --- binding validation (R2) -------------------------------------------------------------


class BindingInvalid(ValueError):
    """A binding cannot be used as declared. ``problems`` lists ``(place, message)`` with
    places relative to the binding (``controls``, ``settings.target``, ``executor``)."""

    def __init__(self, name: str, problems: Sequence[tuple[str, str]]) -> None:
        self.name = name
        self.problems = list(problems)
        detail = "; ".join(f"{place}: {message}" for place, message in self.problems)
        super().__init__(f"binding {name!r}: {detail}")


def implements(cls: type, control: str) -> bool:
    """Whether ``cls`` really implements ``control`` as a method (its own or inherited).

    A flag, a constant or ``None`` under that name is not an implementation (R2).
    """
    attr = inspect.getattr_static(cls, control, None)
    if isinstance(attr, staticmethod | classmethod):
        attr = attr.__func__
    return inspect.isfunction(attr)


def supported_controls(cls: type | None) -> frozenset[str]:
    """The optional controls ``cls`` implements (none for a queue-only binding)."""
    if cls is None:
        return frozenset()
    return frozenset(control for control in CONTROLS if implements(cls, control))


def validate_binding(
    name: str,
    executor_name: str,
    executor_cls: type | None,
    settings: Mapping[str, Any],
    controls: Iterable[str],
) -> frozenset[str]:
    """Check a binding against its executor implementation; return its capabilities (R2).

    A control is supported only if ``executor_cls`` implements it as a method; a queue-only
    binding (no executor) may not claim any. Settings are checked by the class's
    ``validate_settings``. Raises :class:`BindingInvalid` listing every problem.
    """
    problems: list[tuple[str, str]] = []
    claimed: list[str] = []
    for index, control in enumerate(controls):
        if control not in CONTROLS:
            problems.append(
                (
                    f"controls[{index}]",
                    f"unknown control {control!r} (expected one of: {', '.join(CONTROLS)})",
                )
            )
        elif control in claimed:
            problems.append((f"controls[{index}]", f"control {control!r} is listed twice"))
        else:
            claimed.append(control)
    if executor_cls is None:
        if executor_name:
            problems.append(("executor", f"executor {executor_name!r} is not registered"))
        elif claimed:
            problems.append(
                (
                    "controls",
                    f"a queue-only binding (no executor) cannot claim controls: {', '.join(claimed)}",
                )
            )
        elif settings:
            problems.append(("settings", "a queue-only binding (no executor) takes no settings"))
    else:
        label = f"executor {executor_name!r} ({executor_cls.__module__}.{executor_cls.__qualname__})"
        if not implements(executor_cls, "start"):
            problems.append(("executor", f"{label} has no start method"))
        missing = [control for control in claimed if not implements(executor_cls, control)]
        if missing:
            problems.append(("controls", f"{label} does not implement {', '.join(missing)}"))
        check = getattr(executor_cls, "validate_settings", None)
        if callable(check):
            problems.extend((f"settings.{place}", message) for place, message in check(settings))
    if problems:
        raise BindingInvalid(name, problems)
    return frozenset(claimed)


# --- the registry ------------------------------------------------------------------------


class ExecutorMissing(LookupError):
    """No executor is registered under the name (or its registration cannot be loaded)."""


def registered_executors() -> dict[str, str]:
    """``CONDUIT_EXECUTORS`` as read now: registration name -> dotted path."""
    return dict(getattr(django_settings, "CONDUIT_EXECUTORS", {}) or {})


def executor_class(name: str) -> type:
    """The executor class registered as ``name``.

    Raises :class:`ExecutorMissing` when the name is not registered or its path cannot be
    imported (the message says which).
    """
    path = registered_executors().get(name)
    if path is None:
        raise ExecutorMissing(f"executor {name!r} is not registered")
    try:
        cls = import_dotted(path)
    except RegistrationError as exc:
        raise ExecutorMissing(
            f"executor {name!r} is registered as {path!r} but cannot be loaded: {exc}"
        ) from exc
    if not inspect.isclass(cls):
        raise ExecutorMissing(f"executor {name!r} is registered as {path!r}, which is not a class")
    return cls


def find_executor_class(name: str) -> type | None:
    """The executor class registered as ``name``, or ``None`` when there is none usable."""
    try:
        return executor_class(name)
    except ExecutorMissing:
        return None


@dataclass(frozen=True, slots=True)
class ExecutorInfo:
    """A registration as listed by :func:`executor_catalog`."""

    name: str
    path: str
    controls: frozenset[str] = field(default_factory=frozenset)
    problem: str = ""


def executor_catalog() -> list[ExecutorInfo]:
    """Every registered executor with the controls it implements, or why it cannot load."""
    catalog = []
    for name, path in sorted(registered_executors().items()):
        try:
            cls = executor_class(name)
        except ExecutorMissing as exc:
            catalog.append(ExecutorInfo(name=name, path=path, problem=str(exc)))
        else:
            catalog.append(ExecutorInfo(name=name, path=path, controls=supported_controls(cls)))
    return catalog
