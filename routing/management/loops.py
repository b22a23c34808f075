"""What the long-running commands (``route_loop``, ``work_loop``) share: a graceful stop."""

from __future__ import annotations

import signal
import threading


def install_graceful_stop(stop: threading.Event) -> dict:
    """On the first SIGTERM/SIGINT set ``stop`` (the loop finishes what it has in hand) and
    restore the default handler, so that a second one kills. Returns the handlers to put back
    with :func:`restore_signals`; installs nothing off the main thread (a test's thread)."""
    previous: dict = {}
    if threading.current_thread() is not threading.main_thread():
        return previous

    def graceful(signum, frame):
        stop.set()
        signal.signal(signum, signal.SIG_DFL)

    for signum in (signal.SIGTERM, signal.SIGINT):
        previous[signum] = signal.getsignal(signum)
        signal.signal(signum, graceful)
    return previous


def restore_signals(previous: dict) -> None:
    """Put back the handlers :func:`install_graceful_stop` replaced."""
    for signum, handler in previous.items():
        signal.signal(signum, handler)
