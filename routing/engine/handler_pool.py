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

from infra.frozen import frozen

logger = logging.getLogger("conduit.routing.pool")


class PoolExhausted(RuntimeError):
    """Too many handler calls are abandoned; no new call is started until some return."""


@dataclass(slots=True)
class _Call:
    fn: Callable[[], Any]
    started_at: float | None = None
    finished: bool = False
    result: Any = None
    exception: BaseException | None = None
    stack: str = ""
    abandoned: bool = False
    timed_out: bool = False
    elapsed: float = 0.0
    timed_out_after: float = 0.0


@dataclass(slots=True)
class _Batch:
    """Calls one worker runs in order. A worker takes a batch from the queue, not a call: a
    window of hundreds of quick calls costs a few hand-overs between threads instead of one
    (and one wake-up) per call. Each call keeps its own deadline from its own start: when one
    overruns, the pool abandons it and hands the calls after it to another worker."""

    calls: list[_Call]
    done: threading.Event = field(default_factory=threading.Event)
    running: int = 0  # the index of the call the worker runs (or runs next)
    cut: int | None = None  # the pool took the calls from here on back (after an abandoned one)


@frozen
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
        return self.start_all(fns, timeout=timeout).outcomes()

    def start_all(self, fns: Sequence[Callable[[], Any]], *, timeout: float) -> Started:
        """:meth:`run_all` without waiting: the calls are queued, and :meth:`Started.outcomes`
        waits for them (abandoning those that overrun) and returns their outcomes. The caller
        goes on meanwhile (the route loop writes one window while its workers ask the routes
        about the next). Raises :class:`PoolExhausted` at once, starting nothing."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the handler pool is closed")
            if self._abandoned >= self.max_abandoned:
                raise PoolExhausted(
                    f"{self._abandoned} handler calls are abandoned (at most {self.max_abandoned})"
                )
        calls = [_Call(fn) for fn in fns]
        return Started(self, calls, self._enqueue(calls), timeout)

    def run(self, fn: Callable[[], Any], *, timeout: float) -> CallOutcome:
        return self.run_all([fn], timeout=timeout)[0]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            live = self._live
        for _ in range(live):
            self._queue.put(None)

    # -- internals -----------------------------------------------------------------------
    def _enqueue(self, calls: list[_Call]) -> list[_Batch]:
        """Queue ``calls`` as batches: enough of them for every worker to take several, so a
        call that overruns holds back only the few calls queued behind it in its batch."""
        size = max(1, min(BATCH_CALLS, -(-len(calls) // (self.workers * 4))))
        batches = [_Batch(calls[start : start + size]) for start in range(0, len(calls), size)]
        for batch in batches:
            self._queue.put(batch)
        return batches

    def _wait(self, batch: _Batch, timeout: float) -> list[_Batch]:
        """Wait until ``batch`` ends, abandoning each call of it that overruns its deadline.
        Returns the batches its calls after an abandoned one were queued again in."""
        while not batch.done.is_set():
            with self._lock:
                index = batch.running
                started = batch.calls[index].started_at if index < len(batch.calls) else None
            if started is None:
                # Not started yet: queueing time does not count against the deadline.
                batch.done.wait(0.005)
                continue
            remaining = started + timeout - time.monotonic()
            if remaining > 0:
                batch.done.wait(remaining)
                continue
            rest = self._abandon(batch, index)
            if rest is not None:
                return self._enqueue(rest)
        return []

    @staticmethod
    def _outcome(call: _Call) -> CallOutcome:
        if call.timed_out:
            return CallOutcome(timed_out=True, elapsed=call.timed_out_after)
        # Positional (result, exception, stack, timed_out, elapsed): one a handler call.
        return CallOutcome(call.result, call.exception, call.stack, False, call.elapsed)

    def _abandon(self, batch: _Batch, index: int) -> list[_Call] | None:
        """Abandon the call at ``index`` of ``batch`` (still running past its deadline) and
        take back the calls after it; ``None`` when it has just returned after all."""
        call = batch.calls[index]
        with self._lock:
            if call.finished or batch.running != index:
                return None
            call.abandoned = True
            call.timed_out = True
            call.timed_out_after = time.monotonic() - (call.started_at or time.monotonic())
            batch.cut = index + 1
            self._abandoned += 1
            self._abandoned_total += 1
            logger.warning(
                "route.handler_abandoned", extra={"abandoned": self._abandoned, "limit": self.max_abandoned}
            )
        # The stuck thread no longer serves the queue: keep the pool at its size.
        self._spawn()
        return batch.calls[index + 1 :]

    def _spawn(self) -> None:
        with self._lock:
            self._live += 1
        thread = threading.Thread(target=self._worker, name=f"{self.name}-{self._live}", daemon=True)
        thread.start()

    def _worker(self) -> None:
        lock = self._lock
        while True:
            batch = self._queue.get()
            if batch is None:
                with lock:
                    self._live -= 1
                return
            calls = batch.calls
            with lock:
                index = _start(batch, 0, time.monotonic())
            while index < len(calls):
                call = calls[index]
                try:
                    call.result = call.fn()
                except BaseException as exc:  # noqa: BLE001 - the thread boundary: every error is reported
                    call.exception = exc
                    call.stack = "".join(traceback.format_exception(exc))
                # A call's end and the start of the next are one turn of the lock.
                with lock:
                    now = time.monotonic()
                    call.finished = True
                    call.elapsed = now - call.started_at
                    if call.abandoned:
                        # A replacement already serves the queue: this thread retires.
                        self._abandoned -= 1
                        self._live -= 1
                        return
                    index = _start(batch, index + 1, now)
            batch.done.set()


class Started:
    """Calls :meth:`HandlerPool.start_all` queued: :meth:`outcomes` waits for them."""

    def __init__(self, pool: HandlerPool, calls: list[_Call], batches: list[_Batch], timeout: float) -> None:
        self._pool = pool
        self._calls = calls
        self._pending = batches
        self._timeout = timeout
        self._outcomes: list[CallOutcome] | None = None

    def outcomes(self) -> list[CallOutcome]:
        """One outcome per call, in order, once every call returned or was abandoned at its
        deadline (each deadline counts from the call's own start)."""
        if self._outcomes is None:
            pool, pending = self._pool, self._pending
            while pending:
                pending = pool._wait(pending.pop(0), self._timeout) + pending
            self._outcomes = [pool._outcome(call) for call in self._calls]
        return self._outcomes


def _start(batch: _Batch, index: int, now: float) -> int:
    """Under the pool's lock: start the call at ``index`` of ``batch`` at ``now`` and return
    ``index``; past its last call, or where the pool took the rest back (after an abandoned
    one), mark the batch run and return the number of its calls."""
    calls = batch.calls
    if index < len(calls) and (batch.cut is None or index < batch.cut):
        batch.running = index
        calls[index].started_at = now
        return index
    batch.running = len(calls)
    return len(calls)


# Calls at most in one batch (routing.engine.handler_pool._Batch).
BATCH_CALLS = 32
