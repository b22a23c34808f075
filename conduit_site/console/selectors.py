"""Reads of the console's own: the home page's summary of the router, the work loops and the
live configuration."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from causal.selectors import unrouted_event_count
from routing.config.selectors import live_generation
from routing.models import Generation
from worklife.selectors import work_counts


@dataclass(frozen=True, slots=True)
class ConsoleSummary:
    """What the console's home page shows."""

    unrouted_events: int
    work_by_status: dict[str, int]
    # What the work_loops are doing: Work running an attempt, and ready Work parked after
    # too many failures (an operator retries or cancels it).
    work_running: int
    work_parked: int
    live_generation: Generation | None


def console_summary(*, now: datetime | None = None) -> ConsoleSummary:
    """Counts of unrouted Events, of Work by state (parked and backing off apart from ready)
    and the live generation."""
    counts = work_counts(now=now)
    return ConsoleSummary(
        unrouted_events=unrouted_event_count(),
        work_by_status=counts.by_state,
        work_running=counts.running,
        work_parked=counts.parked,
        live_generation=live_generation(),
    )
