"""The acceptance ledger's metrics: Events accepted (by scope) and causal refusals (by kind).
Label values come from the configuration (scopes) and fixed lists (refusal kinds), never from an
Event's own fields: their number is bounded (docs/operations.md)."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable

from django.db import transaction

from infra.metrics import Counter, enabled

EVENTS_ACCEPTED = Counter(
    "conduit_events_accepted_total",
    "Events accepted (stored; a repeated (source, id) is not counted again), by scope.",
    ("scope",),
)
CAUSAL_REFUSALS = Counter(
    "conduit_causal_refusals_total",
    "Derived Events the causal limits refused (depth, rate, missing or conflicting parent...), by kind.",
    ("kind",),
)


def events_accepted_on_commit(scopes: Iterable[str]) -> None:
    """Count Events accepted in the current transaction, once it commits (an acceptance rolled
    back, or a derivation's savepoint, counts nothing)."""
    if not enabled():
        return
    counts = Tally((scope,) for scope in scopes)
    transaction.on_commit(lambda: EVENTS_ACCEPTED.inc_counts(counts), robust=True)


def causal_refused(kind: str) -> None:
    """Count one refusal of the causal limits."""
    CAUSAL_REFUSALS.inc(1, kind)
