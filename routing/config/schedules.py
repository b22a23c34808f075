"""A scope's ``schedules``: what each declares and when it fires (pure: no database).

```yaml
schedules:
  daily-digest:
    cron: "0 9 * * 1-5"          # five fields (cronsim), in ``timezone`` (default UTC)
    timezone: Europe/Berlin
    type: demo.digest.daily       # the Event each fire accepts
    subject: digest               # optional
    data: {channel: "#ops"}       # optional
    overlap: skip                 # skip (default): no fire while the last one's Work runs; allow
    catch_up: last                # after downtime: none, last (default) or all
    catch_up_limit: 10            # all: at most this many, newest first (default 10)
  tick:
    every: 300                    # or an interval in seconds, from the Unix epoch
    type: demo.tick
```
Fire times are the same on every host: a cron expression's in its time zone, an interval's
counted from 1970-01-01 UTC.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

SCHEDULE_KEYS = (
    "cron",
    "timezone",
    "every",
    "type",
    "subject",
    "data",
    "overlap",
    "catch_up",
    "catch_up_limit",
)
OVERLAPS = ("skip", "allow")
CATCH_UPS = ("none", "last", "all")
DEFAULT_CATCH_UP_LIMIT = 10
MIN_EVERY = 0.2
MAX_EVERY = 366 * 86400.0
# A fire time counts as on time (not missed) while it is at most half the time to the next one
# late, within these bounds: a running loop is never that late, a loop that was down is.
ON_TIME = timedelta(seconds=60)
MIN_ON_TIME = timedelta(seconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """A valid schedule of ``scope``: its fire times, its Event and its policies."""

    scope: str
    name: str
    type: str
    cron: str = ""
    timezone: str = "UTC"
    every: float = 0.0
    subject: str = ""
    data: Any = None
    overlap: str = "skip"
    catch_up: str = "last"
    catch_up_limit: int = DEFAULT_CATCH_UP_LIMIT

    @property
    def when(self) -> str:
        """How pages say its fire times: ``cron 0 9 * * * (Europe/Berlin)`` or ``every 300 s``."""
        return f"cron {self.cron} ({self.timezone})" if self.cron else f"every {self.every:g} s"

    def fire_times(self, after: datetime) -> Iterator[datetime]:
        """Fire times strictly after ``after``, in order, in UTC (endless)."""
        if self.cron:
            zone = ZoneInfo(self.timezone)
            for moment in CronSim(self.cron, after.astimezone(zone)):
                yield moment.astimezone(UTC)
            return
        step = timedelta(seconds=self.every)
        # Whole microseconds, so every host computes the same times.
        micros = round(self.every * 1_000_000)
        elapsed = (after - _EPOCH) // timedelta(microseconds=1)
        moment = _EPOCH + timedelta(microseconds=(elapsed // micros + 1) * micros)
        while True:
            yield moment
            moment += step

    def is_late(self, moment: datetime, now: datetime) -> bool:
        """Whether the fire time ``moment`` is missed at ``now``: later than half the time to the
        next fire time (at least ``MIN_ON_TIME``, at most ``ON_TIME``)."""
        gap = timedelta(seconds=self.every) if self.every else self.next_after(moment) - moment
        return now - moment > min(ON_TIME, max(MIN_ON_TIME, gap / 2))

    def next_after(self, after: datetime) -> datetime:
        return next(self.fire_times(after))

    def due(self, after: datetime, now: datetime, *, cap: int = 10_000) -> list[datetime]:
        """Fire times in (``after``, ``now``], oldest first; at most the newest ``cap``."""
        times: list[datetime] = []
        for moment in self.fire_times(after):
            if moment > now:
                break
            times.append(moment)
            if len(times) > cap:
                del times[0]
        return times


def fire_time_text(moment: datetime) -> str:
    """A fire time as its Event id names it: ``2026-12-07T09:00:00Z`` (milliseconds when it has
    a fraction of a second)."""
    moment = moment.astimezone(UTC)
    if moment.microsecond:
        return f"{moment:%Y-%m-%dT%H:%M:%S}.{moment.microsecond // 1000:03d}Z"
    return f"{moment:%Y-%m-%dT%H:%M:%S}Z"


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def schedule_problems(raw: Any) -> list[tuple[str, str]]:
    """Problems of one declared schedule, each (sub-place, message); none: valid."""
    if not isinstance(raw, dict):
        return [("", "expected a schedule (a mapping with cron or every, and type)")]
    problems = [
        (str(key), f"unknown key {key!r} (expected one of: {', '.join(SCHEDULE_KEYS)})")
        for key in raw
        if key not in SCHEDULE_KEYS
    ]
    cron, every = raw.get("cron"), raw.get("every")
    if (cron is None) == (every is None):
        problems.append(("", "give either cron (an expression) or every (seconds), not both"))
    if cron is not None:
        if not isinstance(cron, str):
            problems.append(("cron", "expected a cron expression (five fields: 0 9 * * 1-5)"))
        else:
            try:
                CronSim(cron, datetime(2000, 1, 1, tzinfo=UTC))
            except CronSimError as exc:
                problems.append(("cron", f"bad cron expression {cron!r}: {exc}"))
    timezone = raw.get("timezone")
    if timezone is not None:
        if cron is None:
            problems.append(("timezone", "only a cron schedule has a time zone"))
        elif not isinstance(timezone, str):
            problems.append(("timezone", "expected a time zone name (Europe/Berlin)"))
        else:
            try:
                ZoneInfo(timezone)
            except (ZoneInfoNotFoundError, ValueError):
                problems.append(("timezone", f"unknown time zone {timezone!r}"))
    if every is not None and (not _number(every) or not MIN_EVERY <= every <= MAX_EVERY):
        problems.append(("every", f"expected seconds from {MIN_EVERY:g} to {MAX_EVERY:g}"))
    kind = raw.get("type")
    if not isinstance(kind, str) or not kind:
        problems.append(("type", "required: the type of the Event each fire accepts"))
    elif kind.casefold() == "core" or kind.casefold().startswith("core."):
        problems.append(("type", f"type {kind!r} is reserved for core Events (core.*)"))
    subject = raw.get("subject")
    if subject is not None and not isinstance(subject, str):
        problems.append(("subject", "expected a string"))
    for key, allowed in (("overlap", OVERLAPS), ("catch_up", CATCH_UPS)):
        value = raw.get(key)
        if value is not None and value not in allowed:
            problems.append((key, f"unknown {key} {value!r} (expected one of: {', '.join(allowed)})"))
    limit = raw.get("catch_up_limit")
    if limit is not None and (type(limit) is not int or not 1 <= limit <= 1000):
        problems.append(("catch_up_limit", "expected a whole number from 1 to 1000"))
    return problems


def schedule_spec(scope: str, name: str, raw: Mapping[str, Any]) -> ScheduleSpec:
    """The spec of a valid declared schedule (``raw`` carries its ``name`` once stored)."""
    return ScheduleSpec(
        scope=scope,
        name=name,
        type=str(raw["type"]),
        cron=str(raw.get("cron") or ""),
        timezone=str(raw.get("timezone") or "UTC"),
        every=float(raw.get("every") or 0.0),
        subject=str(raw.get("subject") or ""),
        data=_thaw(raw.get("data")),
        overlap=str(raw.get("overlap") or "skip"),
        catch_up=str(raw.get("catch_up") or "last"),
        catch_up_limit=int(raw.get("catch_up_limit") or DEFAULT_CATCH_UP_LIMIT),
    )


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_thaw(v) for v in value]
    return value
