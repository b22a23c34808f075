"""Instructions per routed Event, counted by callgrind: a figure the machine's noise does not move.

    python bench/route_instructions.py [--n 5000] [--batch-size 500] [--keep DIR]

Prepares N accepted Events as ``bench/route_throughput.py`` does (its workload, seed and
configuration), then runs that bench's routing process twice under valgrind's callgrind, side by
side: once routing the Events, once on a copy routed already (start-up, the router's build and
one empty pass). The difference is the routing's work; it is printed per routed Event and split
by where it ran: the interpreter (libpython and the ``_sqlite3`` and ``_json`` modules), SQLite's
library, the C library (allocation, locks, copies) and the dynamic loader (thread-local lookups
of the interpreter's state). Wall-clock figures here move by a third from one run to the next
with the machine's load; instruction counts stay within about half a percent (the handler pool's
threads and the heartbeat's clock still vary the passes a little), so two revisions compare in
one run each: run this at each. Instructions are not time: a row written waits for the disk
(``synchronous=FULL``), which no count shows, and a cache miss costs more than an instruction.
Needs valgrind (Debian's package); about a minute for 5,000 Events on a 2-core machine.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from route_throughput import copy_database, sqlite_env  # this folder's bench: its processes

BENCH = Path(__file__).resolve().parent / "route_throughput.py"

# Where an object's instructions are counted, by the file name of the object callgrind names.
PLACES = (
    ("interpreter", re.compile(r"libpython|/python3?[.\d]*$|_sqlite3\.|_json\.|_datetime\.|\.cpython-")),
    ("SQLite", re.compile(r"libsqlite3")),
    ("C library", re.compile(r"libc\.so|libm\.so")),
    ("dynamic loader", re.compile(r"ld-linux")),
)


def place_of(obj: str) -> str:
    name = obj.rsplit("/", 1)[-1]
    for place, pattern in PLACES:
        if pattern.search(name) or pattern.search(obj):
            return place
    return "other"


def self_costs(path: str) -> collections.Counter:
    """Each object's own instructions in a callgrind output file (one event, Ir): every cost
    line counted under the object it belongs to, except the inclusive cost that follows a
    ``calls=`` line (that is the callee's, counted where the callee is)."""
    names: dict[str, str] = {}
    costs: collections.Counter = collections.Counter()
    current = "other"
    after_call = False
    with open(path, encoding="utf-8", errors="replace") as out:
        for line in out:
            if line.startswith("ob="):
                current = _name(names, line[3:].strip())
                continue
            if line.startswith(("cob=", "cfi=", "cfn=", "cfl=")):
                if line.startswith("cob="):
                    _name(names, line[4:].strip())  # defines a compressed name for later lines
                continue
            if line.startswith("calls="):
                after_call = True
                continue
            if line[:1].isdigit() or line[:1] in "+-*":
                if after_call:
                    after_call = False
                    continue
                fields = line.split()
                if len(fields) >= 2:
                    costs[current] += int(fields[-1])
    return costs


def _name(names: dict[str, str], spec: str) -> str:
    """callgrind's name compression: ``(N) name`` defines N, ``(N)`` refers to it."""
    match = re.match(r"\((\d+)\)\s*(.*)", spec)
    if not match:
        return spec
    number, name = match.groups()
    if name:
        names[number] = name
    return names.get(number, spec)


def totals(path: str) -> int:
    with open(path, encoding="utf-8", errors="replace") as out:
        for line in out:
            if line.startswith(("totals:", "summary:")):
                return int(line.split()[1])
    raise SystemExit(f"{path}: callgrind wrote no totals")


def counted_route(tmp: str, database: str, batch_size: int, name: str) -> tuple[dict, str]:
    """Route ``database`` under callgrind; the bench's figures and the output file."""
    out = f"{tmp}/{name}.callgrind"
    env = {**sqlite_env(database, f"{tmp}/{name}-var"), "PYTHONHASHSEED": "0"}
    os.makedirs(env["CONDUIT_VAR_DIR"], exist_ok=True)
    command = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        sys.executable,
        str(BENCH),
        "--_route",
        str(batch_size),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"routing under callgrind failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1]), out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=5000, help="Events to route (default 5,000).")
    parser.add_argument(
        "--batch-size", type=int, default=500, help="Events per router pass (default 500, as route_loop)."
    )
    parser.add_argument(
        "--keep",
        default="",
        metavar="DIR",
        help="Keep the two callgrind output files in DIR (routing.callgrind, baseline.callgrind) "
        "for callgrind_annotate.",
    )
    args = parser.parse_args()
    if args.n < 1 or args.batch_size < 1:
        parser.error("--n and --batch-size must be at least 1")
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    tmp = tempfile.mkdtemp(prefix="conduit-instructions-")
    try:
        prepared = f"{tmp}/prepared.sqlite3"
        env = sqlite_env(prepared, tmp)
        print(f"preparing {args.n:,} accepted Events ...", flush=True)
        subprocess.run([sys.executable, str(BENCH), "--_prepare", str(args.n)], env=env, check=True)
        copy_database(prepared, f"{tmp}/route.sqlite3")
        copy_database(prepared, f"{tmp}/empty.sqlite3")
        # The baseline's database is routed first (not counted), so its counted run has nothing
        # to route: start-up, the router's build and an empty pass.
        subprocess.run(
            [sys.executable, str(BENCH), "--_route", str(args.batch_size)],
            env=sqlite_env(f"{tmp}/empty.sqlite3", tmp),
            check=True,
            capture_output=True,
        )
        print("counting under callgrind (both runs side by side) ...", flush=True)
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=2) as pool:
            routing = pool.submit(counted_route, tmp, f"{tmp}/route.sqlite3", args.batch_size, "routing")
            baseline = pool.submit(counted_route, tmp, f"{tmp}/empty.sqlite3", args.batch_size, "baseline")
            (figures, routing_out), (_, baseline_out) = routing.result(), baseline.result()
        seconds = time.perf_counter() - started
        routed = figures["routed"]
        if routed != args.n:
            raise SystemExit(f"routed {routed} of {args.n} Events")
        routing_costs, baseline_costs = self_costs(routing_out), self_costs(baseline_out)
        for path, costs in ((routing_out, routing_costs), (baseline_out, baseline_costs)):
            if sum(costs.values()) != totals(path):
                raise SystemExit(f"{path}: the objects' costs do not add up to callgrind's totals")
        places: collections.Counter = collections.Counter()
        for obj in set(routing_costs) | set(baseline_costs):
            places[place_of(obj)] += routing_costs[obj] - baseline_costs[obj]
        whole = sum(places.values())
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            for path in (routing_out, baseline_out):
                shutil.copy(path, args.keep)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"events                 {routed:,} routed (batch {args.batch_size}; counted in {seconds:.0f} s)")
    print(f"instructions           {whole / routed:,.0f} a routed Event ({whole:,} in all)")
    for place, count in places.most_common():
        print(f"  {place:<20} {count / routed:>9,.0f}   {count / whole:6.1%}")
    print(f"SQL per routed Event   {figures['statements'] / routed:.2f}")


if __name__ == "__main__":
    main()
