"""Handler calls on their own threads, each under a deadline (R12).

A call may run in steps (asking an Event's routes: one step per handler): a stepped call is
given its :class:`Steps`, whose ``running`` it sets as each step starts, and each step then
has the whole deadline from its own start; a timeout names the step that overran. A step that
returned after its deadline is a timeout too, whether or not the waiter was watching its call
then (the waiter follows one batch at a time, and another worker's batch may end meanwhile).

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
from typing import Any, Protocol

from infra.frozen import frozen

logger = logging.getLogger("conduit.routing.pool")


class PoolExhausted(RuntimeError):
    """Too many handler calls are abandoned; no new call is started until some return."""


@dataclass(slots=True)
class _Call:
    fn: Callable[..., Any]
    stepped: bool = False  # fn is given the call itself, as its Steps
    timeout: float = 0.0  # each step's deadline, from its own start
    started_at: float | None = None
    # (start, step) of what the call runs now, one value so the waiter never reads the start
    # of one step with the name of another: the call's own start, then each step's.
    _running: tuple[float, str] | None = None
    # (how long, step) of the first step that ran past its deadline and still returned: a
    # timeout, though no waiter was watching when it overran (its batch not reached yet).
    late: tuple[float, str] | None = None
    finished: bool = False
    result: Any = None
    exception: BaseException | None = None
    stack: str = ""
    abandoned: bool = False
    timed_out: bool = False
    elapsed: float = 0.0
    timed_out_after: float = 0.0
    timed_out_step: str = ""

    @property
    def running(self) -> tuple[float, str] | None:
        return self._running

    @running.setter
    def running(self, value: tuple[float, str] | None) -> None:
        # A step starting ends the one before it: that one overran if it took its deadline.
        previous = self._running
        if previous is not None and value is not None and self.late is None:
            took = value[0] - previous[0]
            if took >= self.timeout:
                self.late = (took, previous[1])
        self._running = value


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


class Steps(Protocol):
    """What a stepped call is given: it sets ``running`` to ``(time.monotonic(), name)`` as
    each of its steps starts (a route's handler), and that step's deadline counts from there.
    An attribute, not a method: a step costs a clock read and one store (whose setter notes
    whether the step before it overran)."""

    running: tuple[float, str] | None


@frozen
class CallOutcome:
    """How one call ended: a result, an exception (with its formatted stack), or a timeout
    (and the step that overran, for a stepped call)."""

    result: Any = None
    exception: BaseException | None = None
    stack: str = ""
    timed_out: bool = False
    elapsed: float = 0.0
    step: str = ""


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
    def run_all(
        self, fns: Sequence[Callable[..., Any]], *, timeout: float, stepped: bool = False
    ) -> list[CallOutcome]:
        """Run each function on a worker; each gets ``timeout`` seconds from the moment it
        starts (each of its steps, ``stepped``: see :meth:`start_all`). Returns one outcome
        per function, in order."""
        return self.start_all(fns, timeout=timeout, stepped=stepped).outcomes()

    def start_all(
        self, fns: Sequence[Callable[..., Any]], *, timeout: float, stepped: bool = False
    ) -> Started:
        """:meth:`run_all` without waiting: the calls are queued, and :meth:`Started.outcomes`
        waits for them (abandoning those that overrun) and returns their outcomes. The caller
        goes on meanwhile (the route loop writes one window while its workers ask the routes
        about the next). Raises :class:`PoolExhausted` at once, starting nothing.

        ``stepped``: each function is called with its :class:`Steps`, to mark each of its
        steps as it starts; ``timeout`` then bounds each step, from its own start."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the handler pool is closed")
            if self._abandoned >= self.max_abandoned:
                raise PoolExhausted(
                    f"{self._abandoned} handler calls are abandoned (at most {self.max_abandoned})"
                )
        calls = [_Call(fn, stepped, timeout) for fn in fns]
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
                running = batch.calls[index].running if index < len(batch.calls) else None
            if running is None:
                # Not started yet: queueing time does not count against the deadline.
                batch.done.wait(0.005)
                continue
            remaining = running[0] + timeout - time.monotonic()
            if remaining > 0:
                # The common path: one wait until the batch ends. A step that starts meanwhile
                # is seen when this wait ends, its own deadline still ahead.
                batch.done.wait(remaining)
                continue
            rest = self._abandon(batch, index, timeout)
            if rest is not None:
                return self._enqueue(rest)
        return []

    @staticmethod
    def _outcome(call: _Call) -> CallOutcome:
        if call.timed_out:
            return CallOutcome(timed_out=True, elapsed=call.timed_out_after, step=call.timed_out_step)
        if call.late is not None:
            # It returned, but after its deadline: a timeout whenever the waiter looked.
            return CallOutcome(timed_out=True, elapsed=call.late[0], step=call.late[1])
        # Positional (result, exception, stack, timed_out, elapsed): one a handler call.
        return CallOutcome(call.result, call.exception, call.stack, False, call.elapsed)

    def _abandon(self, batch: _Batch, index: int, timeout: float) -> list[_Call] | None:
        """Abandon the call at ``index`` of ``batch`` (its step running past its deadline) and
        take back the calls after it; ``None`` when it has just returned, or started another
        step, after all."""
        call = batch.calls[index]
        with self._lock:
            if call.finished or batch.running != index or call.running is None:
                return None
            started, step = call.running
            overran = time.monotonic() - started
            if overran < timeout:
                return None
            call.abandoned = True
            call.timed_out = True
            call.timed_out_after = overran
            call.timed_out_step = step
            batch.cut = index + 1
            self._abandoned += 1
            self._abandoned_total += 1
            logger.warning(
                "route.handler_abandoned",
                extra={"route": step, "abandoned": self._abandoned, "limit": self.max_abandoned},
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
                    call.result = call.fn(call) if call.stepped else call.fn()
                except BaseException as exc:  # noqa: BLE001 - the thread boundary: every error is reported
                    call.exception = exc
                    call.stack = "".join(traceback.format_exception(exc))
                # A call's end and the start of the next are one turn of the lock.
                with lock:
                    now = time.monotonic()
                    call.finished = True
                    call.elapsed = now - call.started_at
                    last = call._running
                    if last is not None and call.late is None and now - last[0] >= call.timeout:
                        call.late = (now - last[0], last[1])
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
        call = calls[index]
        call.started_at = now
        call.running = (now, "")
        return index
    batch.running = len(calls)
    return len(calls)


# Calls at most in one batch (routing.engine.handler_pool._Batch).
BATCH_CALLS = 32
