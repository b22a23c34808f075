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
``conduit.work/`` (what a Work emits) are refused too, in any case. The rule and the field
limits are :mod:`causal.checks`', shared with the Events Work derives (emit, timers).

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
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

# The field and size limits and the reserved identities are causal's (every path that accepts
# an Event checks them: acceptance here, and the Events Work derives); their names stay
# importable from this module.
from causal.checks import (  # noqa: F401 - re-exported
    BIGINT_MAX,
    MAX_CORRELATION_KEYS,
    MAX_DATACONTENTTYPE,
    MAX_EXTENSION_NAME,
    MAX_ID,
    MAX_KEY,
    MAX_SCOPE,
    MAX_SOURCE,
    MAX_SUBJECT,
    MAX_TYPE,
    RESERVED_ID_PREFIXES,
    RESERVED_SOURCE_PREFIXES,
    EnvelopeInvalid,
    EventTooLarge,
    check_size,
    check_string,
    check_value_depth,
    encoded_size,
    is_reserved,
    kind_of,
    max_json_depth,
    reserved_problem,
)
from causal.checks import check_json_value as _check_json_value
from causal.checks import check_text as _check_text
from causal.checks import too_deep as _too_deep
from causal.models import DEFAULT_DATACONTENTTYPE
from causal.services import Envelope

SPECVERSION = "1.0"

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
# What an Event without a scope and without a default is told.
NO_SCOPE = (
    "scope is required: send the scope path this Event belongs to (the 'scope' attribute, or the "
    "ce-scope header in binary mode), or set a default scope: the API token's (manage.py api_token "
    "create USER --default-scope PATH) or the configuration's (default_scope: PATH at the top of "
    "the document)"
)


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
    if not trusted:
        reserved = reserved_problem(type=event_type, source=source, id=event_id)
        if reserved is not None:
            raise reserved
    subject = _optional_string(attrs, "subject", MAX_SUBJECT, allow_empty=True)
    event_time = _optional_time(attrs, "time")
    given_datacontenttype = _optional_string(attrs, "datacontenttype", MAX_DATACONTENTTYPE)
    datacontenttype = given_datacontenttype or DEFAULT_DATACONTENTTYPE
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
        datacontenttype_given=bool(given_datacontenttype),
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
    return check_string(attrs[name], name, max_length, allow_empty=allow_empty)


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


def json_whole(value: Any) -> Any:
    """``value``, a whole float as the integer it is: JSON has one number type, and ``7.0`` is
    the integer 7 a JSON Schema ``integer`` takes."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _optional_id(attrs: dict[str, Any], name: str) -> int | None:
    if name not in attrs:
        return None
    value = json_whole(attrs[name])
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
    value = json_whole(value)
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
