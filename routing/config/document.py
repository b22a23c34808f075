"""The parsed document: scopes, bindings and routes as declared (validated)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from routing.config.receivers import ReceiverSpec


@dataclass(frozen=True, slots=True)
class ParsedBinding:
    """A binding as declared (plain JSON values, ready to store)."""

    name: str
    executor: str
    settings: dict[str, Any]
    controls: tuple[str, ...]
    capabilities: frozenset[str]
    place: str = ""
    # Flow control as declared (concurrency, throttle, priority, debounce, batch: worklife.flow).
    flow: dict[str, Any] = field(default_factory=dict)
    # The binding's retry policy as declared (``worklife.retry``), ``None``: the defaults.
    retry: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ParsedRoute:
    """A route as declared (plain JSON values, ready to store)."""

    slot: str
    handler: str
    params: dict[str, Any]
    binding: str
    policy: str
    fallback: str
    start: bool
    place: str = ""
    # Raises the priority of the Work an Event arrives at through this route (worklife.flow).
    priority: int = 0
    # At most so many Events taken per period (per key), the others dropped, as declared
    # (``{limit, period, key}``; ``routing.engine.ratelimit``), ``None``: no rate limit.
    rate_limit: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ParsedScope:
    """A scope as declared: its own bindings and routes, in document order."""

    path: str
    bindings: tuple[ParsedBinding, ...]
    routes: tuple[ParsedRoute, ...]
    place: str = ""
    # The scope's schedules as declared (``routing.schedules``): plain JSON, each with a name.
    schedules: tuple[dict[str, Any], ...] = ()

    @property
    def parent_path(self) -> str | None:
        head, sep, _ = self.path.rpartition("/")
        return head if sep else None


@dataclass(frozen=True, slots=True)
class ParsedDocument:
    """A valid document: what :func:`parse_document` returns and the services store."""

    version: int
    scopes: tuple[ParsedScope, ...]
    text: str = ""
    # The scope an Event offered without one takes, when its sender names none ("": none).
    default_scope: str = ""
    receivers: tuple[ReceiverSpec, ...] = ()

    @property
    def digest(self) -> str:
        """SHA-256 of the document text, hex."""
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()
