"""Handler calls on their own threads, each under a deadline (R12).

A handler that never returns cannot be killed in Python; its thread is *abandoned*: the pool
stops waiting for it, starts a replacement worker so routing goes on, and counts it. The
number of abandoned threads is bounded (``max_abandoned``): past it the pool refuses new calls
(:class:`PoolExhausted`) so a handler that keeps hanging cannot exhaust threads or memory.
An abandoned thread that finally returns is released and the count goes down.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger("conduit.routing.pool")


class PoolExhausted(RuntimeError):
    """Too many handler calls are abandoned; no new call is started until some return."""


@dataclass(slots=True)
class _Call:
    fn: Callable[[], Any]
    done: threading.Event = field(default_factory=threading.Event)
    started_at: float | None = None
    result: Any = None
    exception: BaseException | None = None
    stack: str = ""
    abandoned: bool = False


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """How one call ended: a result, an exception (with its formatted stack), or a timeout."""

    result: Any = None
    exception: BaseException | None = None
    stack: str = ""
    timed_out: bool = False
    elapsed: float = 0.0


class HandlerPool:
    """A fixed set of worker threads that run handler calls under a per-call deadline."""

    def __init__(self, *, workers: int = 4, max_abandoned: int = 16, name: str = "route-handler") -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self.workers = workers
        self.max_abandoned = max_abandoned
        self.name = name
        self._queue: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._abandoned = 0
        self._abandoned_total = 0
        self._live = 0
        self._closed = False
        for _ in range(workers):
            self._spawn()

    # -- introspection (doctor) --------------------------------------------------------
    @property
    def abandoned(self) -> int:
        """Calls abandoned at their deadline whose threads have not returned yet."""
        with self._lock:
            return self._abandoned

    @property
    def abandoned_total(self) -> int:
        with self._lock:
            return self._abandoned_total

    # -- running -----------------------------------------------------------------------
    def run_all(self, fns: Sequence[Callable[[], Any]], *, timeout: float) -> list[CallOutcome]:
        """Run each function on a worker; each gets ``timeout`` seconds from the moment it
        starts. Returns one outcome per function, in order."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the handler pool is closed")
            if self._abandoned >= self.max_abandoned:
                raise PoolExhausted(
                    f"{self._abandoned} handler calls are abandoned (at most {self.max_abandoned})"
                )
        calls = [_Call(fn) for fn in fns]
        for call in calls:
            self._queue.put(call)
        outcomes: list[CallOutcome] = []
        for call in calls:
            outcomes.append(self._wait(call, timeout))
        return outcomes

    def run(self, fn: Callable[[], Any], *, timeout: float) -> CallOutcome:
        return self.run_all([fn], timeout=timeout)[0]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            live = self._live
        for _ in range(live):
            self._queue.put(None)

    # -- internals -----------------------------------------------------------------------
    def _wait(self, call: _Call, timeout: float) -> CallOutcome:
        while True:
            if call.started_at is None:
                # Not started yet: queueing time does not count against the deadline.
                if call.done.wait(0.005):
                    break
                continue
            remaining = call.started_at + timeout - time.monotonic()
            if remaining <= 0 or not call.done.wait(remaining):
                if call.done.is_set():
                    break
                self._abandon(call)
                return CallOutcome(timed_out=True, elapsed=time.monotonic() - call.started_at)
            break
        elapsed = time.monotonic() - (call.started_at or time.monotonic())
        return CallOutcome(result=call.result, exception=call.exception, stack=call.stack, elapsed=elapsed)

    def _abandon(self, call: _Call) -> None:
        with self._lock:
            if call.done.is_set():
                return
            call.abandoned = True
            self._abandoned += 1
            self._abandoned_total += 1
            logger.warning(
                "route.handler_abandoned", extra={"abandoned": self._abandoned, "limit": self.max_abandoned}
            )
        # The stuck thread no longer serves the queue: keep the pool at its size.
        self._spawn()

    def _spawn(self) -> None:
        with self._lock:
            self._live += 1
        thread = threading.Thread(target=self._worker, name=f"{self.name}-{self._live}", daemon=True)
        thread.start()

    def _worker(self) -> None:
        while True:
            call = self._queue.get()
            if call is None:
                with self._lock:
                    self._live -= 1
                return
            call.started_at = time.monotonic()
            try:
                call.result = call.fn()
            except BaseException as exc:  # noqa: BLE001 - the thread boundary: every error is reported
                call.exception = exc
                call.stack = "".join(traceback.format_exception(exc))
            with self._lock:
                call.done.set()
                if call.abandoned:
                    # A replacement already serves the queue: this thread retires.
                    self._abandoned -= 1
                    self._live -= 1
                    return
