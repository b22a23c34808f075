"""The checks every Event passes, whoever offers it: the field and size limits, and the
identities reserved for what Conduit writes itself.

One rule, in one place: acceptance (``routing.acceptance.envelopes``: the API, the CLI, trace,
operator input) and the Events Work derives (``worklife.emit``, ``worklife.timers``) call these
functions, so an Event an attempt emits is held to the limits a sender's Event is held to, and
the reserved identities are refused on every path. Pure functions: no database.

Reserved identities (compared case-insensitively, so ``CORE.manual`` or ``Reroute/x`` is no
way round them):

- the ``core`` family: a type or source ``core`` or ``core.*`` (core code's own Events;
  ``core.manual`` is the operator's source);
- ids starting with :data:`RESERVED_ID_PREFIXES` (a reroute copy is the original's source with
  id ``reroute/<id>``, a replay copy ``replay/<id>/<n>``; timers, wait bridges, created Work
  and emits have ids of their own);
- sources starting with :data:`RESERVED_SOURCE_PREFIXES` (``conduit.work/<id>``: what a Work
  emits as).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from django.conf import settings

if TYPE_CHECKING:
    # Only named: this module is imported where no models are (a Python worker imports the
    # executors' base, which checks the emit_sources setting with it).
    from causal.services import Envelope

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

# The family of types and sources only core code may use.
RESERVED_FAMILY = "core"
# Ids and sources the system writes for itself (reroute copies: controls.events; replay
# copies: controls.replay; timers: worklife.timers; wait bridges: worklife.waits; emits:
# worklife.emit; successors: worklife.lifecycle; schedules: routing.schedules). Nobody else may use them.
RESERVED_ID_PREFIXES = ("reroute/", "replay/", "timer/", "wait-woken/", "work-created/", "emit/", "schedule/")
RESERVED_SOURCE_PREFIXES = ("conduit.work/",)


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


# --- reserved identities --------------------------------------------------------------------


def is_reserved(name: str) -> bool:
    """True for the ``core`` family of types and sources that only core code may use
    (``core``, ``core.*``, in any case)."""
    folded = name.casefold()
    return folded == RESERVED_FAMILY or folded.startswith(RESERVED_FAMILY + ".")


def reserved_id_prefix(event_id: str) -> str | None:
    """The reserved prefix ``event_id`` starts with (in any case), or ``None``."""
    folded = event_id.casefold()
    return next((prefix for prefix in RESERVED_ID_PREFIXES if folded.startswith(prefix)), None)


def reserved_source_prefix(source: str) -> str | None:
    """The reserved prefix ``source`` starts with (in any case), or ``None``."""
    folded = source.casefold()
    return next((prefix for prefix in RESERVED_SOURCE_PREFIXES if folded.startswith(prefix)), None)


def reserved_problem(*, type: str = "", source: str = "", id: str = "") -> EnvelopeInvalid | None:
    """Why an identity is reserved, naming the field (``type``, ``source`` or ``id``), or
    ``None`` when nothing of it is. Empty arguments are not checked."""
    if type and is_reserved(type):
        return EnvelopeInvalid("type", f"type {type!r} is reserved for core Events (core.*)")
    if source and is_reserved(source):
        return EnvelopeInvalid("source", f"source {source!r} is reserved for core Events (core.*)")
    prefix = reserved_id_prefix(id) if id else None
    if prefix is not None:
        return EnvelopeInvalid(
            "id", f"ids starting with {prefix!r} are reserved for the Events Conduit writes itself"
        )
    prefix = reserved_source_prefix(source) if source else None
    if prefix is not None:
        return EnvelopeInvalid(
            "source", f"sources starting with {prefix!r} are reserved for the Events Work emits"
        )
    return None


# --- fields -----------------------------------------------------------------------------------


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


def check_text(value: str, field: str) -> None:
    """Refuse strings no backend can store the same way (NUL, lone surrogates)."""
    if "\x00" in value:
        raise EnvelopeInvalid(field, "NUL characters (\\u0000) are not allowed")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise EnvelopeInvalid(field, f"invalid Unicode (a lone surrogate at character {exc.start})") from exc


def check_string(value: Any, field: str, max_length: int, *, allow_empty: bool = False) -> str:
    """``value`` when it is a string of at most ``max_length`` characters that every backend
    stores as it is (never cut); raises :class:`EnvelopeInvalid` naming ``field``."""
    if not isinstance(value, str):
        raise EnvelopeInvalid(field, f"{field} must be a string, not {kind_of(value)}")
    if not value and not allow_empty:
        raise EnvelopeInvalid(field, f"{field} must be a non-empty string")
    if len(value) > max_length:
        raise EnvelopeInvalid(field, f"{field} is {len(value)} characters long; the limit is {max_length}")
    check_text(value, field)
    return value


def max_json_depth() -> int:
    """How deeply a JSON document may nest arrays and objects (``CONDUIT_MAX_JSON_DEPTH``)."""
    return settings.CONDUIT_MAX_JSON_DEPTH


def too_deep(limit: int) -> EnvelopeInvalid:
    """The refusal of JSON nested more than ``limit`` levels."""
    return EnvelopeInvalid(
        None, f"the JSON nests arrays and objects more than {limit} levels deep (CONDUIT_MAX_JSON_DEPTH)"
    )


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
            error = too_deep(limit)
            error.field = where
            raise error
        stack.extend((child, depth + 1) for child in children)


def check_json_value(value: Any, path: str) -> None:
    """Refuse data no backend stores faithfully: non-finite numbers, NUL, lone surrogates,
    values that are not JSON."""
    stack = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            check_text(item, where)
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise EnvelopeInvalid(where, "numbers must be finite")
        elif isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    raise EnvelopeInvalid(where, "object keys must be strings")
                check_text(key, f"{where}.{key}")
                stack.append((child, f"{where}.{key}"))
        elif isinstance(item, list):
            stack.extend((child, f"{where}[{i}]") for i, child in enumerate(item))
        elif item is not None and not isinstance(item, bool | int):
            raise EnvelopeInvalid(where, f"{type(item).__name__} is not a JSON value")


# --- size -------------------------------------------------------------------------------------


def encoded_size(obj: Any) -> int:
    """The size in bytes of ``obj`` encoded as compact UTF-8 JSON."""
    return len(json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8"))


def max_event_bytes() -> int:
    """The largest Event accepted, in bytes of compact JSON (``CONDUIT_MAX_EVENT_BYTES``)."""
    return settings.CONDUIT_MAX_EVENT_BYTES


def check_size(size: int, limit: int, *, what: str = "the Event", field: str | None = None) -> None:
    """Refuse a document of ``size`` bytes over ``limit`` (``CONDUIT_MAX_EVENT_BYTES``)."""
    if size > limit:
        raise EventTooLarge(
            field, f"{what} is {size} bytes; the limit is {limit} bytes (CONDUIT_MAX_EVENT_BYTES)"
        )


def check_event_size(payload: Any, *, field: str | None = None) -> None:
    """Refuse an Event (a structured-mode CloudEvent as JSON-like data) larger than
    ``CONDUIT_MAX_EVENT_BYTES`` as compact JSON."""
    # A decoded payload is measured as compact JSON: never more than the body it came in, so
    # an HTTP body that passed the raw size check passes this one too.
    check_size(encoded_size(payload), max_event_bytes(), field=field)


# --- a built envelope -------------------------------------------------------------------------


def envelope_payload(envelope: Envelope) -> dict[str, Any]:
    """``envelope`` as the structured-mode CloudEvent a sender would have offered (what
    acceptance measures against ``CONDUIT_MAX_EVENT_BYTES``)."""
    payload: dict[str, Any] = {
        "specversion": envelope.specversion,
        "id": envelope.id,
        "source": envelope.source,
        "type": envelope.type,
        "scope": envelope.scope,
    }
    if envelope.subject:
        payload["subject"] = envelope.subject
    if envelope.time is not None:
        payload["time"] = envelope.time.isoformat()
    payload["datacontenttype"] = envelope.datacontenttype
    payload["data_base64" if envelope.binary_data else "data"] = envelope.data
    payload.update(envelope.extensions)
    if envelope.correlation:
        payload["correlation"] = list(envelope.correlation)
    for name in ("work_id", "execution_id"):
        if getattr(envelope, name) is not None:
            payload[name] = getattr(envelope, name)
    return payload


def check_envelope(envelope: Envelope) -> Envelope:
    """Refuse an envelope built by core code from what someone else chose (an attempt's emit,
    a timer, a child's data) unless it is within acceptance's field and size limits; nothing is
    ever cut. Returns ``envelope``; raises :class:`EnvelopeInvalid` naming the field."""
    check_string(envelope.id, "id", MAX_ID)
    check_string(envelope.source, "source", MAX_SOURCE)
    check_string(envelope.type, "type", MAX_TYPE)
    check_string(envelope.scope, "scope", MAX_SCOPE)
    check_string(envelope.subject, "subject", MAX_SUBJECT, allow_empty=True)
    for index, key in enumerate(envelope.correlation):
        check_string(key, f"correlation[{index}]", MAX_KEY)
    payload = envelope_payload(envelope)
    # Measured as acceptance measures an offered Event: the Event is the first level.
    check_value_depth(payload, where="data")
    check_json_value(envelope.data, "data")
    check_event_size(payload, field="data")
    return envelope
