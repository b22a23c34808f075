"""Structured log lines: the message, then every ``extra`` field as ``key=value``.

Services log events as a fixed message with fields (``logger.warning("route.gave_up",
extra={"event": 12, "code": "handler_timeout"})``); this formatter prints them on one line,
values JSON-encoded, so a log search finds ``route.refusals`` or ``code=handler_timeout``.
"""

from __future__ import annotations

import json
import logging

_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
}


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}
        if not fields:
            return line
        rendered = " ".join(
            f"{key}={json.dumps(value, default=str, ensure_ascii=False)}" for key, value in fields.items()
        )
        head, sep, tail = line.partition("\n")
        return f"{head} {rendered}{sep}{tail}"
