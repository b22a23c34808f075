"""Route failures (R13–R18): what is counted on an unrouted Event whose route failed.

One owned concept: a :class:`RouteFailure` is stored as one KV entry per Event (namespace
``core.routing.failures``, key: the Event's seq). Only this module reads, writes or parses
the entry; the router, trace, operator controls, selectors and the doctor call it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.db.models import F

from causal.models import KV
from infra.frozen import frozen
from infra.queries import CompiledOnce, Listed
from routing.errors import RouteError, RouteErrorCode

FAILURES_NAMESPACE = "core.routing.failures"
BACKOFF_START = timedelta(seconds=2)
BACKOFF_CAP = timedelta(minutes=5)


@frozen
class RouteFailure:
    """The failures counted on one unrouted Event: the last one's code, route and error, how
    many, when the first and last were, until when the Event backs off, and in which
    configuration generation."""

    code: str
    route: str
    error: str
    count: int
    first_failed_at: datetime | None
    last_failed_at: datetime | None
    backoff_until: datetime | None
    generation: str

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> RouteFailure:
        """The failure a KV entry's value holds (times stored as ISO 8601 text)."""
        return cls(
            code=str(entry.get("code", "")),
            route=str(entry.get("route", "") or ""),
            error=str(entry.get("error", "") or ""),
            count=int(entry.get("count", 0) or 0),
            first_failed_at=_stored_time(entry.get("first_failed_at")),
            last_failed_at=_stored_time(entry.get("last_failed_at")),
            backoff_until=_stored_time(entry.get("backoff_until")),
            generation=str(entry.get("generation", "") or ""),
        )

    def as_entry(self) -> dict[str, Any]:
        """The KV value this failure is stored as."""
        return {
            "code": self.code,
            "route": self.route,
            "error": self.error[:4000],
            "count": self.count,
            "first_failed_at": _text(self.first_failed_at),
            "last_failed_at": _text(self.last_failed_at),
            "backoff_until": _text(self.backoff_until),
            "generation": self.generation,
        }

    def backing_off(self, now: datetime, generation: str) -> bool:
        """Whether the Event is within its backoff: its handlers are not asked again before
        it ends, except under a new configuration generation (R14)."""
        return self.backoff_until is not None and self.backoff_until > now and self.generation == generation

    def as_error(self) -> RouteError:
        """The last failure, as the error an outcome carries while the Event backs off."""
        return RouteError(
            RouteErrorCode(self.code),
            self.error,
            route=self.route,
            attempts=self.count,
            backoff_until=self.backoff_until,
        )


def backoff_for(failures: int) -> timedelta:
    """Retry delay after ``failures`` retryable failures: 2 s, doubling, capped at 5 min (R14)."""
    if failures < 1:
        return timedelta(0)
    exponent = min(failures - 1, 16)
    return min(BACKOFF_START * (2**exponent), BACKOFF_CAP)


def gives_up(*, error: RouteError, failures: int, first_failed_at: datetime, now: datetime, options) -> bool:
    """Whether routing gives up on an Event after its ``failures``-th failure (R15): at once for
    a failure that is not retried; otherwise only once the count AND the window are reached.
    ``options`` carries ``max_route_failures`` and ``route_failure_window``."""
    if not error.retried:
        return True
    return failures >= options.max_route_failures and now - first_failed_at >= options.route_failure_window


# Failures are few (an Event carries one only while its route keeps failing): while the
# namespace holds at most this many, reading them all is one range of its index, where a
# window's lookup probes the index once per Event (about 175 µs for 500 on SQLite, twice a pass).
FEW_FAILURES = 64


def failures_read(seqs: Iterable[int]) -> dict[int, RouteFailure]:
    """The failures counted on these Events, by seq (one query; none for an empty list):
    every failure counted, when there are at most :data:`FEW_FAILURES`, else those of
    ``seqs`` looked up one by one."""
    wanted = {str(seq) for seq in seqs}
    if not wanted:
        return {}
    rows = FEW_FAILURES_QUERY.rows()
    if len(rows) > FEW_FAILURES:
        rows = _FAILURES.rows(sorted(wanted))
    return {
        int(key): RouteFailure.from_entry(value)
        for key, value in rows
        if key in wanted and isinstance(value, dict)
    }


# Both read twice on every pass: built and compiled once (per number of Events) (CompiledOnce).
FEW_FAILURES_QUERY = CompiledOnce(
    lambda: KV.objects.filter(namespace=FAILURES_NAMESPACE).values_list("key", "value")[: FEW_FAILURES + 1]
)
_FAILURES = CompiledOnce(
    lambda keys: KV.objects.filter(namespace=FAILURES_NAMESPACE, key__in=Listed(keys)).values_list(
        "key", "value"
    )
)


def failures_keep_failing(min_count: int):
    """A queryset of the seqs (annotated ``seq``) of Events with at least ``min_count`` failures."""
    from django.db.models import BigIntegerField
    from django.db.models.functions import Cast

    return (
        KV.objects.filter(namespace=FAILURES_NAMESPACE, value__count__gte=min_count)
        .annotate(seq=Cast("key", BigIntegerField()))
        .values("seq")
    )


def failures_of_other_generations(generation: str):
    """A queryset of the seqs (annotated ``seq``) of Events whose failures were counted under
    another configuration generation than ``generation``: a new generation tries them at
    once (R14)."""
    from django.db.models import BigIntegerField
    from django.db.models.functions import Cast

    return (
        KV.objects.filter(namespace=FAILURES_NAMESPACE)
        .exclude(value__generation=generation)
        .annotate(seq=Cast("key", BigIntegerField()))
        .values("seq")
    )


def failure_put_in_tx(seq: int, failure: RouteFailure, now: datetime) -> None:
    """Store ``failure`` as the one counted on Event ``seq`` (replacing any earlier entry)."""
    value = failure.as_entry()
    updated = KV.objects.filter(namespace=FAILURES_NAMESPACE, key=str(seq)).update(
        value=value, version=F("version") + 1, updated_at=now
    )
    if not updated:
        KV.objects.create(namespace=FAILURES_NAMESPACE, key=str(seq), value=value, version=1, updated_at=now)


def failures_forget_in_tx(seqs: Iterable[int]) -> None:
    """Forget the failures counted on these Events (routed, or an operator reset them)."""
    keys = [str(seq) for seq in seqs]
    if keys:
        KV.objects.filter(namespace=FAILURES_NAMESPACE, key__in=Listed(keys)).delete()


def _stored_time(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) and value else None


def _text(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
