"""Site-wide retention: ``manage.py prune`` and the work loop's hourly pass.

Above every app, this module only orders their services, in short transactions of at most
``batch`` Works or Events each so that the route and work loops wait at most one batch for the
write lock (SQLite) or for rows (PostgreSQL):

1. terminal Work ended before the cutoff: routing deletes its route records, then worklife the
   Work and its rows (``worklife.retention``), families from the leaves up;
2. routed Events accepted before the cutoff that nothing keeps: routing deletes their route
   records, then causal the Events, their keys and their roots' pins (``causal.retention``);
   a chain goes from its newest Event up;
3. impact preview runs last written before the cutoff, with their changed Events.

Each step repeats until a batch finds nothing. A batch that meets a concurrent writer (a new
route record naming a Work being deleted, a new child of an Event being deleted: PostgreSQL's
foreign keys refuse the commit) is rolled back and left to the next run.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, transaction

from causal.clock import Clock
from causal.retention import events_delete_in_tx, events_prunable_in_tx
from infra.live import LIVE_RETENTION, live_changes_prune
from infra.words import counted
from routing.retention import RECORD_RELEASES, impact_runs_delete_in_tx, route_records_delete_in_tx
from worklife.retention import works_delete_in_tx, works_prunable_in_tx

logger = logging.getLogger("conduit.retention")

BATCH = 500
# The work loop's retention pass: once an hour (the check each pass is one comparison).
PRUNE_INTERVAL_SECONDS = 3600.0


@dataclass
class PruneCounts:
    """What a prune deleted (or, with ``dry_run``, would delete) before ``cutoff``."""

    cutoff: datetime | None
    dry_run: bool
    rows: Counter = field(default_factory=Counter)
    conflicts: int = 0

    def line(self) -> str:
        if self.cutoff is None:
            return "retention is off (CONDUIT_RETENTION_DAYS=0): nothing pruned"
        verb = "would delete" if self.dry_run else "deleted"
        kinds = ("work", "attempts", "inputs", "intents", "waits", "timers", "subscriptions", "keys")
        parts = [f"{self.rows[k]} {k}" for k in kinds] + [
            f"{self.rows['route_records']} route records",
            counted(self.rows["events"], "Events"),
            counted(self.rows["impact_runs"], "impact previews"),
        ]
        text = f"{verb} before {self.cutoff:%Y-%m-%d %H:%M:%S} UTC: " + ", ".join(parts)
        if self.conflicts:
            text += f"; {self.conflicts} batches met a concurrent writer and were left for the next run"
        return text


class _DryRun(Exception):
    """Rolls a dry run's transaction back."""


def retention_days() -> int:
    """``CONDUIT_RETENTION_DAYS``: 0 keeps everything for ever."""
    days = getattr(settings, "CONDUIT_RETENTION_DAYS", 30)
    if isinstance(days, bool) or not isinstance(days, int) or days < 0:
        raise ValueError(f"CONDUIT_RETENTION_DAYS must be a non-negative integer, got {days!r}")
    return days


def site_prune(
    *, clock: Clock, days: int | None = None, dry_run: bool = False, batch: int = BATCH
) -> PruneCounts:
    """Delete terminal Work and the Events nothing keeps, older than ``days`` (default
    ``CONDUIT_RETENTION_DAYS``; 0: nothing), in batches. ``dry_run`` runs the same deletions in
    one transaction and rolls it back, to count them exactly (it holds the write lock meanwhile)."""
    if not dry_run:
        # The live-update outbox keeps an hour whatever the retention: pages read it within
        # seconds, and a web process's reader prunes it too, but loops and commands write it
        # when no web process runs.
        live_changes_prune(before=clock() - LIVE_RETENTION)
    days = retention_days() if days is None else days
    if days == 0:
        return PruneCounts(cutoff=None, dry_run=dry_run)
    counts = PruneCounts(cutoff=clock() - timedelta(days=days), dry_run=dry_run)
    if dry_run:
        try:
            with transaction.atomic():
                _prune(counts, batch)
                raise _DryRun
        except _DryRun:
            pass
    else:
        _prune(counts, batch)
    logger.info(
        "retention.pruned",
        extra={
            "dry_run": dry_run,
            "cutoff": counts.cutoff.isoformat(),
            "conflicts": counts.conflicts,
            **counts.rows,
        },
    )
    return counts


def _prune(counts: PruneCounts, batch: int) -> None:
    cutoff = counts.cutoff
    while _batch(counts, lambda: _works_batch(cutoff, batch, counts.rows)):
        pass
    while _batch(counts, lambda: _events_batch(cutoff, batch, counts.rows)):
        pass
    while _batch(counts, lambda: _impact_runs_batch(cutoff, batch, counts.rows)):
        pass


def _batch(counts: PruneCounts, step) -> bool:
    """One batch in its own transaction: whether it deleted anything."""
    try:
        with transaction.atomic():
            return step()
    except DatabaseError:
        # A concurrent writer referred to a row of the batch: what it meant is left for next time.
        logger.warning("retention.batch_conflict", exc_info=True)
        counts.conflicts += 1
        return False


def _works_batch(cutoff: datetime, batch: int, rows: Counter) -> bool:
    work_ids = works_prunable_in_tx(cutoff=cutoff, limit=batch)
    if not work_ids:
        return False
    rows["route_records"] += route_records_delete_in_tx(work_ids=work_ids)
    rows.update(works_delete_in_tx(work_ids=work_ids))
    return True


def _events_batch(cutoff: datetime, batch: int, rows: Counter) -> bool:
    seqs = events_prunable_in_tx(cutoff=cutoff, limit=batch, releases=RECORD_RELEASES)
    if not seqs:
        return False
    rows["route_records"] += route_records_delete_in_tx(event_seqs=seqs)
    rows["events"] += events_delete_in_tx(seqs=seqs)
    return True


def _impact_runs_batch(cutoff: datetime, batch: int, rows: Counter) -> bool:
    runs, changes = impact_runs_delete_in_tx(cutoff=cutoff, limit=batch)
    rows["impact_runs"] += runs
    rows["impact_changes"] += changes
    return runs > 0
