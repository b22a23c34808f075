"""``manage.py serve``'s supervisor: it runs the console's web processes, the router loop and the
Work engine as child processes, restarts one that exits (with backoff), forwards stop signals,
and stops everything on a signal or when a child cannot start at all. What it restarted is
recorded for doctor and the console (:mod:`conduit_site.supervision.restarts`)."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import FrameType

from django.conf import settings
from django.core.management.base import BaseCommand

from conduit_site.logformat import announce
from infra import metrics

POLL_SECONDS = 0.2
READY_TIMEOUT_SECONDS = 60.0
# Exit statuses a child may report after we forwarded SIGINT/SIGTERM to it: a clean stop.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# A child that exits is restarted after a backoff: 1 s, doubling to 30 s, back to 1 s once a
# run lasted a minute.
BACKOFF_FIRST_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 30.0
HEALTHY_SECONDS = 60.0
# A child that cannot start at all (bad configuration): it exits with a status (not killed by a
# signal) within STARTUP_SECONDS of each of its first START_ATTEMPTS starts. serve then stops.
STARTUP_SECONDS = 10.0
START_ATTEMPTS = 3


@dataclass
class Child:
    """One supervised child process."""

    name: str
    argv: list[str]
    process: subprocess.Popen | None = None
    # Descriptors the child inherits (the listening socket daphne workers share).
    pass_fds: tuple[int, ...] = ()
    returncode: int | None = field(default=None)
    signalled: bool = False
    # Supervision: when the running process started (monotonic), restarts so far, the next
    # backoff, when the pending restart is due, and whether one run ever lasted STARTUP_SECONDS.
    started_at: float = 0.0
    restarts: int = 0
    backoff: float = BACKOFF_FIRST_SECONDS
    restart_at: float | None = None
    quick_exits: int = 0
    ever_up: bool = False

    def alive(self) -> bool:
        return self.process is not None and self.returncode is None

    def poll(self) -> int | None:
        if self.process is not None and self.returncode is None:
            self.returncode = self.process.poll()
        return self.returncode

    def exited(self, now: float) -> float:
        """Note the exit seen at ``now``; the backoff before the next start (seconds)."""
        ran = now - self.started_at
        if ran >= STARTUP_SECONDS:
            self.ever_up = True
        elif not self.ever_up and self.returncode is not None and self.returncode > 0:
            self.quick_exits += 1
        if ran >= HEALTHY_SECONDS:
            self.backoff = BACKOFF_FIRST_SECONDS
        delay, self.backoff = self.backoff, min(self.backoff * 2, BACKOFF_MAX_SECONDS)
        self.restart_at = now + delay
        return delay

    def cannot_start(self) -> bool:
        """Whether this child failed fast on each of its first :data:`START_ATTEMPTS` starts."""
        return not self.ever_up and self.quick_exits >= START_ATTEMPTS

    def send(self, signum: int) -> None:
        self.signalled = True
        if self.alive():
            # The child may have exited between the check and the signal.
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signum)


def clean_stop(returncode: int) -> bool:
    """Whether a child's exit status is a clean stop after a forwarded stop signal."""
    return returncode == 0 or any(returncode in (-signum, 128 + signum) for signum in STOP_SIGNALS)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    # Linux only: if serve itself is killed (SIGKILL), its children get SIGTERM rather than
    # living on as orphans holding the port. 1 is PR_SET_PDEATHSIG.
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))


class Supervisor:
    """Runs the children, restarts one that exits (with backoff), forwards stop signals, and
    stops everything on a signal or when a child cannot start at all."""

    def __init__(
        self,
        command: BaseCommand,
        children: list[Child],
        *,
        stop_timeout: float,
        env: Mapping[str, str] | None = None,
        on_restart: Callable[[Child], None] | None = None,
    ) -> None:
        self.command = command
        self.children = children
        self.stop_timeout = stop_timeout
        # Set in every child's environment (over serve's own), e.g. DEBUG=false.
        self.env = dict(env or {})
        # Called after a child that exited was noted for a restart (serve records it for doctor).
        self.on_restart = on_restart
        self.stop_requested = threading.Event()
        # Set by the signal handler so that waits end at once; cleared after each wait.
        self.wakeup = threading.Event()
        self.signals_received = 0
        # The child that could not start, which stopped serve.
        self.failed: Child | None = None

    def run(self, *, url: str, probe: tuple[str, int]) -> int:
        """Start the children and supervise them; the exit status serve should return."""
        previous = {signum: signal.signal(signum, self._on_signal) for signum in STOP_SIGNALS}
        try:
            for child in self.children:
                if self.stop_requested.is_set():
                    break
                self._start(child)
                if self.stop_requested.is_set() and not child.signalled:
                    # The signal came while this child was starting: it missed the forward.
                    child.send(signal.SIGTERM)
            self._announce_when_ready(url, probe)
            self._supervise_until_stop()
            self._shut_down()
        finally:
            for child in self.children:
                if child.alive():
                    child.process.kill()
                    child.returncode = child.process.wait()
                if child.process is not None:
                    metrics.process_exited(child.process.pid, self.env)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        return self._status()

    def _start(self, child: Child) -> None:
        env = {**os.environ, **self.env}
        env.setdefault("DJANGO_SETTINGS_MODULE", settings.SETTINGS_MODULE)
        env.setdefault("PYTHONUNBUFFERED", "1")
        linux = sys.platform.startswith("linux")
        # Own process group: a terminal's Ctrl-C reaches serve only, and serve forwards it
        # once, so the children see one graceful stop rather than two.
        child.process = subprocess.Popen(
            child.argv,
            cwd=settings.BASE_DIR,
            env=env,
            stdin=subprocess.DEVNULL,
            process_group=0,
            # preexec_fn is unsafe only with threads; serve starts none.
            preexec_fn=_die_with_parent if linux else None,
            pass_fds=child.pass_fds,
        )
        child.returncode = None
        child.signalled = False
        child.restart_at = None
        child.started_at = time.monotonic()

    def _sleep(self, seconds: float) -> None:
        self.wakeup.wait(seconds)
        self.wakeup.clear()

    def _announce_when_ready(self, url: str, probe: tuple[str, int]) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            self._supervise_once()
            if self.stop_requested.is_set() or self.failed is not None:
                return
            try:
                with socket.create_connection(probe, timeout=POLL_SECONDS):
                    break
            except OSError:
                self._sleep(POLL_SECONDS)
        else:
            announce(
                self.command.stderr,
                f"The console did not answer within {READY_TIMEOUT_SECONDS:.0f} s.",
                level=logging.WARNING,
            )
            return
        names = {child.name for child in self.children}
        router = "running" if "route_loop" in names else "off (--no-router)"
        work = "running" if "work_loop" in names else "off"
        web = sum(1 for name in names if name.startswith("daphne"))
        announce(
            self.command.stdout,
            f"Conduit console: {url}  (web processes: {web}; router: {router}; work: {work}; Ctrl-C stops)",
            url=url,
        )
        self.command.stdout.flush()

    def _supervise_until_stop(self) -> None:
        """Restart children as they exit until a stop signal, or a child that cannot start."""
        while not self.stop_requested.is_set() and self.failed is None:
            self._supervise_once()
            self._sleep(POLL_SECONDS)

    def _supervise_once(self) -> None:
        """Note the children that exited (logging, counting and scheduling their restart) and
        start those whose backoff is over."""
        for child in self.children:
            if self.stop_requested.is_set() or self.failed is not None:
                return
            now = time.monotonic()
            if child.restart_at is not None:
                if now >= child.restart_at:
                    announce(
                        self.command.stderr,
                        f"Restarting {child.name} (restart {child.restarts}).",
                        level=logging.WARNING,
                        child=child.name,
                    )
                    self._start(child)
                continue
            if child.process is None or child.poll() is None:
                continue
            ran = now - child.started_at
            delay = child.exited(now)
            metrics.process_exited(child.process.pid, self.env)
            if child.cannot_start():
                self.failed = child
                announce(
                    self.command.stderr,
                    f"{child.name} cannot start: it exited with status {child.returncode} within "
                    f"{STARTUP_SECONDS:g} s of each of its first {START_ATTEMPTS} starts; stopping.",
                    level=logging.ERROR,
                    child=child.name,
                    status=child.returncode,
                )
                return
            child.restarts += 1
            announce(
                self.command.stderr,
                f"{child.name} exited with status {child.returncode} after {ran:.1f} s; "
                f"restarting it in {delay:g} s (restart {child.restarts}).",
                level=logging.WARNING,
                child=child.name,
                status=child.returncode,
            )
            if self.on_restart is not None:
                self.on_restart(child)

    def _shut_down(self) -> None:
        if self.failed is not None and not self.stop_requested.is_set():
            for child in self.children:
                child.send(signal.SIGTERM)
        # Children that got the forwarded signal are already stopping: a second signal would
        # kill them before they finish their current transaction, so only wait here.
        deadline = time.monotonic() + self.stop_timeout
        while any(child.alive() and child.poll() is None for child in self.children):
            if time.monotonic() >= deadline:
                for child in self.children:
                    if child.alive():
                        announce(
                            self.command.stderr,
                            f"{child.name} did not stop in time; killing it.",
                            level=logging.WARNING,
                            child=child.name,
                        )
                        child.process.kill()
                        child.returncode = child.process.wait()
                break
            self._sleep(POLL_SECONDS)

    def _status(self) -> int:
        if self.signals_received > 1:
            return 1
        if self.failed is not None and not self.stop_requested.is_set():
            code = self.failed.returncode or 1
            return code if 0 < code < 256 else 1
        # A child waiting for its restart was not running when the stop came: not a failure.
        failed = [
            child
            for child in self.children
            if child.restart_at is None and child.returncode is not None and not clean_stop(child.returncode)
        ]
        if not failed:
            return 0
        code = failed[0].returncode
        return code if 0 < code < 256 else 1

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals_received += 1
        self.wakeup.set()
        if self.signals_received == 1:
            self.stop_requested.set()
            for child in self.children:
                child.send(signum)
            return
        for child in self.children:
            child.send(signal.SIGKILL)
