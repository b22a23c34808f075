"""Trace and impact preview timings beside an in-process floor, in one run.

    python bench/trace.py [--events 1000] [--traces 200] [--routes 50]

Sets up Django on a fresh SQLite database in a temporary directory (the shipped settings),
applies a configuration of two scopes, ``bench`` and ``quiet``, of ``--routes`` match routes
each, accepts ``--events`` Events spread over their routes (one in five in ``bench``; a third of
them start Work, the rest queue on it) and routes them all. Then it times, in this process:

- one trace of an Event only ``bench``'s last route matches (every route is asked), median of
  ``--traces``, in a configuration of that scope alone (target: at most 20 ms);
- the impact preview over the last ``--events`` Events (target: at most 5 s) of a candidate
  that drops every fifth route of ``bench`` (the routes its Events match), of one that does so
  in both scopes, and of the latter traced exhaustively (every Event traced against both
  configurations: the worst case, where every Event's routes answer otherwise);

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


SCOPES = ("bench", "quiet")


def document(
    routes: int, *, drop_every: int = 0, changed: tuple[str, ...] = (), scopes: tuple[str, ...] = SCOPES
) -> str:
    """Two scopes of ``routes`` routes each; in the ``changed`` scopes ``drop_every`` leaves
    out every Nth route from the first (r00, r05, …: the routes ``bench``'s Events match)."""
    lines = ["version: 1", "scopes:"]
    for scope in scopes:
        lines += [f"  - path: {scope}", "    bindings:", "      agent: {}", "    routes:"]
        for i in range(routes):
            if scope in changed and drop_every and i % drop_every == 0:
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
    """Events round-robin over the routes, one in five in scope ``bench``, the others in
    ``quiet``; each key is used three times (start, queue, queue); no two bodies are alike."""
    return [
        {
            "specversion": "1.0",
            "id": f"b{i}",
            "source": "bench",
            "type": f"t{i % routes}.happened",
            "scope": "bench" if i % 5 == 0 else "quiet",
            "data": {"n": i // (routes * 3), "i": i},
        }
        for i in range(events)
    ]


def run(args: argparse.Namespace) -> None:
    from causal.clock import system_clock
    from routing.acceptance.services import events_accept
    from routing.config.selectors import load_configuration
    from routing.config.services import config_apply, config_candidate
    from routing.engine.loop import RouteLoop
    from routing.engine.options import RouterOptions
    from routing.extension import freeze
    from routing.handlers.registry import handler_class
    from routing.setup.impact import impact_preview
    from routing.setup.trace import trace

    # One trace on a configuration of one 50-route scope: an Event only the last route
    # matches, so every route is asked.
    alone = config_apply(document=document(args.routes, scopes=("bench",)), clock=system_clock)
    last = {"source": "bench", "type": f"t{args.routes - 1}.happened", "scope": "bench", "data": {"n": 999}}
    trace(payload=last, clock=system_clock)  # warm-up
    timings = []
    cpu_started = time.process_time()
    for _ in range(args.traces):
        started = time.perf_counter()
        result = trace(payload=last, clock=system_clock)
        timings.append(time.perf_counter() - started)
    trace_cpu = (time.process_time() - cpu_started) / args.traces
    assert result.route == f"r{args.routes - 1:02d}", result
    median = statistics.median(timings)
    scope = load_configuration(alone).scope("bench")

    config_apply(document=document(args.routes), clock=system_clock)
    offered = payloads(args.events, args.routes)
    for start in range(0, len(offered), 1000):
        events_accept(payloads=offered[start : start + 1000], clock=system_clock)
    loop = RouteLoop(clock=system_clock, options=RouterOptions(batch_size=200))
    while not loop.step().empty:
        pass
    one_scope = config_candidate(
        document=document(args.routes, drop_every=5, changed=("bench",)), clock=system_clock
    )
    every_scope = config_candidate(
        document=document(args.routes, drop_every=5, changed=SCOPES), clock=system_clock
    )

    # The floor of one trace: the routes' match calls alone.
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

    # Impact previews over the last --events Events: a candidate that changes the routes of
    # scope bench (one Event in five; the others are not looked at), one that changes both
    # scopes (Events whose routes answer alike are not traced), and the worst case: every
    # Event traced against both configurations (exhaustive, as if every Event could change).
    previews = {}
    for name, candidate, exhaustive in (
        ("one scope changed", one_scope, False),
        ("every scope changed", every_scope, False),
        ("every Event traced", every_scope, True),
    ):
        started, cpu_started = time.perf_counter(), time.process_time()
        report = impact_preview(
            candidate=candidate, clock=system_clock, events=args.events, exhaustive=exhaustive
        )
        previews[name] = (time.perf_counter() - started, time.process_time() - cpu_started, report)

    class Recent:
        def __init__(self, payload: dict) -> None:
            self.source, self.type, self.subject, self.scope = "bench", payload["type"], "", "bench"
            self.data = freeze(payload["data"])

    recent = [Recent(p) for p in offered[-args.events :]]  # the worst case's floor: all of them
    started = time.perf_counter()
    for event in recent:
        match_all(event)
        match_all(event)
    impact_floor = time.perf_counter() - started

    print(
        f"scopes                 one trace: bench alone, {args.routes} routes; previews: bench and quiet, "
        f"{args.routes} routes each, {args.events} Events accepted and routed"
    )
    load = os.getloadavg()[0]
    print(
        f"machine                {os.cpu_count()} CPUs, load average {load:.1f} (wall times include waiting for a CPU)"
    )
    print(
        f"one trace (median)     {median * 1000:.2f} ms over {args.traces}, {trace_cpu * 1000:.2f} ms CPU (mean)"
        "   (target <= 20 ms)"
    )
    print(f"  floor: match calls   {floor * 1000:.3f} ms   ratio trace/floor {median / floor:.0f}")
    for name, (seconds, cpu, report) in previews.items():
        print(
            f"impact preview         {seconds:.2f} s ({cpu:.2f} s CPU) over {report.examined} Events, {name}: "
            f"{report.traced} traced, {report.changed} change in {len(report.groups)} groups   (target <= 5 s)"
        )
        print(f"  per traced Event     {seconds / max(report.traced, 1) * 1000:.2f} ms (two traces)")
    worst = previews["every Event traced"][0]
    print(
        f"  floor: match calls   {impact_floor:.3f} s (every Event, both configurations)   ratio worst/floor "
        f"{worst / impact_floor:.0f}"
    )


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
