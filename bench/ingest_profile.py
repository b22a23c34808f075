"""In-process cost of one acceptance (``POST /api/events``) beside a bare durable INSERT.

    python bench/ingest_profile.py [--requests 500] [--profile 25]

On a fresh SQLite database (WAL, synchronous=FULL) in a temporary var folder, sends
``--requests`` single CloudEvents through Django's full request handler (every middleware, the
token check, the view) with Django's test Client, in this process, and measures per request:

- CPU time (process time, so a loaded machine changes it little) and wall time;
- the SQL queries it runs (``CaptureQueriesContext``).

The floor, in the same run and process: the same bodies each stored with one INSERT in its own
``transaction.atomic()`` on the same database (the durable write an acceptance cannot avoid).
Prints µs per request for both and their ratio; ``--profile N`` prints the N functions of most
cumulative time of a cProfile over the acceptances.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from ingest_throughput import DOCUMENT, event  # noqa: E402


def setup(var: str) -> str:
    """Configure Django on a fresh database in ``var``; returns an operator's token secret."""
    os.environ["CONDUIT_VAR_DIR"] = var
    os.environ["DATABASE_URL"] = f"sqlite:///{var}/conduit.sqlite3"
    os.environ["DJANGO_SETTINGS_MODULE"] = "conduit_site.settings"
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import transaction

    from causal.clock import system_clock
    from routing.access.roles import Role, role_assign_in_tx
    from routing.access.services import api_token_create
    from routing.config.services import config_apply

    call_command("migrate", verbosity=0)
    config_apply(document=DOCUMENT, clock=system_clock)
    with transaction.atomic():
        user = get_user_model().objects.create_user("bench")
        role_assign_in_tx(user=user, role=Role.OPERATOR)
    return api_token_create(user=user, name="bench", clock=system_clock).secret


def accept_all(bodies: list[bytes], token: str) -> tuple[float, float, int]:
    """POST each body; returns CPU s, wall s and the number of queries."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    queries = 0
    cpu, wall = time.process_time(), time.perf_counter()
    for body in bodies:
        with CaptureQueriesContext(connection) as captured:
            response = client.post("/api/events", body, content_type="application/cloudevents+json")
        if response.status_code != 201:
            raise SystemExit(f"expected 201, got {response.status_code}: {response.content[:300]!r}")
        queries += len(captured)
    return time.process_time() - cpu, time.perf_counter() - wall, queries


def insert_all(bodies: list[bytes]) -> tuple[float, float]:
    """Store each body with one INSERT in its own transaction; returns CPU s and wall s."""
    from django.db import connection, transaction

    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS floor (id INTEGER PRIMARY KEY, body BLOB NOT NULL)")
    cpu, wall = time.process_time(), time.perf_counter()
    for body in bodies:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("INSERT INTO floor (body) VALUES (%s)", [body])
    return time.process_time() - cpu, time.perf_counter() - wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500, help="acceptances to send (default 500)")
    parser.add_argument(
        "--profile", type=int, default=0, metavar="N", help="print the N functions of most cumulative time"
    )
    args = parser.parse_args()
    n = args.requests
    with tempfile.TemporaryDirectory(prefix="conduit-profile-") as var:
        token = setup(var)
        bodies = [json.dumps(event(i, "warm")).encode() for i in range(50)]
        accept_all(bodies, token)
        insert_all(bodies)
        bodies = [json.dumps(event(i, "run")).encode() for i in range(n)]
        floor_cpu, floor_wall = insert_all(bodies)
        profiler = cProfile.Profile() if args.profile else None
        if profiler:
            profiler.enable()
        cpu, wall, queries = accept_all(bodies, token)
        if profiler:
            profiler.disable()
    us = 1e6 / n
    print(f"{n} acceptances in process (Django test Client, every middleware)")
    print(
        f"{'floor: one INSERT per transaction':40s} CPU {floor_cpu * us:7.0f} µs  wall {floor_wall * us:7.0f} µs"
    )
    print(
        f"{'Conduit: POST /api/events':40s} CPU {cpu * us:7.0f} µs  wall {wall * us:7.0f} µs"
        f"  {queries / n:.1f} queries/request"
    )
    print(f"{'ratio Conduit / floor':40s} CPU {cpu / floor_cpu:7.1f} ×   wall {wall / floor_wall:7.1f} ×")
    if profiler:
        if args.profile:
            print("(cProfile adds its own overhead to the figures above)")
        pstats.Stats(profiler, stream=sys.stdout).sort_stats(
            os.environ.get("PROFILE_SORT", "cumulative")
        ).print_stats(args.profile)


if __name__ == "__main__":
    main()
