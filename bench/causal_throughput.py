"""Derived acceptance under the causal limits beside plain root acceptance, in one run.

    python bench/causal_throughput.py [--n 2000] [--block 50] [--synchronous FULL]

Sets up Django on a fresh SQLite database in a temporary directory (the shipped settings:
WAL, ``synchronous=FULL``, ``BEGIN IMMEDIATE``), migrates, then times, one transaction per
Event as a caller would commit them:

- plain: ``event_accept_in_tx`` of new roots (what ingress does, without its parsing);
- derived, one root: ``Causal.derive`` of N children of one root (rate limit raised so
  nothing is refused), every one checking depth, the pin and the root's bucket;
- derived, many roots: ``Causal.derive`` of one child under each of N roots (every one
  also pins its root's limits and opens its bucket: the worst case).

The phases take turns in blocks (so a busy machine's load falls on all of them alike); prints
Events/s and SQL statements per Event for each, and the overhead of the limit check over plain
acceptance (target: at most +30% time per Event).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def setup_django(database_url: str, var_dir: str, synchronous: str) -> None:
    """Configure Django for a private database and migrate it."""
    os.environ["DATABASE_URL"] = database_url
    os.environ["CONDUIT_VAR_DIR"] = var_dir
    os.environ["SQLITE_SYNCHRONOUS"] = synchronous
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="Acceptances per phase (default 2000).")
    parser.add_argument(
        "--block", type=int, default=50, help="Events per phase before the next phase's turn (default 50)."
    )
    parser.add_argument(
        "--synchronous",
        default="FULL",
        choices=["OFF", "NORMAL", "FULL"],
        help="SQLite synchronous setting (default FULL, as shipped).",
    )
    parser.add_argument("--keep", action="store_true", help="Keep the temporary directory and print it.")
    args = parser.parse_args()
    if args.n < 1 or args.block < 1:
        parser.error("--n and --block must be at least 1")

    tmp = tempfile.mkdtemp(prefix="conduit-causal-bench-")
    try:
        setup_django(f"sqlite:///{tmp}/conduit.sqlite3", tmp, args.synchronous)
        run(args)
    finally:
        if args.keep:
            print(f"database kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def run(args: argparse.Namespace) -> None:
    from django.db import connection, transaction

    from causal.clock import system_clock
    from causal.limits import Causal, Limits
    from causal.services import Envelope, event_accept_in_tx

    n, block = args.n, args.block
    causal = Causal(system_clock, Limits(max_depth=32, rate_per_minute=n * 10))

    def envelope(name: str) -> Envelope:
        return Envelope(
            id=name, source="bench", type="bench.event", scope="bench", data={"n": name, "text": "x" * 200}
        )

    with transaction.atomic():
        one_root = event_accept_in_tx(envelope=envelope("one-root"), clock=system_clock).event
        roots = [
            event_accept_in_tx(envelope=envelope(f"root-{i}"), clock=system_clock).event for i in range(n)
        ]

    def plain(i: int) -> None:
        with transaction.atomic():
            event_accept_in_tx(envelope=envelope(f"plain-{i}"), clock=system_clock)

    def derived_one_root(i: int) -> None:
        causal.derive(parent=one_root, envelope=envelope(f"one-{i}"))

    def derived_many_roots(i: int) -> None:
        causal.derive(parent=roots[i], envelope=envelope(f"many-{i}"))

    phases: dict[str, Callable[[int], None]] = {
        "plain root acceptance": plain,
        "derived, one root": derived_one_root,
        "derived, many roots": derived_many_roots,
    }
    seconds = dict.fromkeys(phases, 0.0)
    statements = dict.fromkeys(phases, 0)
    # The phases take turns in blocks, so that a shared machine's load drifts over all of
    # them alike rather than over whichever phase happened to run then.
    for first in range(0, n, block):
        indexes = range(first, min(first + block, n))
        for name, phase in phases.items():
            counter = StatementCounter()
            with connection.execute_wrapper(counter):
                start = time.perf_counter()
                for i in indexes:
                    phase(i)
                seconds[name] += time.perf_counter() - start
            statements[name] += counter.count

    rates = {name: n / seconds[name] for name in phases}
    plain_rate = rates["plain root acceptance"]
    print(f"SQLite synchronous={args.synchronous}, N={n} Events per phase, interleaved in blocks of {block}")
    for name in phases:
        print(f"{name:<24} {rates[name]:10,.0f} Events/s  {statements[name] / n:5.1f} SQL statements/Event")
    for name in ("derived, one root", "derived, many roots"):
        overhead = plain_rate / rates[name] - 1
        print(
            f"limit check overhead, {name.split(', ')[1]:<10} {overhead:+6.0%} time per Event (target <= +30%)"
        )


if __name__ == "__main__":
    main()
