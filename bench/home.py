"""The home page with its trend charts over 100,000 Events: server time and query count.

    python bench/home.py [--events 100000] [--attempts 10000] [--runs 15] [--postgres URL]

Sets up Django on a fresh SQLite database in a temporary directory (or the PostgreSQL database
``--postgres`` names, which must be empty: it is migrated and filled), then writes, with bulk
inserts, Events accepted evenly over the last day, a route record for nearly every one
(routed, unmatched, dead-lettered; route latencies from 5 ms to 2 s, one in a hundred up to
30 s), and attempts started and ended over the day. It times the whole home page (a signed-in
GET through the middleware: session, heartbeat banner, doctor, counts, the trend queries,
eight SVG charts) and, as the floor measured in the same run, the Event list page; first with
1% of the Events, then with all of them. With the cache emptied (a restart), the home page is
first fetched until the day's route latencies are all ranked (each GET ranks at most
``conduit_site.console.trends.RANK_BUDGET`` Events): how many GETs and the slowest are printed; then the
median of ``--runs`` GETs. Prints server times, query counts and ratios. Target: the home
page at 100,000 Events within 300 ms.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET_MS = 300.0
BATCH = 5000


def setup_django(database_url: str, var_dir: str) -> None:
    """Configure Django for a private database and migrate it."""
    os.environ["DATABASE_URL"] = database_url
    os.environ["CONDUIT_VAR_DIR"] = var_dir
    # Filling is bulk writes of throwaway data; the pages timed only read.
    os.environ["SQLITE_SYNCHRONOUS"] = "OFF"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "conduit_site.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    # As deployed: with DEBUG on, Django also records every statement it runs.
    os.environ["DEBUG"] = "false"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


class StatementCounter:
    """Counts SQL statements run through Django's connection (an execute wrapper)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, execute, sql, params, many, context):
        self.count += 1
        return execute(sql, params, many, context)


def fill(*, start: int, stop: int, total: int, attempts: int, now: datetime, rng: random.Random) -> None:
    """Events ``start``..``stop`` of ``total`` spread evenly over the day before ``now``, with
    their route records, and their share of ``attempts`` (each of a completed Work)."""
    from django.db.models import OuterRef, Subquery

    from causal.models import Event
    from routing.models import RouteRecord
    from worklife.models import Attempt, Work

    day = 86_400.0
    for low in range(start, stop, BATCH):
        high = min(low + BATCH, stop)
        events = []
        for n in range(low, high):
            accepted = now - timedelta(seconds=day * (total - n) / total)
            events.append(
                Event(
                    envelope_id=f"bench-{n}",
                    source="bench",
                    type="bench.event",
                    scope="acme",
                    data={},
                    accepted_at=accepted,
                    route_state="unrouted",
                )
            )
        Event.objects.bulk_create(events)
        rows = Event.objects.filter(seq__gt=0, envelope_id__in=[e.envelope_id for e in events]).values_list(
            "seq", "accepted_at"
        )
        records = []
        for seq, accepted in rows:
            roll = rng.random()
            if roll < 0.005:
                continue  # still unrouted: the backlog
            latency = rng.uniform(0.005, 2.0) if roll < 0.99 else rng.uniform(2.0, 30.0)
            decided = min(accepted + timedelta(seconds=latency), now)
            if roll < 0.02:
                policy, disposition = "failed", "failed"
            elif roll < 0.12:
                policy, disposition = "unmatched", "routed"
            else:
                policy, disposition = "queue", "routed"
            records.append(
                RouteRecord(
                    event_id=seq,
                    scope="acme",
                    route="bench",
                    binding="agent",
                    generation="1",
                    policy=policy,
                    disposition=disposition,
                    decided_at=decided,
                )
            )
        RouteRecord.objects.bulk_create(records)
        # Each settled Event's state and time, as the router writes them with its record.
        record = RouteRecord.objects.filter(event_id=OuterRef("pk"))
        Event.objects.filter(seq__in=[r.event_id for r in records]).update(
            route_state=Subquery(record.values("disposition")[:1]),
            routed_at=Subquery(record.values("decided_at")[:1]),
        )
    share = attempts * (stop - start) // total
    works = Work.objects.bulk_create(
        [
            Work(
                scope="acme",
                binding="agent",
                status="completed",
                created_at=now,
                updated_at=now,
                ended_at=now,
            )
            for _ in range(share)
        ],
        batch_size=BATCH,
    )
    attempt_rows = []
    for index, work in enumerate(works):
        started = now - timedelta(seconds=day * rng.random())
        attempt_rows.append(
            Attempt(
                work=work,
                number=1,
                binding="agent",
                generation=1,
                started_at=started,
                ended_at=min(started + timedelta(seconds=rng.uniform(1, 120)), now),
                state="succeeded" if index % 10 else "failed",
            )
        )
    Attempt.objects.bulk_create(attempt_rows, batch_size=BATCH)


def get(client, url: str) -> tuple[float, int]:
    """One GET of ``url``: its server time (ms) and how many statements it ran."""
    from django.db import connection

    counter = StatementCounter()
    with connection.execute_wrapper(counter):
        began = time.perf_counter()
        response = client.get(url)
        elapsed = (time.perf_counter() - began) * 1000
    assert response.status_code == 200, (url, response.status_code)
    return elapsed, counter.count


def time_page(client, url: str, runs: int) -> tuple[float, float, int]:
    """The first GET's time (ms), the median of ``runs`` GETs after it, and the statements
    of the last one."""
    first, _ = get(client, url)
    times, queries = [], 0
    for _ in range(runs):
        elapsed, queries = get(client, url)
        times.append(elapsed)
    return first, statistics.median(times), queries


def fill_latency_cache(client) -> tuple[int, float]:
    """GET the home page until no route latency bucket waits to be ranked: how many GETs
    that took (the first included) and the slowest one (ms)."""
    gets, slowest = 0, 0.0
    while True:
        began = time.perf_counter()
        body = client.get("/").content.decode()
        slowest = max(slowest, (time.perf_counter() - began) * 1000)
        gets += 1
        if "not ranked yet" not in body or gets >= 100:
            return gets, slowest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=100_000, help="Events over the day (default 100,000).")
    parser.add_argument(
        "--attempts", type=int, default=10_000, help="Attempts over the day (default 10,000)."
    )
    parser.add_argument("--runs", type=int, default=15, help="Timed GETs per page and size (default 15).")
    parser.add_argument("--postgres", metavar="URL", help="Run on this (empty) PostgreSQL database instead.")
    parser.add_argument("--seed", type=int, default=11, help="Random seed (default 11).")
    args = parser.parse_args()
    if args.events < 100 or args.runs < 1 or args.attempts < 0:
        parser.error("--events must be at least 100, --runs at least 1, --attempts not negative")

    tmp = tempfile.mkdtemp(prefix="conduit-home-bench-")
    try:
        setup_django(args.postgres or f"sqlite:///{tmp}/bench.sqlite3", tmp)
        from django.contrib.auth import get_user_model
        from django.core.cache import cache
        from django.db import connection
        from django.test import Client

        from causal.clock import system_clock

        now = system_clock()
        rng = random.Random(args.seed)
        user = get_user_model().objects.create_superuser("bench", password=None)
        client = Client()
        client.force_login(user)
        print(
            f"database: {connection.vendor}; home page over the last day's Events; target {TARGET_MS:.0f} ms"
        )
        small = max(args.events // 100, 1)
        warm = {}
        for label, low, high in (("1%", 0, small), ("all", small, args.events)):
            began = time.perf_counter()
            fill(start=low, stop=high, total=args.events, attempts=args.attempts, now=now, rng=rng)
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")
            filled = time.perf_counter() - began
            get(client, "/events/")  # the process's first page compiles the shared templates
            cache.clear()
            gets, slowest = fill_latency_cache(client)
            _, home, home_queries = time_page(client, "/", args.runs)
            _, floor, floor_queries = time_page(client, "/events/", args.runs)
            warm[label] = home
            print(
                f"{high:>7,} Events (written in {filled:.0f} s): home {home:6.1f} ms, {home_queries} queries; "
                f"floor (Event list) {floor:5.1f} ms, {floor_queries} queries; home / floor {home / floor:.2f}; "
                f"after a restart {gets} GET{'s' if gets != 1 else ''} ranked the day's latencies, "
                f"the slowest {slowest:.0f} ms"
            )
        print(
            f"home at {args.events:,} / at {small:,} Events: {warm['all'] / warm['1%']:.2f}; "
            f"at {args.events:,}: {warm['all']:.1f} ms "
            f"({'within' if warm['all'] <= TARGET_MS else 'OVER'} the {TARGET_MS:.0f} ms target)"
        )
    finally:
        from django.db import connections

        connections.close_all()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
