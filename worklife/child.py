"""The attempt side of the executor protocol, and the process that runs Python targets.

``work_loop`` talks to every attempt's process with JSON lines (see the README's "Writing an
executor"). The loop writes to the process's standard input, one object a line:

* ``{"kind": "input", "event": {...}}``: an input, in acceptance order; the first inputs are
  followed by ``{"kind": "started", "work_id": W, "attempt_id": A, "lease_epoch": E}``, later
  ones are injected while the attempt runs (``"injected": true``);
* ``{"kind": "interrupt", "reason": "..."}``: stop what you are doing;
* ``{"kind": "reply", "id": ID, "ok": true, "value": ...}`` (or ``"ok": false, "error": ...``):
  the answer to a call that carried an ``id``.

The process calls the loop with one JSON object a line on the file descriptor named by
``CONDUIT_CALL_FD`` (a command may instead print the line to its standard output prefixed
with ``@conduit ``): ``emit``, ``wait``, ``child``, ``successor``, ``schedule``, ``complete``
and ``received`` (see :class:`Run`).

This module runs in the attempt's process: it imports nothing from Django, so a target's
process starts quickly. ``python -m worklife.child`` runs one Python attempt and exits (a
binding's fork server, :mod:`worklife.forkserver`, forks a process that does the same), started
by a ``{"kind": "run", ..., "token": T}`` line. ``T`` is the attempt's secret, a random value
the loop makes for that attempt only and gives nowhere else (never in the environment): every
line the process writes for the attempt (its calls, its output, its result) carries
``"attempt": A, "token": T``, and the loop refuses a line whose attempt is not the one it runs
there or whose token is not that attempt's (see docs/work-engine.md).
"""

from __future__ import annotations

import importlib
import io
import itertools
import json
import os
import queue
import sys
import threading
import traceback
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

CALL_PREFIX = "@conduit "
CALL_FD_ENV = "CONDUIT_CALL_FD"
OUTPUT_PIECE = 8192
"""Characters of output a line to the loop carries (escaped, well under its line limit)."""
WORK_ID_ENV = "CONDUIT_WORK_ID"
ATTEMPT_ID_ENV = "CONDUIT_ATTEMPT_ID"
TRACEPARENT_ENV = "TRACEPARENT"
"""The W3C ``traceparent`` of the Event that triggered the attempt, when its sender gave one
(the variable OpenTelemetry's environment propagation reads): the sender's trace continues in
the attempt."""
IDEMPOTENCY_KEY_ENV = "CONDUIT_IDEMPOTENCY_KEY"


# What wakes a ``receive`` when an interrupt arrives (never an input).
_INTERRUPTED = object()


class CallRefused(Exception):
    """The loop refused a call (a stale lease, the causal limits, a bad argument)."""


class RunComplete(BaseException):  # noqa: N818 - a control-flow signal, like SystemExit
    """Raised by :meth:`Run.complete` to end the target with a result."""

    def __init__(self, result: Any) -> None:
        super().__init__("complete")
        self.result = result


class NonRetryable(Exception):  # noqa: N818 - named for what the target says
    """Raise it from a target to fail the attempt for good: the Work is parked at once, whatever
    its binding's retry policy allows."""


class RetryAfter(Exception):  # noqa: N818 - named for what the target says
    """Raise it from a target to fail the attempt and ask for the next one after ``seconds``
    (a rate limit's ``Retry-After``); it counts as a failure towards ``max_attempts``."""

    def __init__(self, seconds: float, message: str = "") -> None:
        super().__init__(message or f"retry after {seconds:g} s")
        self.seconds = float(seconds)


class Run:
    """What a Python target receives: the attempt, its inputs, and the attempt API.

    ``target(run)`` is called once per attempt. Its return value is the attempt's result and
    completes the Work (R47); an exception fails the attempt (it is retried with backoff; raise
    :class:`NonRetryable` to park the Work at once, :class:`RetryAfter` to choose the wait).

    * ``run.inputs``: the Events presented at start, in acceptance order (dicts);
    * ``run.params``: the binding's ``params`` setting;
    * ``run.traceparent``: the W3C ``traceparent`` of the Event that triggered the attempt
      (``""`` when its sender gave none), also in the ``TRACEPARENT`` environment variable;
    * ``run.idempotency_key``: the same for every attempt that presents these inputs again (a
      retry after a failure or a lost attempt), new after a success: make side effects
      exactly-once with it (``CONDUIT_IDEMPOTENCY_KEY`` in the environment too);
    * ``run.receive(timeout)``: the next injected Event, or ``None`` (R32; at once on an interrupt);
    * ``run.interrupted`` (a ``threading.Event``) and ``run.interrupt_reason``;
    * ``run.emit(type, data, subject=…, id=…)``: accept a derived Event (R51) as this Work,
      and return its seq (``id``: a hint that makes emitting it again a duplicate);
    * ``run.wait(type=…, keys=…, timeout=…, scope=…)``: park until a matching Event routes to
      this Work (R41), or, with ``scope``, one of that scope is routed (R42); returns it, or
      ``None`` when the timeout passed first;
    * ``run.create_child(binding, keys, data)``: a child Work (R50), returns its id;
    * ``run.successor(binding, keys, data)``: the successor to create once this Work completes;
    * ``run.schedule(after, type, data)``: a timer that fires an Event after ``after`` seconds;
    * ``run.complete(result)``: end now with ``result``.
    """

    def __init__(
        self,
        *,
        work_id: int,
        attempt_id: int,
        lease_epoch: int = 0,
        settings: Mapping[str, Any] | None = None,
        inputs: Sequence[Any] = (),
        channel: _Channel | None = None,
        traceparent: str = "",
        idempotency_key: str = "",
        token: str = "",
    ) -> None:
        self.work_id = work_id
        self.attempt_id = attempt_id
        self.traceparent = traceparent
        self.idempotency_key = idempotency_key
        # The attempt's secret: every line written for it carries it (see the module docstring).
        self._token = token
        self.lease_epoch = lease_epoch
        self.settings = dict(settings or {})
        self.params = dict(self.settings.get("params") or {})
        self.inputs = tuple(inputs)
        self.interrupted = threading.Event()
        self.interrupt_reason = ""
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._channel = channel

    # -- input ----------------------------------------------------------------------------
    def receive(self, timeout: float | None = None) -> Any | None:
        """The next injected input, waiting up to ``timeout`` seconds; ``None`` if none came,
        and at once when an interrupt arrives (``run.interrupted`` is set then): input injected
        before it is still returned first.

        Receiving an input confirms it: its inject intent is recorded as consumed."""
        try:
            item = self._inbox.get_nowait()
        except queue.Empty:
            if timeout == 0 or self.interrupted.is_set():
                return None
            try:
                item = self._inbox.get(timeout=timeout)
            except queue.Empty:
                return None
        if item is _INTERRUPTED:
            return None
        if self._channel is not None and isinstance(item, dict) and "seq" in item:
            self._channel.send(self._signed({"op": "received", "seq": item["seq"]}))
        return item

    # -- the attempt API -------------------------------------------------------------------
    def emit(self, type: str, data: Any = None, *, subject: str = "", id: str = "") -> int:
        """Accept an Event derived from this attempt's trigger; returns its seq.

        Its source is the Work's (``conduit.work/<work id>``) and its id Conduit's; ``id`` is a
        hint that makes the id the same in every attempt of the Work, so emitting it again is
        answered with the Event already accepted. Raises :class:`CallRefused` naming the field
        when the Event is past acceptance's limits (nothing is cut)."""
        return self._call({"op": "emit", "type": type, "data": data, "subject": subject, "event_id": id})

    def wait(
        self,
        *,
        type: str = "",
        source: str = "",
        keys: Iterable[str] = (),
        timeout: float | None = None,
        name: str = "",
        scope: str = "",
    ) -> dict | None:
        """Park until an Event of this Work matches (type/source globs, one of ``keys``);
        return it, or ``None`` when ``timeout`` seconds pass first. With ``scope`` (a scope of
        the configuration), an Event of that scope that matches wakes it too, whichever Work
        it routes to: a dependency subscription (R42)."""
        match = {k: v for k, v in (("type", type), ("source", source)) if v}
        if keys:
            match["keys"] = list(keys)
        message = {"op": "wait", "match": match, "timeout": timeout, "name": name}
        if scope:
            message["scope"] = scope
        return self._call(message)

    def create_child(self, binding: str, keys: Iterable[str] = (), data: Any = None) -> int:
        """Create a child Work of this Work in its scope; returns the child's id. Raises
        :class:`CallRefused`, creating nothing, when the scope has no binding ``binding``."""
        return self._call({"op": "child", "binding": binding, "keys": list(keys), "data": data})

    def successor(self, binding: str, keys: Iterable[str], data: Any = None, *, scope: str = "") -> None:
        """Ask for a successor Work, created once this Work completes, with new keys. Raises
        :class:`CallRefused` when ``scope`` (this Work's by default) has no binding ``binding``."""
        self._call({"op": "successor", "binding": binding, "keys": list(keys), "data": data, "scope": scope})

    def schedule(self, after: float, type: str, data: Any = None) -> int:
        """A timer owned by this Work that fires ``type`` after ``after`` seconds; its id."""
        return self._call({"op": "schedule", "after": after, "type": type, "data": data})

    def complete(self, result: Any = None) -> None:
        """End the attempt now with ``result`` (the Work completes as on a return)."""
        raise RunComplete(result)

    def _interrupt(self, reason: str) -> None:
        """An interrupt arrived: set ``interrupted`` and wake a ``receive`` blocked meanwhile."""
        self.interrupt_reason = reason
        self.interrupted.set()
        self._inbox.put(_INTERRUPTED)

    def _call(self, message: dict) -> Any:
        if self._channel is None:
            raise CallRefused("this run is not connected to a work loop")
        return self._channel.call(self._signed(message))

    def _signed(self, message: dict) -> dict:
        """``message`` as a line of this attempt: its id and its secret."""
        return {**message, "attempt": self.attempt_id, "token": self._token}


# Kept for targets written against the first version of the API.
PythonRun = Run


class _Channel:
    """The process's side of the protocol: sends calls, matches replies, fans input out."""

    def __init__(self, out: io.BufferedWriter) -> None:
        self._out = out
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._replies: dict[int, queue.SimpleQueue] = {}

    def send(self, message: dict) -> None:
        line = (json.dumps(message, default=str) + "\n").encode("utf-8")
        with self._lock:
            self._out.write(line)
            self._out.flush()

    def call(self, message: dict) -> Any:
        call_id = next(self._ids)
        box: queue.SimpleQueue = queue.SimpleQueue()
        self._replies[call_id] = box
        self.send({**message, "id": call_id})
        reply = box.get()
        self._replies.pop(call_id, None)
        if not reply.get("ok"):
            raise CallRefused(reply.get("error") or "refused")
        return reply.get("value")

    def deliver(self, reply: dict) -> None:
        box = self._replies.get(reply.get("id"))
        if box is not None:
            box.put(reply)


class _Output(io.TextIOBase):
    """``sys.stdout``/``sys.stderr`` of a target: text goes to the loop, in order with calls,
    as output of the attempt whose target runs (``running[0]``; none between attempts)."""

    def __init__(self, channel: _Channel, stream: str, running: list[Run | None]) -> None:
        self._channel = channel
        self._stream = stream
        self._running = running

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        run = self._running[0]
        if run is None:
            return len(text)  # no attempt to write it for: the loop would refuse it
        # In pieces: each is a line the loop reads whole, however much one write holds.
        for start in range(0, len(text), OUTPUT_PIECE):
            piece = {"op": "output", "stream": self._stream, "text": text[start : start + OUTPUT_PIECE]}
            self._channel.send(run._signed(piece))
        return len(text)


def serve_attempts(*, once: bool = False) -> int:
    """Run Python targets, one attempt at a time, as the loop starts them (``once``: the first
    one only, then return: a process of one attempt)."""
    call_fd = int(os.environ[CALL_FD_ENV])
    channel = _Channel(os.fdopen(call_fd, "wb", buffering=0))
    stdin = sys.stdin.buffer
    # The attempt whose target runs now (set by this thread only); ``current`` is the last one
    # started, which input and interrupts are for.
    running: list[Run | None] = [None]
    sys.stdout = _Output(channel, "stdout", running)
    sys.stderr = _Output(channel, "stderr", running)
    starts: queue.SimpleQueue = queue.SimpleQueue()
    current: list[Run | None] = [None]
    # The worker's environment as the loop built it (the allow-list and the binding's env):
    # each attempt starts from it, with its own Work and attempt ids.
    environment = dict(os.environ)

    def read() -> None:
        for raw in stdin:
            try:
                message = json.loads(raw)
            except ValueError:
                continue
            kind = message.get("kind")
            run = current[0]
            if kind == "run":
                # Built here, before the next line is read: input that follows it is its own.
                run = Run(
                    work_id=message["work_id"],
                    attempt_id=message["attempt_id"],
                    settings=message.get("settings") or {},
                    inputs=message.get("inputs") or (),
                    channel=channel,
                    traceparent=str(message.get("traceparent") or ""),
                    idempotency_key=str(message.get("idempotency_key") or ""),
                    token=str(message.get("token") or ""),
                )
                current[0] = run
                starts.put((message["target"], run))
            elif kind == "input" and run is not None:
                run._inbox.put(message.get("event"))
            elif kind == "interrupt" and run is not None:
                run._interrupt(str(message.get("reason") or ""))
            elif kind == "reply":
                channel.deliver(message)
        # The loop went away (standard input closed): stop what runs and leave.
        if current[0] is not None:
            current[0]._interrupt("the work loop went away")
        starts.put(None)

    threading.Thread(target=read, name="conduit-stdin", daemon=True).start()
    while True:
        start = starts.get()
        if start is None:
            return 0
        reference, run = start
        os.environ.clear()
        os.environ.update(environment)
        os.environ[WORK_ID_ENV] = str(run.work_id)
        os.environ[ATTEMPT_ID_ENV] = str(run.attempt_id)
        if run.traceparent:
            os.environ[TRACEPARENT_ENV] = run.traceparent
        if run.idempotency_key:
            os.environ[IDEMPOTENCY_KEY_ENV] = run.idempotency_key
        running[0] = run
        try:
            target = _import(reference)
            result = target(run)
        except RunComplete as done:
            outcome = {"op": "result", "ok": True, "value": done.result}
        except Exception as exc:  # noqa: BLE001 - the attempt's boundary: the attempt fails
            outcome = {
                "op": "result",
                "ok": False,
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc()[-8000:],
                "error_types": [cls.__name__ for cls in type(exc).__mro__ if cls is not object],
                "non_retryable": isinstance(exc, NonRetryable),
                "retry_after": exc.seconds if isinstance(exc, RetryAfter) else None,
            }
        else:
            outcome = {"op": "result", "ok": True, "value": result}
        running[0] = None
        if current[0] is run:
            current[0] = None
        try:
            json.dumps(outcome.get("value"))
        except (TypeError, ValueError):
            outcome["value"] = repr(outcome.get("value"))
        channel.send(run._signed(outcome))
        if once:
            return 0


def _import(reference: str) -> Any:
    module, _, attr = reference.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


if __name__ == "__main__":
    # Run as worklife.child, not __main__: a target that imports worklife.child then catches
    # the very CallRefused its calls raise.
    from worklife.child import serve_attempts as worker

    # One attempt, then out: threads the target left end with the process.
    os._exit(worker(once=True))
