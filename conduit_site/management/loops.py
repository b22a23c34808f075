"""What the long-running commands (``route_loop``, ``work_loop``) share: a graceful stop; and
the cyclic garbage collector's tuning for a loop whose passes build many short-lived objects
(``route_loop``)."""

from __future__ import annotations

import gc
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# The collector's first-generation threshold in a loop's process. A route loop's window of 500
# Events keeps about 10,000 container objects alive while it routes (snapshots, verdicts,
# decisions, settlements); at Python's default of 2,000 the collector ran about four times a
# window, each time walking the window's live objects, all of which reference counting frees
# anyway: about 5 µs an Event, 3% of routing. Cyclic garbage still starts a
# collection once this many objects are left over.
LOOP_GC_THRESHOLD = 20_000


@contextmanager
def collector_tuned() -> Iterator[None]:
    """For a loop's run: the first generation's threshold is :data:`LOOP_GC_THRESHOLD`, put
    back on exit (a command run inside a test's process leaves the collector as it was).
    Start-up's objects are already frozen out of collection (``conduit_site.apps``)."""
    previous = gc.get_threshold()
    gc.set_threshold(max(LOOP_GC_THRESHOLD, previous[0]), *previous[1:])
    try:
        yield
    finally:
        gc.set_threshold(*previous)


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
