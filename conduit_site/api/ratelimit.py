"""Rate limits of the JSON API and the receivers: requests a minute per API token, per login
(all its tokens together) and, for acceptance from senders, per token or per receiver.

Fixed one-minute windows counted in Django's cache (``cache.add`` then ``cache.incr``, atomic
in the local-memory and the Redis caches). With ``REDIS_URL`` the cache is Redis and the limits
hold across web processes and hosts; without it each web process counts in its own memory (a
deployment of N web processes lets a client make up to N times as many requests). A limit that must hold exactly across hosts, like the
impact previews' concurrency quotas, is counted in the database instead
(``routing.setup.impact_runs``). The settings are in ``conduit_site/settings.py`` and
docs/operations.md.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from django.core.cache import cache

# Seconds since the epoch (tests inject a fixed one: a window boundary would reset the counts).
clock: Callable[[], float] = time.time
WINDOW_SECONDS = 60
PREFIX = "conduit:rate"


@dataclass(frozen=True, slots=True)
class Limit:
    """At most ``per_minute`` requests a window for ``key`` (0: no limit); ``what`` names it in
    the refusal ("API token cdt_ab12")."""

    key: str
    per_minute: int
    what: str


@dataclass(frozen=True, slots=True)
class Exceeded:
    """The limit a request passed, and the whole seconds until its window ends."""

    limit: Limit
    retry_after: int

    @property
    def message(self) -> str:
        return (
            f"{self.limit.what} made more than {self.limit.per_minute} requests this minute: "
            f"try again in {self.retry_after} s"
        )


def rate_count(limits: Iterable[Limit]) -> Exceeded | None:
    """Count one request against each of ``limits``; the first one it passes, if any."""
    now = clock()
    window = int(now // WINDOW_SECONDS)
    retry_after = max(1, math.ceil((window + 1) * WINDOW_SECONDS - now))
    for limit in limits:
        if limit.per_minute <= 0:
            continue
        # Hashed: a key may hold any text of the request (a receiver's path), which some cache
        # backends refuse.
        key = f"{PREFIX}:{hashlib.sha256(limit.key.encode()).hexdigest()[:32]}:{window}"
        cache.add(key, 0, timeout=2 * WINDOW_SECONDS)
        try:
            count = cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.set(key, 1, timeout=2 * WINDOW_SECONDS)
            count = 1
        if count > limit.per_minute:
            return Exceeded(limit, retry_after)
    return None
