"""Structured log lines: the message, then every ``extra`` field, as ``key=value`` text or as
one JSON object (``LOG_FORMAT=json``).

Services log events as a fixed message with fields (``logger.warning("route.gave_up",
extra={"event": 12, "code": "handler_timeout"})``). :class:`KeyValueFormatter` prints them on
one line, values JSON-encoded, so a log search finds ``route.refusals`` or
``code=handler_timeout``; :class:`JsonFormatter` prints the same fields (``asctime``,
``levelname``, ``name``, ``message`` and each ``extra`` field) as one JSON object a line, for
a log pipeline. :class:`RequestIdFilter` adds ``request_id`` to the lines logged while a web
request is answered (``conduit_site.requestid``), and ``trace_id``/``span_id`` to the lines
logged while an Event with a W3C ``traceparent`` is handled (:data:`trace_context`).

With ``LOG_FORMAT=json`` every line a process writes is JSON: the processes' own lines
(started, stopped, restarting) go through :func:`announce`, the web server's access log through
``conduit_site.edge``, and Django's DEBUG-only console handler is dropped (settings).
"""

from __future__ import annotations

import contextvars
import json
import logging
from typing import Any, TextIO

from pythonjsonlogger.json import JsonFormatter as _JsonFormatter

from worklife.tracing import trace_fields

_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
}

# The id of the web request this context answers (set by conduit_site.requestid).
request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")
# The W3C traceparent of the Event this context handles (set by conduit_site.requestid from the
# request's headers, and by the API once it has read a structured Event).
trace_context: contextvars.ContextVar[str] = contextvars.ContextVar("trace_context", default="")

process_logger = logging.getLogger("conduit.process")


def json_logs() -> bool:
    """Whether the settings ask for JSON log lines (``LOG_FORMAT=json``)."""
    from django.conf import settings

    return getattr(settings, "LOG_FORMAT", "text") == "json"


def announce(stream: TextIO, message: str, *, level: int = logging.INFO, **fields: Any) -> None:
    """Write one of a process's own lines (started, stopped, restarting): on ``stream`` as
    text, or, with ``LOG_FORMAT=json``, as a ``conduit.process`` record with ``fields`` so that
    the line is JSON like every other."""
    if json_logs():
        process_logger.log(level, message, extra=fields)
    else:
        stream.write(message)


def extra_fields(record: logging.LogRecord) -> dict:
    """The fields a record carries beyond the standard ones (its ``extra``)."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = extra_fields(record)
        if not fields:
            return line
        rendered = " ".join(
            f"{key}={json.dumps(value, default=str, ensure_ascii=False)}" for key, value in fields.items()
        )
        head, sep, tail = line.partition("\n")
        return f"{head} {rendered}{sep}{tail}"


class JsonFormatter(_JsonFormatter):
    """One JSON object a line: the format's fields (``asctime``, ``levelname``, ``name``,
    ``message``), every ``extra`` field, and ``exc_info`` (the traceback) when there is one.
    Times are ISO 8601; other values JSON cannot hold are written as text."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("json_ensure_ascii", False)
        super().__init__(*args, **kwargs)


class RequestIdFilter(logging.Filter):
    """Adds ``request_id`` to a record logged while a web request is answered, or about one
    (Django's ``django.request`` lines, written once the answer is made, carry the request),
    and ``trace_id``/``span_id`` while an Event with a ``traceparent`` is handled."""

    def filter(self, record: logging.LogRecord) -> bool:
        request = getattr(record, "request", None)
        if not hasattr(record, "request_id"):
            current = request_id.get() or getattr(request, "request_id", "")
            if current:
                record.request_id = current
        if not hasattr(record, "trace_id"):
            fields = trace_fields(trace_context.get() or getattr(request, "traceparent", ""))
            for key, value in fields.items():
                setattr(record, key, value)
        return True
