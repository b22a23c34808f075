"""The console's pages at 100 and at 10,000 rows of history, in one run.

    python bench/console.py [--small 100] [--large 10000] [--repeat 25]

On a fresh SQLite database it stores ``--small`` Events, Work and inputs of one Work, times
each page (the server's time: Django's whole request in process, middleware, queries and
template, the least of ``--repeat`` requests after a warm-up) and counts its queries; then grows
the history to ``--large`` and does it again. Prints, per page, both times, their ratio (target
<= 1.5: a page's cost must not grow with history) and both query counts (which must be
equal). The time at ``--small`` is each page's floor, measured in the same run.

Each page is one function in ``PAGES`` taking the test client and the data's ids and returning
the path it requests; to bench another page, write one and add it there.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TYPES = ("github.pull_request.opened", "github.push", "slack.message", "ops.alert")
SCOPES = ("acme", "acme/web", "acme/ops", "chat")
# Policies recorded on routed Events, in turn (unmatched and dropped among them).
POLICIES = ("start", "queue", "queue", "unmatched", "drop")
T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


@dataclass
class History:
    """What has been stored so far, and the ids the pages need."""

    events: int = 0
    works: int = 0
    inputs: int = 0
    busy_work_id: int = 0


# --- the pages ---------------------------------------------------------------------------------


def event_list(history: History) -> str:
    """The Events list, first page, no filter."""
    return "/events/"


def event_list_filtered(history: History) -> str:
    """The Events list filtered by a type glob and a scope with its subtree."""
    return "/events/?type=github.*&scope=acme&subtree=1"


def work_list(history: History) -> str:
    """The Work list, first page, no filter."""
    return "/work/"


def work_page(history: History) -> str:
    """The Work page of the Work with all the inputs (first pages of its lists)."""
    return f"/work/{history.busy_work_id}/"


def work_page_newest(history: History) -> str:
    """The same Work page with its input newest first."""
    return f"/work/{history.busy_work_id}/?input_order=newest"


PAGES: list[Callable[[History], str]] = [event_list, work_list, work_page, work_page_newest]
# Shown for information, outside the target: a filter whose matches are most of history walks
# its index over all of them (SQLite picks the index, not the newest-first scan).
INFORMATIONAL: list[Callable[[History], str]] = [event_list_filtered]


# --- the data ----------------------------------------------------------------------------------


def grow(history: History, target: int) -> None:
    """Store Events (most routed, some unrouted), Work and inputs of the busy Work until each
    count reaches ``target``, in bulk."""
    from django.db import transaction

    from causal.models import Event, RouteState
    from routing.models import Disposition, RouteRecord
    from worklife.models import Work, WorkInput

    with transaction.atomic():
        if not history.busy_work_id:
            busy = Work.objects.create(
                scope="acme", binding="agent", status="ready", created_at=T0, updated_at=T0
            )
            history.busy_work_id = busy.pk
        works = [
            Work(
                scope=SCOPES[i % len(SCOPES)],
                binding=("agent", "shell", "inbox")[i % 3],
                status=("ready", "running", "completed", "cancelled")[i % 4],
                created_at=T0,
                updated_at=T0,
            )
            for i in range(history.works, target)
        ]
        Work.objects.bulk_create(works, batch_size=1000)
        history.works = target

        def new_events(start: int, end: int, prefix: str, **fields) -> list[Event]:
            made = [
                Event(
                    envelope_id=f"{prefix}-{i}",
                    source="bench",
                    type=fields.get("type") or TYPES[i % len(TYPES)],
                    scope=fields.get("scope") or SCOPES[i % len(SCOPES)],
                    subject=f"subject {i}",
                    data={"n": i},
                    accepted_at=T0 + timedelta(seconds=i),
                    route_state=RouteState.UNROUTED if i % 10 == 0 else RouteState.ROUTED,
                )
                for i in range(start, end)
            ]
            return Event.objects.bulk_create(made, batch_size=1000)

        events = new_events(history.events, target, "e")
        RouteRecord.objects.bulk_create(
            [
                RouteRecord(
                    event=e,
                    policy=POLICIES[e.seq % len(POLICIES)],
                    disposition=Disposition.ROUTED,
                    scope=e.scope,
                    decided_at=T0,
                )
                for e in events
                if e.route_state == RouteState.ROUTED
            ],
            batch_size=1000,
        )
        history.events = target

        inputs = new_events(history.inputs, target, "input", type="github.push", scope="acme")
        Event.objects.filter(seq__in=[e.seq for e in inputs]).update(route_state=RouteState.ROUTED)
        WorkInput.objects.bulk_create(
            [
                WorkInput(work_id=history.busy_work_id, event=e, seq=e.seq, binding="agent", created_at=T0)
                for e in inputs
            ],
            batch_size=1000,
        )
        RouteRecord.objects.bulk_create(
            [
                RouteRecord(
                    event=e, work_id=history.busy_work_id, policy="queue", scope="acme", decided_at=T0
                )
                for e in inputs
            ],
            batch_size=1000,
        )
        history.inputs = target


# --- timing ------------------------------------------------------------------------------------


def measure(client, path: str, repeat: int) -> tuple[float, int]:
    """The least time of ``repeat`` requests of ``path`` (after one warm-up) in ms, and the
    number of queries one request makes."""
    from django.db import connection

    queries: list[tuple[float, str]] = []

    def timed(execute, sql, params, many, context):
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            queries.append(((time.perf_counter() - started) * 1000, sql))

    with connection.execute_wrapper(timed):
        response = client.get(path)
    if response.status_code != 200:
        raise SystemExit(f"{path}: status {response.status_code}")
    if os.environ.get("BENCH_SQL"):
        for ms, sql in queries:
            print(f"    {ms:7.2f} ms  {sql[:150]}")
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        client.get(path)
        times.append((time.perf_counter() - started) * 1000)
    # The least time: the machine's other work only ever adds to a request's time.
    return min(times), len(queries)


def run(args: argparse.Namespace) -> None:
    from django.core.management import call_command
    from django.test import Client

    from tests.routing.factories import UserFactory

    call_command("migrate", verbosity=0)
    user = UserFactory(username="bench", is_superuser=True)
    client = Client()
    client.force_login(user)
    history = History()
    results: dict[str, dict[int, tuple[float, int]]] = {}
    for size in (args.small, args.large):
        grow(history, size)
        for page in PAGES + INFORMATIONAL:
            results.setdefault(page.__name__, {})[size] = measure(client, page(history), args.repeat)

    print(
        f"history                 {args.small:,} and {args.large:,} Events, Work and inputs of one Work (SQLite)"
    )
    print(
        f"{'page':<22}{'at ' + format(args.small, ','):>12}{'at ' + format(args.large, ','):>14}{'ratio':>8}   queries"
    )
    worst = 0.0
    for name, by_size in results.items():
        (small_ms, small_q), (large_ms, large_q) = by_size[args.small], by_size[args.large]
        ratio = large_ms / small_ms
        informational = name in {page.__name__ for page in INFORMATIONAL}
        if not informational:
            worst = max(worst, ratio)
        print(
            f"{name:<22}{small_ms:>9.1f} ms{large_ms:>11.1f} ms{ratio:>8.2f}   {small_q} / {large_q}"
            + ("" if small_q == large_q else "   (differs!)")
            + ("   (information, no target)" if informational else "")
        )
    print(f"worst ratio             {worst:.2f}   (target <= 1.5)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=100, help="The short history (rows of each kind).")
    parser.add_argument("--large", type=int, default=10_000, help="The long history (rows of each kind).")
    parser.add_argument("--repeat", type=int, default=25, help="Requests timed per page and size.")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="conduit-bench-")
    os.environ.update(
        DATABASE_URL=f"sqlite:///{tmp}/conduit.sqlite3",
        CONDUIT_VAR_DIR=tmp,
        DEBUG="false",
        LOG_LEVEL="WARNING",
    )
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "conduit_site.settings")
    import django

    django.setup()
    try:
        run(args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
