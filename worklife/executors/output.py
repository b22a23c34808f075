"""A child's output read with bounds: each stream's tail, lines cut and marked past their
limit, call lines recognised and bounded."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

from django.conf import settings as django_settings

from worklife.child import CALL_PREFIX

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


class Tail:
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


def start_reader(name: str, stream: Any, sink: Callable[[bytes], None], **limits: Any) -> threading.Thread:
    thread = threading.Thread(target=_lines, args=(stream, sink), kwargs=limits, name=name, daemon=True)
    thread.start()
    return thread


def is_call_line(line: bytes) -> bool:
    return line.startswith(CALL_PREFIX.encode())


def any_line(line: bytes) -> bool:
    return True
