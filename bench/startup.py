"""Start-up time of ``manage.py events get N`` beside Django's own floor, in one run.

    python bench/startup.py [--runs 7]

Times (wall clock, fresh interpreter each run, bytecode cached by a first unmeasured run)
``manage.py events get 1`` (one demo Event, the demo configuration) in a temporary var folder, and the
floor every command pays: an interpreter that only runs ``django.setup()`` with Conduit's
settings. Prints the minimum and median of each, their ratio, and whether twisted or daphne
were imported (``-X importtime``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLOOR = "import django; django.setup()"


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, check=False)
    return time.perf_counter() - started


def imported(argv: list[str], env: dict[str, str]) -> set[str]:
    result = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:]],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    names = set()
    for line in result.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs of each command")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="conduit-startup-") as var:
        env = {**os.environ, "CONDUIT_VAR_DIR": var, "DJANGO_SETTINGS_MODULE": "conduit_site.settings"}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.pop("DATABASE_URL", None)
        for setup in (
            ["migrate", "-v0"],
            ["config", "apply", "demo/conduit.yaml"],
            ["events", "accept", "demo/events/pr-opened.json"],
        ):
            subprocess.run(
                [sys.executable, "manage.py", *setup], cwd=ROOT, env=env, check=True, capture_output=True
            )
        command = [sys.executable, "manage.py", "events", "get", "1"]
        floor = [sys.executable, "-c", FLOOR]
        for argv in (command, floor):  # compile and cache bytecode; not measured
            timed(argv, env)
        rows = {}
        for name, argv in (("events get", command), ("floor (django.setup)", floor)):
            times = [timed(argv, env) for _ in range(args.runs)]
            rows[name] = times
            print(f"{name:24s} min {min(times):.3f} s  median {statistics.median(times):.3f} s")
        ratio = statistics.median(rows["events get"]) / statistics.median(rows["floor (django.setup)"])
        print(f"ratio (median, events get / floor): {ratio:.2f}")
        modules = imported(command, env)
        print("twisted imported:", "twisted" in modules, " daphne imported:", "daphne" in modules)


if __name__ == "__main__":
    main()
