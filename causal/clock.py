"""The trusted clock. Services take ``clock`` as an argument so tests inject a fake one."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

Clock = Callable[[], datetime]


def system_clock() -> datetime:
    """Now, as an aware UTC datetime."""
    return datetime.now(UTC)


def aware_time(value: Any) -> datetime | None:
    """``value`` as an aware datetime when it is an ISO 8601 time with an offset (as a clock's
    ``isoformat()`` writes it into JSON); ``None`` for anything else."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def minute_start(when: datetime) -> datetime:
    """The start of the fixed UTC minute holding ``when`` (an aware datetime)."""
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"expected an aware datetime, got naive {when!r}")
    return when.astimezone(UTC).replace(second=0, microsecond=0)
