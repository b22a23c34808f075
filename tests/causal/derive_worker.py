"""A separate process deriving Events on the test database (a "restarted" runtime).

Usage: ``derive_worker.py --at ISO --parent SEQ [--count N] [--prefix P] [--start-at EPOCH]
[--new-root NAME]``. Prints one JSON object: how many were accepted and refused, and the
limits the process was configured with.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "conduit_site.settings")

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402

from causal.limits import Causal, CausalRefused  # noqa: E402
from causal.models import Event  # noqa: E402
from causal.services import Envelope, event_accept_in_tx  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description="Derive Events under one parent in a separate process.")
    parser.add_argument("--at", required=True, help="The fixed clock time (ISO 8601, aware).")
    parser.add_argument("--parent", type=int, help="The seq of the parent Event.")
    parser.add_argument("--new-root", default="", help="Accept a new root with this id and derive under it.")
    parser.add_argument("--count", type=int, default=1, help="How many children to derive.")
    parser.add_argument("--chain", action="store_true", help="Derive each child from the previous one.")
    parser.add_argument("--prefix", default="worker", help="Prefix of the derived Events' ids.")
    parser.add_argument("--start-at", type=float, default=0.0, help="Wall-clock barrier (epoch seconds).")
    args = parser.parse_args()

    now = datetime.fromisoformat(args.at)
    causal = Causal(lambda: now)
    if args.new_root:
        from django.db import transaction

        with transaction.atomic():
            parent = event_accept_in_tx(
                envelope=Envelope(id=args.new_root, source="tests.worker", type="test.root", scope="acme"),
                clock=lambda: now,
            ).event
    else:
        parent = Event.objects.get(seq=args.parent)
    # A start barrier so that several workers derive at the same time.
    while time.time() < args.start_at:
        time.sleep(0.005)
    accepted, refused, replayed, depths = 0, 0, 0, []
    for i in range(args.count):
        envelope = Envelope(id=f"{args.prefix}-{i}", source="tests.worker", type="test.derived", scope="acme")
        try:
            result = causal.derive(parent=parent, envelope=envelope)
        except CausalRefused:
            refused += 1
            continue
        event = result.event
        if not result.created:
            replayed += 1
            continue
        accepted += 1
        depths.append(event.depth)
        if args.chain:
            parent = event
    connection.close()
    print(
        json.dumps(
            {
                "accepted": accepted,
                "refused": refused,
                "replayed": replayed,
                "depths": depths,
                "root_seq": parent.root_seq,
                "configured": [causal.limits.max_depth, causal.limits.rate_per_minute],
            }
        )
    )


if __name__ == "__main__":
    main()
