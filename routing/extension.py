"""The route-handler API: what a handler receives and what it returns.

A handler class is named in ``CONDUIT_ROUTE_HANDLERS`` and instantiated once per
configuration generation with no arguments::

    class MyHandler:
        def match(self, event: EventSnapshot, route: RouteInfo) -> RouteDecision: ...
        # optional (RouteSampler, R45):
        def samples(self, scope: str, route: RouteInfo, clock: Clock) -> list[Sample]: ...

How a handler's outcome maps to route failures (R10):

- a :class:`RouteDecision` (``matched`` or :func:`skip`) is a decision; its ``reason`` only
  explains it and never changes it (R40);
- ``raise Invalid("…")``: the input is malformed → ``handler_invalid``, not retried;
- ``raise Unavailable("…")`` (or a subclass: the handler's declared transient errors), or a
  transient OS-level error (``OSError`` and its subclasses: ``ConnectionError``,
  ``TimeoutError``, …) → ``handler_failed``, retried with backoff;
- any other exception (a programming error) → ``handler_panic``, not retried; the record
  keeps the exception and its stack;
- no decision before the deadline (each call has its own, R12) → ``handler_timeout``, retried.

``match`` must be free of side effects: traces call it too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import field
from datetime import datetime
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from infra.frozen import frozen

Clock = Callable[[], datetime]

REFUSAL_MAX_BYTES = 500


class Invalid(Exception):
    """The handler says the input is malformed (``handler_invalid``, not retried)."""


class Unavailable(Exception):
    """A transient failure: the handler's dependency is restarting or down
    (``handler_failed``, retried with backoff). Subclass it for declared transient errors."""


_SCALARS = frozenset({str, int, float, bool, type(None)})


def freeze(value: Any) -> Any:
    """A deep, read-only copy of JSON-like data: dicts become mapping proxies, lists tuples."""
    kind = type(value)
    # Decoded JSON first, by exact type: the abstract-class checks below cost more per value;
    # a scalar member is kept where it is found, without a call of its own.
    if kind is dict:
        return MappingProxyType({k: v if type(v) in _SCALARS else freeze(v) for k, v in value.items()})
    if kind in _SCALARS:
        return value
    if kind is list:
        return tuple([v if type(v) in _SCALARS else freeze(v) for v in value])
    if isinstance(value, Mapping):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


@frozen
class EventSnapshot:
    """A detached, read-only snapshot of an Event (R5): no model instance, no connection."""

    seq: int
    id: str
    source: str
    type: str
    subject: str
    scope: str
    time: datetime | None
    data: Any
    correlation: tuple[str, ...]
    work_id: int | None
    execution_id: int | None
    causation_id: int | None
    depth: int


@frozen
class RouteInfo:
    """The effective route a handler is asked about."""

    slot: str
    scope: str
    params: Any
    binding: str
    policy: str
    fallback: str
    start: bool = True
    handler: str = ""


@frozen
class RouteDecision:
    """A handler's answer. ``keys`` are correlation keys the match attaches; ``work_id``
    optionally names an explicit target Work."""

    matched: bool
    reason: str = ""
    keys: tuple[str, ...] = ()
    work_id: int | None = None

    def __post_init__(self) -> None:
        if type(self.keys) is not tuple:
            object.__setattr__(self, "keys", tuple(self.keys))


def skip(reason: str) -> RouteDecision:
    """A non-match, with the reason operators read in refusals."""
    return RouteDecision(matched=False, reason=reason)


def one_line(reason: str, limit: int = REFUSAL_MAX_BYTES) -> str:
    """A refusal reason cut to one line of at most ``limit`` bytes of UTF-8 (R28)."""
    if (
        type(reason) is str
        and len(reason) * 4 <= limit  # at most 4 bytes a character
        and reason.isprintable()  # no line break, tab or other whitespace but the space
        and "  " not in reason
        and not reason.startswith(" ")
        and not reason.endswith(" ")
    ):
        return reason  # already one line, short enough: what the split and join would give
    line = " ".join(str(reason).split())
    encoded = line.encode("utf-8")
    if len(encoded) <= limit:
        return line
    return encoded[:limit].decode("utf-8", errors="ignore")


@frozen
class Sample:
    """A named sample Event a handler offers for traces (R45); ``note`` says what the reader
    should know first (a sample its own route would not match says so, and why)."""

    name: str
    event: dict[str, Any] = field(default_factory=dict)
    note: str = ""


@runtime_checkable
class RouteHandler(Protocol):
    def match(self, event: EventSnapshot, route: RouteInfo) -> RouteDecision: ...


@runtime_checkable
class RouteSampler(Protocol):
    def samples(self, scope: str, route: RouteInfo, clock: Clock) -> list[Sample]: ...
