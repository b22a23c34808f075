"""Trace and impact preview timings beside an in-process floor, in one run.

    python bench/trace.py [--events 1000] [--traces 200] [--routes 50]

Sets up Django on a fresh SQLite database in a temporary directory (the shipped settings),
applies a configuration whose scope ``bench`` has ``--routes`` match routes, accepts
``--events`` Events spread over them (a third of them start Work, the rest queue on it) and
routes them all. Then it times, in this process:

- one trace of an Event only the scope's last route matches (every route is asked), median
  of ``--traces`` (target: at most 20 ms);
- an impact preview of a candidate that drops every fifth route, over the last ``--events``
  Events (target: at most 5 s);

and beside them the floor: the same routes' ``match`` calls for the same Events with no
database, no handler pool and no decision (what any trace must at least do). Prints the
figures and the ratios to the floor.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def document(routes: int, *, drop_every: int = 0) -> str:
    """A document with one scope of ``routes`` routes; ``drop_every`` leaves every Nth out."""
    lines = ["version: 1", "scopes:", "  - path: bench", "    bindings:", "      agent: {}", "    routes:"]
    for i in range(routes):
        if drop_every and i % drop_every == drop_every - 1:
            continue
        lines += [
            f"      - slot: r{i:02d}",
            "        handler: match",
            f'        params: {{type: "t{i}.*", keys: ["k{i}:{{data.n}}"]}}',
            "        binding: agent",
            "        policy: queue",
        ]
    return "\n".join(lines) + "\n"


def setup_django(tmp: str) -> None:
    os.environ["DATABASE_URL"] = f"sqlite:///{tmp}/conduit.sqlite3"
    os.environ["CONDUIT_VAR_DIR"] = tmp
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "conduit_site.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ["DEBUG"] = "false"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def payloads(events: int, routes: int) -> list[dict]:
    """Events round-robin over the routes; each key is used three times (start, queue, queue)."""
    return [
        {
            "specversion": "1.0",
            "id": f"b{i}",
            "source": "bench",
            "type": f"t{i % routes}.happened",
            "scope": "bench",
            "data": {"n": i // (routes * 3)},
        }
        for i in range(events)
    ]


def run(args: argparse.Namespace) -> None:
    from causal.clock import system_clock
    from routing.config import load_configuration
    from routing.extension import freeze
    from routing.impact import impact_preview
    from routing.loop import RouteLoop
    from routing.registry import handler_class
    from routing.router import RouterOptions
    from routing.services import config_apply, config_candidate, events_accept
    from routing.trace import trace

    live = config_apply(document=document(args.routes), clock=system_clock)
    offered = payloads(args.events, args.routes)
    for start in range(0, len(offered), 1000):
        events_accept(payloads=offered[start : start + 1000], clock=system_clock)
    loop = RouteLoop(clock=system_clock, options=RouterOptions(batch_size=200))
    while not loop.step().empty:
        pass
    candidate = config_candidate(document=document(args.routes, drop_every=5), clock=system_clock)

    # One trace: an Event only the last route matches, so every route is asked.
    last = {"source": "bench", "type": f"t{args.routes - 1}.happened", "scope": "bench", "data": {"n": 999}}
    trace(payload=last, clock=system_clock)  # warm-up
    timings = []
    for _ in range(args.traces):
        started = time.perf_counter()
        result = trace(payload=last, clock=system_clock)
        timings.append(time.perf_counter() - started)
    assert result.route == f"r{args.routes - 1:02d}", result
    median = statistics.median(timings)

    # The floor of one trace: the routes' match calls alone.
    scope = load_configuration(live).scope("bench")
    handler = handler_class("match")()

    class Snapshot:
        source, type, subject, scope, data = "bench", last["type"], "", "bench", freeze(last["data"])

    def match_all(event) -> None:
        for route in scope.routes:
            if handler.match(event, route.info()).matched:
                return

    floor_timings = []
    for _ in range(args.traces):
        started = time.perf_counter()
        match_all(Snapshot)
        floor_timings.append(time.perf_counter() - started)
    floor = statistics.median(floor_timings)

    # Impact preview over the last --events Events.
    started = time.perf_counter()
    report = impact_preview(candidate=candidate, clock=system_clock, events=args.events)
    impact_seconds = time.perf_counter() - started

    class Recent:
        def __init__(self, payload: dict) -> None:
            self.source, self.type, self.subject, self.scope = "bench", payload["type"], "", "bench"
            self.data = freeze(payload["data"])

    recent = [Recent(p) for p in offered[-args.events :]]
    started = time.perf_counter()
    for event in recent:
        match_all(event)
        match_all(event)
    impact_floor = time.perf_counter() - started

    print(f"scope                  bench: {args.routes} routes; {args.events} Events accepted and routed")
    print(f"one trace (median)     {median * 1000:.2f} ms over {args.traces}   (target <= 20 ms)")
    print(f"  floor: match calls   {floor * 1000:.3f} ms   ratio trace/floor {median / floor:.0f}")
    print(
        f"impact preview         {impact_seconds:.2f} s over {report.examined} Events, {report.changed} change "
        f"in {len(report.groups)} groups   (target <= 5 s)"
    )
    print(
        f"  floor: match calls   {impact_floor:.3f} s (both configurations)   ratio preview/floor "
        f"{impact_seconds / impact_floor:.0f}"
    )
    print(f"  per Event            {impact_seconds / max(report.examined, 1) * 1000:.2f} ms (two traces)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--events", type=int, default=1000, help="Events accepted and previewed (default 1000)."
    )
    parser.add_argument("--traces", type=int, default=200, help="Single traces timed (default 200).")
    parser.add_argument("--routes", type=int, default=50, help="Routes in the scope (default 50).")
    args = parser.parse_args()
    if args.events < 1 or args.traces < 1 or args.routes < 5:
        parser.error("--events and --traces must be at least 1, --routes at least 5")
    tmp = tempfile.mkdtemp(prefix="conduit-trace-bench-")
    try:
        setup_django(tmp)
        run(args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
