"""Moments as people type them (one parser for every filter that takes a time) and as JSON writes
them (RFC 3339, in UTC)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

# A time ago: "-10m", "-2h", "-3d" (also seconds and weeks), a sign, a number and a unit.
_AGO = re.compile(r"-\s*(\d{1,6})\s*([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
TIME_FORMATS = (
    "an ISO 8601 time like 2026-01-05T12:00:00Z, a time ago like -10m, -2h or -3d, today or yesterday"
)


def parse_time(text: str, *, now: datetime | None = None) -> datetime:
    """A moment as people type it: an ISO 8601 date or time (``2026-01-05``,
    ``2026-01-05T12:00:00Z``; without an offset it is read as UTC), a time before ``now``
    (``-10m``, ``-2h``, ``-3d``; ``s`` and ``w`` too) or ``today``/``yesterday`` (their start,
    midnight UTC). ``ValueError`` naming every accepted form otherwise. The one parser of the
    CLI's ``--since``/``--until``, the API's and the console's filters."""
    word = text.strip().lower()
    now = now or datetime.now(UTC)
    ago = _AGO.fullmatch(word)
    if ago:
        try:
            return now - timedelta(**{_UNITS[ago[2]]: int(ago[1])})
        except OverflowError:  # -999999w: before the year 1
            raise ValueError(f"{text[:60]!r} is further back than times go") from None
    if word in ("today", "yesterday"):
        midnight = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        return midnight - timedelta(days=1) if word == "yesterday" else midnight
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"expected {TIME_FORMATS}, got {text[:60]!r}") from None
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    # In UTC: an offset like -19:38 is ISO 8601's, not every database's (PostgreSQL's stop at 15:59).
    try:
        return value.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00:00+01:00: before the year 1 in UTC
        raise ValueError(f"{text[:60]!r} is further back than times go") from None


def timestamp(value: datetime | None) -> str | None:
    """An aware datetime as an RFC 3339 UTC timestamp (``2026-01-05T12:00:00Z``), or ``None``."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
