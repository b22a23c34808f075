"""The console's pages at 100 and at 10,000 rows of history, in one run.

    python bench/console.py [--small 100] [--large 10000] [--repeat 25]

It stores ``--small`` Events, Work and inputs of one Work in one fresh SQLite database and
``--large`` of each in another, then times each page on both (the server's time: Django's
whole request in process, middleware, queries and template; the least of ``--repeat``
requests, the two databases taking turns) and counts its queries. Prints, per page, both
times, their ratio (target <= 1.5: a page's cost must not grow with history) and both query
counts (which must be equal). The time at ``--small`` is each page's floor, measured in the
same run. ``BENCH_SQL=1`` prints each page's queries with their times.

Then the live Work list at ``--large``: the time from a Work change's commit to the
``console.work`` message on the channel layer (the median and worst of ``--live-samples``
changes), the time the list's consumer takes to render its rows (what follows the message,
after its one-second coalescing window) with its queries at both sizes, and how many messages
``--live-changes`` changes, each its own transaction, send.

Last the bulk jobs, in a database of their own (``--only-bulk`` runs this part alone): ``POST
/api/work/bulk`` retrying ``--bulk`` parked Work by a filter and ``POST /api/events/replay`` of
``--bulk`` settled Events. Prints each request's time (it stores the job: target under 1 s), then
the job run to its end as the route loop runs it, in batches: its time, the targets done, the SQL
statements in all and per target (a batch's are a fixed number: about 0.1 a target).

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
    impact_run_id: int = 0


# --- the pages ---------------------------------------------------------------------------------


def event_list(history: History) -> str:
    """The Events list, first page, no filter."""
    return "/events/"


def event_list_filtered(history: History) -> str:
    """The Events list filtered by a type glob and a scope with its subtree."""
    return "/events/?type=github.*&scope=acme&subtree=1"


def event_search(history: History) -> str:
    """The Events list searched by a subject (no index holds subjects: it reads every row)."""
    return "/events/?q=subject+7"


def work_list(history: History) -> str:
    """The Work list, first page, no filter."""
    return "/work/"


def work_page(history: History) -> str:
    """The Work page of the Work with all the inputs (first pages of its lists)."""
    return f"/work/{history.busy_work_id}/"


def work_page_newest(history: History) -> str:
    """The same Work page with its input newest first."""
    return f"/work/{history.busy_work_id}/?input_order=newest"


def impact_run(history: History) -> str:
    """An impact preview that changed every Event of history: its roll-up and its second page
    of changed Events (50 a page)."""
    return f"/config/impact/{history.impact_run_id}/?page=2"


PAGES: list[Callable[[History], str]] = [event_list, work_list, work_page, work_page_newest, impact_run]
# Shown for information, outside the target: a filter whose matches are most of history walks
# its index over all of them (SQLite picks the index, not the newest-first scan), and a search
# by subject or envelope id reads every Event (no index for them: each would cost every
# acceptance an index write).
INFORMATIONAL: list[Callable[[History], str]] = [event_list_filtered, event_search]


# --- the data ----------------------------------------------------------------------------------


def grow(history: History, target: int) -> None:
    """Store Events (most routed, some unrouted), Work and inputs of the busy Work until each
    count reaches ``target``, in bulk."""
    from django.db import transaction

    from causal.models import Event, RouteState
    from routing.models import Disposition, ImpactRun, ImpactRunChange, RouteRecord
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
        if not history.impact_run_id:
            history.impact_run_id = ImpactRun.objects.create(
                candidate_number=0, live="1", events=10_000, status="done", started_at=T0, updated_at=T0
            ).pk
        outcome = {"result": {"effect": "unmatched", "scope": "acme", "generation": "1", "verdicts": []}}
        ImpactRunChange.objects.bulk_create(
            [
                ImpactRunChange(
                    run_id=history.impact_run_id,
                    position=i,
                    seq=e.seq,
                    type=e.type,
                    scope=e.scope,
                    group=f"{POLICIES[i % len(POLICIES)]} → unmatched",
                    route=f"route-{i % 7}",
                    live=outcome,
                    candidate=outcome,
                )
                for i, e in enumerate(events, start=history.events)
            ],
            batch_size=1000,
        )
        ImpactRun.objects.filter(pk=history.impact_run_id).update(
            changed=target,
            examined=target,
            rollup=[
                {
                    "group": f"{policy} → unmatched",
                    "effect": "unmatched",
                    "route": f"route-{r}",
                    "count": target // 35,
                }
                for policy in dict.fromkeys(POLICIES)
                for r in range(7)
            ],
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


def use_database(path: str) -> None:
    """Point the default connection at the SQLite file ``path`` (opened on the next query)."""
    from django.db import connection

    connection.close()
    connection.settings_dict["NAME"] = path


def request(client, path: str) -> tuple[float, list[tuple[float, str]]]:
    """One request of ``path``: its time in ms and its queries (time in ms, SQL)."""
    from django.db import connection

    queries: list[tuple[float, str]] = []

    def timed(execute, sql, params, many, context):
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            queries.append(((time.perf_counter() - started) * 1000, sql))

    with connection.execute_wrapper(timed):
        started = time.perf_counter()
        response = client.get(path)
        elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise SystemExit(f"{path}: status {response.status_code}")
    return elapsed, queries


def prepare(path: str, size: int) -> tuple[History, object]:
    """A fresh database at ``path`` holding ``size`` rows of history, and a signed-in client."""
    from django.core.management import call_command
    from django.test import Client

    from tests.routing.factories import UserFactory

    use_database(path)
    call_command("migrate", verbosity=0)
    history = History()
    grow(history, size)
    client = Client()
    client.force_login(UserFactory(username="bench", is_superuser=True))
    return history, client


def run(args: argparse.Namespace, tmp: str) -> None:
    sizes = (args.small, args.large)
    setups = {
        size: (f"{tmp}/history-{size}.sqlite3", *prepare(f"{tmp}/history-{size}.sqlite3", size))
        for size in sizes
    }
    pages = PAGES + INFORMATIONAL
    times: dict[tuple[str, int], list[float]] = {}
    counts: dict[tuple[str, int], int] = {}
    # The two histories take turns, request by request, so the machine's other work weighs on
    # both alike; each switch of database is followed by an untimed request.
    for _ in range(args.repeat):
        for size in sizes:
            path, history, client = setups[size]
            use_database(path)
            for page in pages:
                request(client, page(history))
                elapsed, queries = request(client, page(history))
                times.setdefault((page.__name__, size), []).append(elapsed)
                counts[(page.__name__, size)] = len(queries)
                if os.environ.get("BENCH_SQL") and _ == 0:
                    print(f"{page.__name__} at {size}:")
                    for ms, sql in queries:
                        print(f"    {ms:7.2f} ms  {sql[:150]}")

    print(
        f"history                 {args.small:,} and {args.large:,} Events, Work and inputs of one Work (SQLite)"
    )
    print(
        f"{'page':<22}{'at ' + format(args.small, ','):>12}{'at ' + format(args.large, ','):>14}{'ratio':>8}   queries"
    )
    worst = 0.0
    informational = {page.__name__ for page in INFORMATIONAL}
    for page in pages:
        name = page.__name__
        # The least time: the machine's other work only ever adds to a request's time.
        small_ms, large_ms = min(times[(name, args.small)]), min(times[(name, args.large)])
        small_q, large_q = counts[(name, args.small)], counts[(name, args.large)]
        ratio = large_ms / small_ms
        if name not in informational:
            worst = max(worst, ratio)
        print(
            f"{name:<22}{small_ms:>9.1f} ms{large_ms:>11.1f} ms{ratio:>8.2f}   {small_q} / {large_q}"
            + ("" if small_q == large_q else "   (differs!)")
            + ("   (information, no target)" if name in informational else "")
        )
    print(f"worst ratio             {worst:.2f}   (target <= 1.5)")
    live_work_list(args, setups)
    bulk_jobs(args, tmp)


def live_work_list(args: argparse.Namespace, setups: dict) -> None:
    """The live Work list on the large history: change to message (through the outbox and the
    web process's reader), message to fragment, and the messages a burst of changes sends."""
    import asyncio
    import statistics
    import threading

    from channels.layers import get_channel_layer
    from django.db import transaction
    from django.template.loader import render_to_string

    from causal.clock import system_clock
    from conduit_site.console.views.work import LIST_LIVE_PARTIAL, LIST_TEMPLATE, work_rows_context
    from conduit_site.live import LiveReader
    from infra.live import WORK_GROUP
    from worklife.models import Work
    from worklife.scheduling import work_hold_in_tx
    from worklife.selectors import WorkFilter

    path, history, _client = setups[args.large]
    use_database(path)
    # The web process's event loop, on a thread: the reader sends to the websockets on it.
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    def run(coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result(30)

    layer = get_channel_layer()
    channel = run(layer.new_channel())
    run(layer.group_add(WORK_GROUP, channel))
    reader = LiveReader()
    reader.subscribe([WORK_GROUP], loop)
    ready = list(
        Work.objects.filter(status="ready").values_list("pk", flat=True)[: max(args.live_changes, 1)]
    )

    def change(work_id: int) -> None:
        with transaction.atomic():
            work_hold_in_tx(work_id=work_id, reason="bench", now=system_clock())

    time.sleep(0.5)  # the reader has read the outbox's head
    latencies = []
    for i in range(args.live_samples):
        # From before the change: the reader, woken by its commit, may send before it returns.
        started = time.perf_counter()
        change(ready[i % len(ready)])
        run(layer.receive(channel))
        latencies.append((time.perf_counter() - started) * 1000)
        time.sleep(0.3)  # each sample is a pass of its own

    renders = {}
    for size in (args.small, args.large):
        use_database(setups[size][0])
        best, queries = float("inf"), []
        for _ in range(args.repeat):
            from django.db import connection

            seen: list[str] = []

            def counted(execute, sql, params, many, context, seen=seen):
                seen.append(sql)
                return execute(sql, params, many, context)

            with connection.execute_wrapper(counted):
                started = time.perf_counter()
                render_to_string(
                    f"{LIST_TEMPLATE}#{LIST_LIVE_PARTIAL}",
                    {**work_rows_context(WorkFilter()), "oob": True, "return_to": "/work/"},
                )
                best = min(best, (time.perf_counter() - started) * 1000)
            queries = seen
        renders[size] = (best, len(queries))

    use_database(path)
    passes, messages = reader.passes, reader.messages
    started = time.perf_counter()
    for i in range(args.live_changes):
        change(ready[i % len(ready)])
    burst = time.perf_counter() - started
    time.sleep(1.0)  # the reader sends what committed last
    reader.stop()
    print()
    print(f"live Work list          {history.works:,} Work (SQLite; outbox read by the web process)")
    print(
        f"change to message       median {statistics.median(latencies):.1f} ms, worst {max(latencies):.1f} ms "
        f"({args.live_samples} changes, from before the change's transaction to the message received)"
    )
    for size, (ms, count) in renders.items():
        print(
            f"message to fragment     {ms:.1f} ms, {count} queries at {size:,} Work (the rows the list shows)"
        )
    print(
        f"a burst of changes      {args.live_changes:,} commits in {burst:.1f} s sent "
        f"{reader.messages - messages} messages in {reader.passes - passes} reader passes"
    )


def bulk_jobs(args: argparse.Namespace, tmp: str) -> None:
    """Bulk retry of ``--bulk`` parked Work and replay of ``--bulk`` settled Events as jobs, in a
    database of their own: the request's time (it stores the job), then the job run to its end in
    this process as the route loop runs it (statements per target, total time)."""
    import json

    from django.db import connection, transaction
    from django.test import Client

    from causal.clock import system_clock
    from causal.models import Event, RouteState
    from controls.jobs import bulk_job_run
    from routing.models import Disposition, RouteRecord
    from tests.routing.factories import api_token_with_secret
    from worklife.models import Work

    path = f"{tmp}/bulk.sqlite3"
    prepare(path, args.small)  # a history beside the jobs' targets, and the bench user
    n = args.bulk
    with transaction.atomic():
        Work.objects.bulk_create(
            [
                Work(
                    scope="acme",
                    binding="agent",
                    status="ready",
                    failures=5,
                    parked_at=T0,
                    pending_run=True,
                    last_error="attempt 5 failed: boom",
                    created_at=T0,
                    updated_at=T0,
                )
                for _ in range(n)
            ],
            batch_size=1000,
        )
        settled = Event.objects.bulk_create(
            [
                Event(
                    envelope_id=f"settled-{i}",
                    source="bench",
                    type="ops.alert",
                    scope="acme",
                    data={"n": i},
                    accepted_at=T0,
                    route_state=RouteState.ROUTED,
                )
                for i in range(n)
            ],
            batch_size=1000,
        )
        RouteRecord.objects.bulk_create(
            [
                RouteRecord(
                    event=e, policy="unmatched", disposition=Disposition.ROUTED, scope="acme", decided_at=T0
                )
                for e in settled
            ],
            batch_size=1000,
        )
    from django.contrib.auth import get_user_model

    _token, secret = api_token_with_secret(user=get_user_model().objects.get(username="bench"))
    client = Client(headers={"Authorization": f"Bearer {secret}"})
    statements = StatementCounter()

    def timed_post(url: str, body: dict) -> tuple[float, dict]:
        started = time.perf_counter()
        response = client.post(url, json.dumps(body), content_type="application/json")
        elapsed = (time.perf_counter() - started) * 1000
        if response.status_code != 202:
            raise SystemExit(f"{url}: status {response.status_code}: {response.content[:300]!r}")
        return elapsed, response.json()

    def run_job(job: dict) -> tuple[float, int, int]:
        statements.count = 0
        started = time.perf_counter()
        with connection.execute_wrapper(statements):
            done = bulk_job_run(job_id=job["id"], clock=system_clock)
        return time.perf_counter() - started, statements.count, done.succeeded

    client.get("/api/jobs/999999999")  # one untimed request: the first loads the URLconf and views
    print()
    print(f"bulk jobs               {n:,} parked Work and {n:,} settled Events (SQLite, batches of 200)")
    print(f"{'job':<22}{'request':>10}{'run':>10}{'done':>9}{'statements':>12}{'a target':>10}{'per s':>9}")
    retry_ms, retry = timed_post(
        "/api/work/bulk", {"action": "retry", "filter": {"status": "parked"}, "count": n}
    )
    replay_ms, replay = timed_post("/api/events/replay", {"seqs": [e.seq for e in settled], "count": n})
    for name, request_ms, job in (("retry Work", retry_ms, retry), ("replay Events", replay_ms, replay)):
        seconds, count, done = run_job(job)
        print(
            f"{name:<22}{request_ms:>7.0f} ms{seconds:>8.1f} s{done:>9,}{count:>12,}"
            f"{count / max(done, 1):>10.2f}{done / seconds:>9.0f}"
        )
    print(f"request under 1 s        retry {retry_ms < 1000}, replay {replay_ms < 1000}")


class StatementCounter:
    """Counts SQL statements run through Django's connection (an execute wrapper)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, execute, sql, params, many, context):
        self.count += 1
        return execute(sql, params, many, context)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=100, help="The short history (rows of each kind).")
    parser.add_argument("--large", type=int, default=10_000, help="The long history (rows of each kind).")
    parser.add_argument("--repeat", type=int, default=25, help="Requests timed per page and size.")
    parser.add_argument("--live-samples", type=int, default=20, help="Work changes timed to their message.")
    parser.add_argument(
        "--live-changes", type=int, default=10_000, help="Work changes, each committed alone, in the burst."
    )
    parser.add_argument(
        "--bulk", type=int, default=10_000, help="Work retried and Events replayed by the bulk jobs."
    )
    parser.add_argument("--only-bulk", action="store_true", help="Run only the bulk jobs' part.")
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
        if args.only_bulk:
            bulk_jobs(args, tmp)
        else:
            run(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
