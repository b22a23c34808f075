"""JSON shapes of records for the API and the CLI (``--json``): one function per record.

Each returns plain JSON-ready dicts and reads only the row it is given (no query), so a
list serialises in the queries its selector made.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from causal.models import Event


def timestamp(value: datetime | None) -> str | None:
    """An aware datetime as an RFC 3339 UTC timestamp (``2026-01-05T12:00:00Z``), or ``None``."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def event_json(event: Event) -> dict[str, Any]:
    """An Event: its CloudEvents envelope, the router's fields, its ancestry and route state.

    Extension attributes stay under ``extensions`` (never merged beside the envelope, where an
    extension named like one of the router's fields would shadow it). ``parent_seq`` and
    ``root_seq`` name Events by their ``seq``; a root's ``root_seq`` is its own.
    """
    return {
        "seq": event.seq,
        "specversion": event.specversion,
        "id": event.envelope_id,
        "source": event.source,
        "type": event.type,
        "subject": event.subject,
        "time": timestamp(event.time),
        "datacontenttype": event.datacontenttype,
        "data": event.data,
        "extensions": dict(event.extensions or {}),
        "scope": event.scope,
        "correlation": list(event.correlation or []),
        "work_id": event.work_id,
        "execution_id": event.execution_id,
        "parent_seq": event.parent_id,
        "root_seq": event.root_seq,
        "depth": event.depth,
        "accepted_at": timestamp(event.accepted_at),
        "accepted_by": event.accepted_by,
        "route_state": event.route_state,
        "routed_at": timestamp(event.routed_at),
        "unrouted_reason": event.unrouted_reason,
    }


def accepted_json(event: Event, *, created: bool) -> dict[str, Any]:
    """One result of a batch acceptance: whether the Event is new, and the Event."""
    return {"created": created, "event": event_json(event)}
