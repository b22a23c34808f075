"""What a route's rate limit costs routing, beside the same route without one, in one run.

    python bench/route_rate_limit.py [--n 10000] [--batch-size 500]

Sets up Django on a fresh SQLite database in a temporary directory (the shipped settings) and
applies one configuration of three scopes with the same route: ``free`` without a rate limit,
``counted`` with one no Event reaches (100 per minute per user: every Event is counted and taken)
and ``limited`` with one that drops about half of them (20 per minute per user). Events are accepted 30
a second over 40 users (45 a minute each). A count reads, for each Event, the takes of its key
within the period before it: at most about ``limit`` index entries.
For each scope in turn it accepts ``--n`` Events (a third start Work, the rest queue on it),
routes them all with the route loop's router and prints Events/s, the ratio to ``free``, and the
SQL statements per window of ``--batch-size`` (counted on one more window of each).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.trace import setup_django  # noqa: E402 - the same fresh database as the trace bench

DOCUMENT = """
version: 1
scopes:
"""
ROUTE = """  - path: {scope}
    bindings:
      agent: {{}}
    routes:
      - slot: chat
        handler: match
        params: {{type: "chat.*", keys: ["conv:{{data.conv}}"]}}
        binding: agent
        policy: queue
{limit}"""
LIMITS = {
    "free": "",
    "counted": '        rate_limit: {limit: 100, period: 1m, key: "{data.user}"}\n',
    "limited": '        rate_limit: {limit: 20, period: 1m, key: "{data.user}"}\n',
}


class Clock:
    """The acceptance clock: each batch of 30 Events a second later (routing reads its own)."""

    def __init__(self) -> None:
        from causal.clock import system_clock

        self.now = system_clock()

    def __call__(self):
        return self.now


def accept(scope: str, n: int, clock: Clock, start: int) -> None:
    from routing.acceptance.services import events_accept

    payloads = [
        {
            "specversion": "1.0",
            "id": f"{scope}-{start + i}",
            "source": "bench",
            "type": "chat.message",
            "scope": scope,
            "data": {"user": f"u{i % 40}", "conv": (start + i) // 3},
        }
        for i in range(n)
    ]
    for first in range(0, n, 30):
        clock.now += timedelta(seconds=1)
        events_accept(payloads=payloads[first : first + 30], clock=clock)


def route(batch_size: int) -> tuple[float, int]:
    """Route every unrouted Event; seconds and windows."""
    from causal.clock import system_clock
    from routing.engine.options import RouterOptions
    from routing.engine.router import build_router

    router = build_router(clock=system_clock, options=RouterOptions(batch_size=batch_size))
    windows = 0
    started = time.perf_counter()
    try:
        while router.route_pending(claim_ahead=False):
            windows += 1
    finally:
        router.close()
    return time.perf_counter() - started, windows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=10_000, help="Events per scope (default 10,000).")
    parser.add_argument("--batch-size", type=int, default=500, help="Events per window (default 500).")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="conduit-bench-")
    try:
        setup_django(tmp)
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        from causal.clock import system_clock
        from routing.config.services import config_apply
        from routing.models import RouteRecord

        document = DOCUMENT + "".join(ROUTE.format(scope=s, limit=limit) for s, limit in LIMITS.items())
        config_apply(document=document, clock=system_clock)
        rates: dict[str, float] = {}
        for scope in LIMITS:
            clock = Clock()
            accept(scope, args.n, clock, 0)
            seconds, _ = route(args.batch_size)
            rates[scope] = args.n / seconds
            accept(scope, args.batch_size, clock, args.n)
            with CaptureQueriesContext(connection) as captured:
                route(args.batch_size)
            dropped = RouteRecord.objects.filter(scope=scope, policy="drop").count()
            ratio = rates[scope] / rates["free"]
            print(
                f"{scope:<8} {rates[scope]:>9,.0f} Events/s   x{ratio:.2f} of free   "
                f"{len(captured)} statements for a window of {args.batch_size}   "
                f"{dropped} of {args.n + args.batch_size} dropped"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
