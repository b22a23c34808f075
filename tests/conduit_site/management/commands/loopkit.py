"""Shared by the loop command tests: a ``manage.py`` command run in its own process, stopped with
SIGTERM."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from tests.support import child_env, manage_command


@contextmanager
def command_running(*args: str, host: str = "") -> Iterator[subprocess.Popen]:
    """``manage.py ARGS`` in a new process on the test database, its output read as text; killed
    on the way out if it still runs. ``host``: the process is on a host of that name
    (``CONDUIT_HOSTNAME``), as the takeover bench runs two hosts on one machine."""
    proc = subprocess.Popen(
        manage_command(*args),
        env=child_env(**({"CONDUIT_HOSTNAME": host} if host else {})),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()


def sigterm(proc: subprocess.Popen) -> tuple[str, str]:
    """Send SIGTERM to ``proc`` and return its output and errors once it has ended (30 s at most)."""
    proc.send_signal(signal.SIGTERM)
    return proc.communicate(timeout=30)
