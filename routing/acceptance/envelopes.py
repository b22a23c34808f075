"""Envelope parsing and validation for Events offered by callers (HTTP, CLI, core code).

Pure functions: no HTTP, no database. They turn decoded JSON into a validated
:class:`causal.services.Envelope` or raise :class:`EnvelopeInvalid` naming the field.
Checks that need the database (the scope must be in the live configuration) and the
acceptance itself live in ``routing.acceptance.services`` (``event_accept``).

The envelope is a structured-mode CloudEvent 1.0 (``specversion``, ``id``, ``source``,
``type``, ``subject``, ``time``, ``datacontenttype``, ``dataschema``, ``data``) with the
router's fields beside it:

- ``scope``: the scope path the Event belongs to; without it the Event takes the default scope
  its caller gives (an API token's, a receiver's, else the configuration's ``default_scope``),
  and without any default it is refused, saying how to set one;
- ``correlation``: a list of correlation keys (strings), the Event's explicit targets;
- ``work_id`` / ``execution_id``: integers naming an explicit Work / Execution.

Binary data comes as ``data_base64`` (base64 text, never beside ``data``): it is kept as
canonical base64 text with ``binary_data`` set, and given back as ``data_base64``.

Every other attribute is a CloudEvents extension attribute: its name must be lowercase
``a-z0-9`` and its value a string, integer or boolean; it is kept in ``extensions``
(``dataschema`` is kept there too: the ledger has no column for it). A ``null`` optional
attribute counts as absent, as the CloudEvents JSON format says.

External callers may not use the reserved ``core`` families: a type ``core`` or ``core.*``
and a source ``core`` or ``core.*`` (``core.manual`` is the operator's source) are refused
unless ``trusted=True`` (core code accepting its own control Events). Nor may they forge the
identities the system writes for itself, which would block or impersonate them (a reroute
copy is the original's source with id ``reroute/<id>``): ids starting with ``reroute/``,
``timer/``, ``wait-woken/``, ``work-created/`` or ``emit/``, and sources starting with
``conduit.work/`` (what a Work emits) are refused too.

Every JSON document read here (a request body, a CLI file, a trace) is parsed by
:func:`loads`: it refuses a document nested deeper than ``CONDUIT_MAX_JSON_DEPTH`` arrays and
objects (64) before decoding it, without recursion, so no depth can exhaust the stack; and
it refuses an object with the same key twice (which value was meant is unknowable).
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

from causal.limits import is_reserved
from causal.models import DEFAULT_DATACONTENTTYPE
from causal.services import Envelope

SPECVERSION = "1.0"

# Column sizes of causal.models.Event / EventKey: checked here so that both backends refuse
# the same input with the same message (SQLite would store an over-long string silently).
MAX_ID = 512
MAX_SOURCE = 512
MAX_TYPE = 255
MAX_SUBJECT = 512
MAX_SCOPE = 255
MAX_DATACONTENTTYPE = 255
MAX_KEY = 512
MAX_CORRELATION_KEYS = 64
MAX_EXTENSION_NAME = 20
BIGINT_MAX = 2**63 - 1

CLOUDEVENTS_ATTRIBUTES = frozenset(
    {
        "specversion",
        "id",
        "source",
        "type",
        "subject",
        "time",
        "datacontenttype",
        "dataschema",
        "data",
        "data_base64",
    }
)
ROUTER_FIELDS = frozenset({"scope", "correlation", "work_id", "execution_id"})
EXTENSION_NAME = re.compile(r"^[a-z0-9]+$")
# RFC 3339 date-time (section 5.6): a full date, "T" (or a space, section 5.6's note), a full
# time with optional fraction, and a mandatory offset.
RFC3339 = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
# Ids and sources the system writes for itself (reroute copies: routing.controls.events; timers:
# worklife.timers; wait bridges: worklife.waits; emits: worklife.emit; successors:
# worklife.lifecycle). Untrusted callers may not use them.
RESERVED_ID_PREFIXES = ("reroute/", "timer/", "wait-woken/", "work-created/", "emit/")
RESERVED_SOURCE_PREFIXES = ("conduit.work/",)
# What an Event without a scope and without a default is told (item 4 of issue 37).
NO_SCOPE = (
    "scope is required: send the scope path this Event belongs to (the 'scope' attribute, or the "
    "ce-scope header in binary mode), or set a default scope: the API token's (manage.py api_token "
    "create USER --default-scope PATH) or the configuration's (default_scope: PATH at the top of "
    "the document)"
)


class EnvelopeInvalid(ValueError):
    """An offered Event is refused; ``field`` names the attribute at fault.

    ``field`` is ``None`` when the whole document is at fault (invalid JSON, not an object,
    too large). ``index`` is the Event's 0-based position when it came in a batch.
    """

    code = "invalid_event"

    def __init__(self, field: str | None, message: str, *, index: int | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.message = message
        self.index = index

    def at(self, index: int) -> EnvelopeInvalid:
        """The same error, placed at ``index`` in a batch."""
        return type(self)(self.field, self.message, index=index)

    def details(self) -> dict[str, Any]:
        """The error as a JSON-ready dict (``error``, ``field``, ``message``, ``index``)."""
        payload: dict[str, Any] = {"error": self.code, "field": self.field, "message": self.message}
        if self.index is not None:
            payload["index"] = self.index
        return payload

    def __str__(self) -> str:
        where = f"[{self.index}]" if self.index is not None else ""
        if self.field:
            where = f"{where}.{self.field}" if where else self.field
        return f"{where}: {self.message}" if where else self.message


class EventTooLarge(EnvelopeInvalid):
    """An offered Event (or request body) is larger than ``CONDUIT_MAX_EVENT_BYTES``."""

    code = "event_too_large"


class EventConflict(EnvelopeInvalid):
    """An Event with the ``(source, id)`` of an accepted one but another body (409): the
    sender learns its second Event was not stored. ``digests`` are both bodies' digests."""

    code = "conflicting_duplicate"

    def __init__(
        self, message: str, *, seq: int, accepted: str, offered: str, index: int | None = None
    ) -> None:
        super().__init__("id", message, index=index)
        self.seq = seq
        self.digests = {"accepted": accepted, "offered": offered}

    def at(self, index: int) -> EventConflict:
        return type(self)(self.message, seq=self.seq, index=index, **self.digests)

    def details(self) -> dict[str, Any]:
        return {**super().details(), "seq": self.seq, "digests": dict(self.digests)}


class BatchInvalid(EnvelopeInvalid):
    """Several Events of a batch are refused; the first error is the headline and
    ``errors`` lists them all (each with its ``index``)."""

    def __init__(self, errors: list[EnvelopeInvalid]) -> None:
        if not errors:
            raise ValueError("BatchInvalid needs at least one error")
        first = errors[0]
        super().__init__(first.field, first.message, index=first.index)
        self.code = first.code
        self.errors = tuple(errors)

    def details(self) -> dict[str, Any]:
        payload = super().details()
        payload["errors"] = [error.details() for error in self.errors]
        return payload


class BatchConflict(BatchInvalid):
    """A batch holding Events that conflict with accepted ones (409), each an
    :class:`EventConflict` with its ``index``; nothing of the batch is stored."""


@dataclass(frozen=True, slots=True)
class Document:
    """One Event read from an input document, with where it was found (for messages)."""

    obj: Any
    label: str


def encoded_size(obj: Any) -> int:
    """The size in bytes of ``obj`` encoded as compact UTF-8 JSON."""
    return len(json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8"))


def check_size(size: int, limit: int, *, what: str = "the Event") -> None:
    """Refuse a document of ``size`` bytes over ``limit`` (``CONDUIT_MAX_EVENT_BYTES``)."""
    if size > limit:
        raise EventTooLarge(
            None, f"{what} is {size} bytes; the limit is {limit} bytes (CONDUIT_MAX_EVENT_BYTES)"
        )


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


class DuplicateKey(ValueError):
    """A JSON object holds the same key twice."""


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _value in pairs:
            if key in seen:
                raise DuplicateKey(f"an object has the key {key!r} twice")
            seen.add(key)
    return obj


# Strings (whose brackets do not nest), and what is left that is not a bracket, for the depth scan.
# (The loop unrolled: runs of plain characters are matched at once, twice as fast on webhooks' text.)
_STRINGS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*+"')
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_NESTING = {"[": 1, "{": 1, "]": -1, "}": -1}


def max_json_depth() -> int:
    """How deeply a JSON document may nest arrays and objects (``CONDUIT_MAX_JSON_DEPTH``)."""
    return settings.CONDUIT_MAX_JSON_DEPTH


def _too_deep(limit: int) -> EnvelopeInvalid:
    return EnvelopeInvalid(
        None, f"the JSON nests arrays and objects more than {limit} levels deep (CONDUIT_MAX_JSON_DEPTH)"
    )


def check_text_depth(text: str, limit: int | None = None) -> None:
    """Refuse JSON text nested deeper than ``limit`` arrays and objects, by scanning it
    (no parsing, no recursion): the parser never sees a document that could exhaust the stack.

    The strings are taken out, then everything that is not a bracket, and the running depth
    of the brackets left is summed up: each step runs in C. On a batch of 100 webhook-sized
    Events this costs about 4 µs an Event; a scan token by token in Python cost about 12."""
    limit = max_json_depth() if limit is None else limit
    if text.count("[") + text.count("{") <= limit:
        return
    brackets = _NOT_BRACKETS.sub("", _STRINGS.sub("", text))
    if max(itertools.accumulate(map(_NESTING.__getitem__, brackets)), default=0) > limit:
        raise _too_deep(limit)


def check_value_depth(value: Any, limit: int | None = None, *, where: str | None = None) -> None:
    """Refuse a decoded JSON value nested deeper than ``limit`` arrays and objects (iteratively)."""
    limit = max_json_depth() if limit is None else limit
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > limit:
            error = _too_deep(limit)
            error.field = where
            raise error
        stack.extend((child, depth + 1) for child in children)


def loads(text: str) -> Any:
    """Decode one JSON document: at most ``CONDUIT_MAX_JSON_DEPTH`` deep, no NaN or Infinity,
    no object with a key twice. Raises :class:`json.JSONDecodeError` for malformed JSON,
    :class:`ValueError` (a :class:`DuplicateKey`, a constant) and :class:`EnvelopeInvalid`
    (too deep)."""
    check_text_depth(text)
    try:
        return json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=_unique_pairs)
    except RecursionError:
        # The scan bounds the depth; this only guards a limit set above what the stack takes.
        raise _too_deep(max_json_depth()) from None


def parse_json(raw: bytes | str) -> Any:
    """Decode one JSON document, refusing invalid UTF-8, NaN and Infinity.

    Raises :class:`EnvelopeInvalid` (``field`` ``None``) with the line and column at fault.
    """
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise EnvelopeInvalid(None, f"the body is not UTF-8 text (byte {exc.start})") from exc
    try:
        return loads(raw)
    except EnvelopeInvalid:
        raise
    except json.JSONDecodeError as exc:
        raise EnvelopeInvalid(
            None, f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from exc
    except ValueError as exc:
        raise EnvelopeInvalid(None, f"invalid JSON: {exc}") from exc


def read_documents(raw: bytes | str) -> tuple[list[Document], bool]:
    """Split an input document into Events: one JSON object, a JSON array, or JSON lines.

    Returns the Events with where each was found, and whether the input was a batch (an
    array or several lines). Raises :class:`EnvelopeInvalid` when the input is not JSON,
    is empty, or holds something other than objects at the top level.
    """
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise EnvelopeInvalid(None, f"the input is not UTF-8 text (byte {exc.start})") from exc
    else:
        text = raw
    if not text.strip():
        raise EnvelopeInvalid(None, "the input holds no Event")
    check_text_depth(text)
    try:
        whole = json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=_unique_pairs)
    except RecursionError:
        raise _too_deep(max_json_depth()) from None
    except json.JSONDecodeError as exc:
        if exc.msg != "Extra data":
            raise EnvelopeInvalid(
                None, f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
            ) from exc
        # A first value parsed and more followed: JSON lines, one Event per line.
        return _read_lines(text), True
    except ValueError as exc:
        raise EnvelopeInvalid(None, f"invalid JSON: {exc}") from exc
    if isinstance(whole, list):
        if not whole:
            raise EnvelopeInvalid(None, "the input is an empty array: it holds no Event")
        return [Document(obj, f"[{i}]") for i, obj in enumerate(whole)], True
    return [Document(whole, "input")], False


def _read_lines(text: str) -> list[Document]:
    documents = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = loads(line)
        except EnvelopeInvalid as exc:
            raise EnvelopeInvalid(None, f"line {number}: {exc.message}", index=len(documents)) from exc
        except json.JSONDecodeError as exc:
            raise EnvelopeInvalid(
                None, f"line {number}: invalid JSON: {exc.msg} at column {exc.colno}", index=len(documents)
            ) from exc
        except ValueError as exc:
            raise EnvelopeInvalid(None, f"line {number}: invalid JSON: {exc}", index=len(documents)) from exc
        documents.append(Document(obj, f"line {number}"))
    return documents


def parse_envelope(
    obj: Any, *, trusted: bool = False, depth_checked: bool = False, default_scope: str | None = None
) -> Envelope:
    """Validate one decoded structured-mode CloudEvent and return its :class:`Envelope`.

    ``default_scope`` is the scope an Event without ``scope`` takes (checked as a sent one is);
    without either it is refused with :data:`NO_SCOPE`. ``trusted`` is for core code only: it
    allows the reserved ``core`` type and source families. ``depth_checked`` says ``obj`` was decoded from JSON text that
    :func:`check_text_depth` passed (:func:`loads`, :func:`parse_json`,
    :func:`read_documents`): a value is never nested deeper than its text, nor an element
    deeper than its array, so its own depth is not walked again. Raises
    :class:`EnvelopeInvalid` naming the first field at fault.
    """
    if not isinstance(obj, dict):
        raise EnvelopeInvalid(None, f"an Event must be a JSON object, not {kind_of(obj)}")
    # Only data nests; checked first, as every later check walks it.
    if not depth_checked:
        check_value_depth(obj, where="data")
    # The CloudEvents JSON format: a null attribute is an absent one.
    attrs = {name: value for name, value in obj.items() if value is not None or name == "data"}

    specversion = _required_string(attrs, "specversion", 16)
    if specversion != SPECVERSION:
        raise EnvelopeInvalid(
            "specversion", f"unsupported specversion {specversion!r}: only '1.0' is accepted"
        )
    event_id = _required_string(attrs, "id", MAX_ID)
    source = _required_string(attrs, "source", MAX_SOURCE)
    event_type = _required_string(attrs, "type", MAX_TYPE)
    if not trusted and is_reserved(event_type):
        raise EnvelopeInvalid("type", f"type {event_type!r} is reserved for core Events (core.*)")
    if not trusted and is_reserved(source):
        raise EnvelopeInvalid("source", f"source {source!r} is reserved for core Events (core.*)")
    if not trusted and event_id.startswith(RESERVED_ID_PREFIXES):
        prefix = next(p for p in RESERVED_ID_PREFIXES if event_id.startswith(p))
        raise EnvelopeInvalid(
            "id", f"ids starting with {prefix!r} are reserved for the Events Conduit writes itself"
        )
    if not trusted and source.startswith(RESERVED_SOURCE_PREFIXES):
        prefix = next(p for p in RESERVED_SOURCE_PREFIXES if source.startswith(p))
        raise EnvelopeInvalid(
            "source", f"sources starting with {prefix!r} are reserved for the Events Work emits"
        )
    subject = _optional_string(attrs, "subject", MAX_SUBJECT, allow_empty=True)
    event_time = _optional_time(attrs, "time")
    datacontenttype = (
        _optional_string(attrs, "datacontenttype", MAX_DATACONTENTTYPE) or DEFAULT_DATACONTENTTYPE
    )
    binary_data = "data_base64" in attrs
    if binary_data:
        if attrs.get("data") is not None:
            raise EnvelopeInvalid(
                "data_base64", "an Event has data or data_base64, not both (CloudEvents JSON format)"
            )
        data = _base64(attrs["data_base64"])
    else:
        data = attrs.get("data")
        _check_json_value(data, "data")

    if "scope" not in attrs:
        if default_scope is None:
            raise EnvelopeInvalid("scope", NO_SCOPE)
        attrs["scope"] = default_scope
    scope = _required_string(attrs, "scope", MAX_SCOPE)
    correlation = _correlation(attrs)
    work_id = _optional_id(attrs, "work_id")
    execution_id = _optional_id(attrs, "execution_id")

    extensions: dict[str, Any] = {}
    if "dataschema" in attrs:
        extensions["dataschema"] = _optional_string(attrs, "dataschema", 2048)
    for name, value in attrs.items():
        if name in CLOUDEVENTS_ATTRIBUTES or name in ROUTER_FIELDS:
            continue
        extensions[name] = _extension(name, value)

    return Envelope(
        id=event_id,
        source=source,
        type=event_type,
        scope=scope,
        subject=subject or "",
        time=event_time,
        specversion=specversion,
        datacontenttype=datacontenttype,
        data=data,
        binary_data=binary_data,
        extensions=extensions,
        correlation=correlation,
        work_id=work_id,
        execution_id=execution_id,
    )


def parse_envelopes(
    objs: list[Any], *, trusted: bool = False, depth_checked: bool = False, default_scope: str | None = None
) -> list[Envelope]:
    """Validate every Event of a batch; raise :class:`BatchInvalid` listing all refusals.
    ``depth_checked`` and ``default_scope`` as for :func:`parse_envelope`."""
    envelopes: list[Envelope] = []
    errors: list[EnvelopeInvalid] = []
    for index, obj in enumerate(objs):
        try:
            envelopes.append(
                parse_envelope(obj, trusted=trusted, depth_checked=depth_checked, default_scope=default_scope)
            )
        except EnvelopeInvalid as exc:
            errors.append(exc.at(index))
    if errors:
        raise BatchInvalid(errors)
    return envelopes


# --- field checks ---------------------------------------------------------------------------


def kind_of(value: Any, *, sequence: str = "an array", mapping: str = "an object") -> str:
    """What kind of JSON-like value ``value`` is, for an error message ("a string", "null"…);
    lists and mappings are named as the document's language names them (JSON by default)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return sequence
    if isinstance(value, dict):
        return mapping
    return type(value).__name__


def _check_text(value: str, field: str) -> None:
    """Refuse strings no backend can store the same way (NUL, lone surrogates)."""
    if "\x00" in value:
        raise EnvelopeInvalid(field, "NUL characters (\\u0000) are not allowed")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise EnvelopeInvalid(field, f"invalid Unicode (a lone surrogate at character {exc.start})") from exc


def _required_string(attrs: dict[str, Any], name: str, max_length: int) -> str:
    if name not in attrs:
        raise EnvelopeInvalid(name, f"{name} is required")
    value = _optional_string(attrs, name, max_length)
    if not value:
        raise EnvelopeInvalid(name, f"{name} must be a non-empty string")
    return value


def _optional_string(
    attrs: dict[str, Any], name: str, max_length: int, *, allow_empty: bool = False
) -> str | None:
    if name not in attrs:
        return None
    value = attrs[name]
    if not isinstance(value, str):
        raise EnvelopeInvalid(name, f"{name} must be a string, not {kind_of(value)}")
    if not value and not allow_empty:
        raise EnvelopeInvalid(name, f"{name} must be a non-empty string")
    if len(value) > max_length:
        raise EnvelopeInvalid(name, f"{name} is {len(value)} characters long; the limit is {max_length}")
    _check_text(value, name)
    return value


def _base64(value: Any) -> str:
    """Binary data sent as base64 text (RFC 4648, padded), as canonical base64 text: the same
    bytes are the same Event however they were written."""
    if not isinstance(value, str):
        raise EnvelopeInvalid("data_base64", f"data_base64 must be a base64 string, not {kind_of(value)}")
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise EnvelopeInvalid(
            "data_base64", f"data_base64 is not base64 text (RFC 4648: A-Z a-z 0-9 + / and = padding): {exc}"
        ) from None
    return base64.b64encode(raw).decode("ascii")


def _optional_time(attrs: dict[str, Any], name: str) -> datetime | None:
    if name not in attrs:
        return None
    value = attrs[name]
    if not isinstance(value, str):
        raise EnvelopeInvalid(name, f"{name} must be an RFC 3339 timestamp string, not {kind_of(value)}")
    if not RFC3339.match(value):
        raise EnvelopeInvalid(
            name, f"{name} {value!r} is not an RFC 3339 timestamp (like 2026-01-05T12:00:00Z, with an offset)"
        )
    try:
        parsed = datetime.fromisoformat(value.upper().replace(" ", "T"))
    except ValueError as exc:
        raise EnvelopeInvalid(name, f"{name} {value!r} is not a valid date and time: {exc}") from exc
    return parsed.astimezone(UTC)


def _optional_id(attrs: dict[str, Any], name: str) -> int | None:
    if name not in attrs:
        return None
    value = attrs[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise EnvelopeInvalid(name, f"{name} must be an integer, not {kind_of(value)}")
    if not 1 <= value <= BIGINT_MAX:
        raise EnvelopeInvalid(name, f"{name} must be a positive integer below 2^63")
    return value


def _correlation(attrs: dict[str, Any]) -> tuple[str, ...]:
    if "correlation" not in attrs:
        return ()
    value = attrs["correlation"]
    if not isinstance(value, list):
        raise EnvelopeInvalid("correlation", f"correlation must be a list of strings, not {kind_of(value)}")
    if len(value) > MAX_CORRELATION_KEYS:
        raise EnvelopeInvalid(
            "correlation", f"correlation has {len(value)} keys; the limit is {MAX_CORRELATION_KEYS}"
        )
    keys: list[str] = []
    for i, key in enumerate(value):
        field = f"correlation[{i}]"
        if not isinstance(key, str):
            raise EnvelopeInvalid(field, f"a correlation key must be a string, not {kind_of(key)}")
        if not key:
            raise EnvelopeInvalid(field, "a correlation key must be a non-empty string")
        if len(key) > MAX_KEY:
            raise EnvelopeInvalid(field, f"the key is {len(key)} characters long; the limit is {MAX_KEY}")
        _check_text(key, field)
        keys.append(key)
    # The same key twice names one target: keep the first, in order.
    return tuple(dict.fromkeys(keys))


def _extension(name: str, value: Any) -> Any:
    if not EXTENSION_NAME.match(name) or len(name) > MAX_EXTENSION_NAME:
        raise EnvelopeInvalid(
            name,
            f"unknown attribute {name!r}: CloudEvents extension attribute names are 1 to "
            f"{MAX_EXTENSION_NAME} lowercase letters a-z and digits 0-9",
        )
    if isinstance(value, str):
        _check_text(value, name)
        return value
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if not -(2**31) <= value < 2**31:
            raise EnvelopeInvalid(
                name, "an integer extension attribute must fit in 32 bits (CloudEvents Integer)"
            )
        return value
    raise EnvelopeInvalid(
        name, f"extension attribute {name} must be a string, an integer or a boolean, not {kind_of(value)}"
    )


def _check_json_value(value: Any, path: str) -> None:
    """Refuse data no backend stores faithfully: non-finite numbers, NUL, lone surrogates."""
    stack = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            _check_text(item, where)
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise EnvelopeInvalid(where, "numbers must be finite")
        elif isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    raise EnvelopeInvalid(where, "object keys must be strings")
                _check_text(key, f"{where}.{key}")
                stack.append((child, f"{where}.{key}"))
        elif isinstance(item, list):
            stack.extend((child, f"{where}[{i}]") for i, child in enumerate(item))
        elif item is not None and not isinstance(item, bool | int):
            raise EnvelopeInvalid(where, f"{type(item).__name__} is not a JSON value")
