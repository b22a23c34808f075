"""Values and field paths of the built-in ``match`` handler: how a condition reads a field of
an Event, compares JSON values and shows them in a reason; its samples use the same."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import re2

from infra.frozen import frozen
from routing.extension import EventSnapshot

FIELD_ROOTS: tuple[str, ...] = ("type", "source", "subject", "scope", "id", "data")
_SHOW_LIMIT = 80

MISSING: Any = object()
_SEGMENT = re.compile(r"^[^.\s{}\[\]]+$")


def _re2_options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is reported to its author, not to stderr
    return options


RE2_OPTIONS = _re2_options()


# --- values -------------------------------------------------------------------------------


def show(value: Any) -> str:
    """A short, readable rendering of a JSON-like value for a skip reason."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        text = value if len(value) <= _SHOW_LIMIT else value[: _SHOW_LIMIT - 1] + "…"
        return f"'{text}'"
    text = json.dumps(thaw(value), default=str, separators=(",", ":"))
    return text if len(text) <= _SHOW_LIMIT else text[: _SHOW_LIMIT - 1] + "…"


def bare(value: Any) -> str:
    """Like :func:`show` but strings unquoted (list items: ``[opened, synchronize]``)."""
    return value if isinstance(value, str) else show(value)


def thaw(value: Any) -> Any:
    """``value`` as plain JSON-like Python: mappings as dicts with string keys, sequences as lists."""
    if isinstance(value, Mapping):
        return {str(k): thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [thaw(v) for v in value]
    return value


def same(a: Any, b: Any) -> bool:
    """JSON equality: booleans are not numbers, lists equal tuples, mappings compare by items."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    a_seq = isinstance(a, list | tuple)
    b_seq = isinstance(b, list | tuple)
    if a_seq or b_seq:
        return a_seq and b_seq and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


# --- field paths --------------------------------------------------------------------------


@frozen
class FieldPath:
    """A compiled dotted path into an Event (``data.pull_request.number``)."""

    text: str
    root: str
    parts: tuple[str, ...]

    def get(self, event: EventSnapshot) -> Any:
        """The value at this path, or the module's missing marker."""
        value = getattr(event, self.root)
        for part in self.parts:
            # A snapshot's mappings are proxies: checked by exact type before the abstract class.
            if type(value) is MappingProxyType or isinstance(value, Mapping):
                value = value.get(part, MISSING)
                if value is MISSING:
                    return MISSING
            elif isinstance(value, list | tuple) and part.isdigit():
                index = int(part)
                if index >= len(value):
                    return MISSING
                value = value[index]
            else:
                return MISSING
        return value


def parse_field(text: Any) -> FieldPath:
    """Compile a dotted field path; raises ``ValueError`` saying what is wrong."""
    if not isinstance(text, str) or not text:
        raise ValueError(f"expected a field path like 'data.action', got {show(text)}")
    root, *parts = text.split(".")
    if root not in FIELD_ROOTS:
        raise ValueError(f"field {text!r} must start with one of: {', '.join(FIELD_ROOTS)}")
    if parts and root != "data":
        raise ValueError(f"field {text!r}: only data has nested fields")
    for part in parts:
        if not _SEGMENT.match(part):
            raise ValueError(f"field {text!r} has an empty or malformed segment")
    return FieldPath(text=text, root=root, parts=tuple(parts))
