"""Writes: a window's settlements, written with set-based statements at the end of the commit."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from causal.limits import Causal, refuse
from causal.models import Event, EventKey
from infra.bulk import bulk_insert
from infra.queries import (
    update_rows,
)
from routing.engine.decide import (
    INPUT_EFFECTS,
    Decision,
    Reason,
)
from routing.engine.evaluate import (
    Evaluation,
)
from routing.engine.failures import (
    RouteFailure,
    failure_put_in_tx,
    failures_forget_in_tx,
)
from routing.engine.live import publish_routed
from routing.engine.settle import Bridge, Settlement
from routing.extension import EventSnapshot
from routing.models import Disposition, RateLimitTake, RouteRecord
from worklife.intake import (
    inputs_add_in_tx,
    intents_record_in_tx,
    keys_attach_in_tx,
    works_start_in_tx,
    works_touch_in_tx,
)
from worklife.waits import (
    wait_block_in_tx,
    wait_time_out_in_tx,
    wait_wake_in_tx,
    wake_bridge_envelope,
)

# A settled Event's disposition, as its route record stores it (read once, not through the
# enum's descriptor for every Event).
_ROUTED, _FAILED = Disposition.ROUTED.value, Disposition.FAILED.value


@dataclass
class Writes:
    """The window's effects, written with set-based statements at the end of the commit.

    Rows are plain lists inserted with one statement per table (:func:`infra.bulk.bulk_insert`: ``INSERT …
    SELECT … FROM (VALUES …)`` on SQLite, ``… FROM UNNEST`` on PostgreSQL): building a model
    instance per row costs more than the database does on this path."""

    now: datetime
    generation: str
    causal: Causal
    # The window's Events that wait behind an earlier one, as the commit read them.
    waiting: set[int] = field(default_factory=set)
    new_works: dict[int, tuple] = field(default_factory=dict)
    keys: list[list] = field(default_factory=list)
    inputs: list[list] = field(default_factory=list)
    intents: list[list] = field(default_factory=list)
    records: list[list] = field(default_factory=list)
    settled: dict[str, list[int]] = field(default_factory=dict)
    touched_works: set[int] = field(default_factory=set)
    shown_works: set[int] = field(default_factory=set)  # terminal: refreshed on pages, never written
    wakes: list[tuple[int, int, int]] = field(default_factory=list)  # (work, wait, event)
    timeouts: list[tuple[int, int]] = field(default_factory=list)  # (work, wait)
    reasons: dict[int, tuple[str, int | None, datetime | None]] = field(default_factory=dict)
    failures: dict[int, tuple[RouteFailure, datetime | None, str]] = field(default_factory=dict)
    bridges: list[Bridge] = field(default_factory=list)
    cleared_failures: list[int] = field(default_factory=list)
    decided_keys: list[EventKey] = field(default_factory=list)
    released: list[int] = field(default_factory=list)
    blocked_waits: dict[int, tuple[str, int]] = field(default_factory=dict)  # wait -> (reason, event)
    # (declaring scope, slot) -> priority of the routes that raise their Work's (worklife.flow).
    route_priorities: Mapping[tuple[str, str], int] = field(default_factory=dict)
    # (counter, seq, accepted at) of the Events routes with a rate limit took (routing.engine.ratelimit).
    rate_takes: list[list] = field(default_factory=list)

    def write(self, event: EventSnapshot, settlement: Settlement, evaluation: Evaluation | None) -> None:
        """Queue exactly what ``settlement`` says happens to ``event``."""
        if settlement.settled:
            self.settle(event, settlement.decision, forget_failure=settlement.forget_failure)
            for bridge in settlement.bridges:
                if bridge.refusal is not None:
                    self.blocked_waits[bridge.wait.id] = (bridge.blocked_reason, event.seq)
                self.bridges.append(bridge)
            return
        if settlement.failure is not None:
            self.failure(
                event.seq, settlement.failure, retry_at=settlement.retry_at, reason=settlement.stored_reason
            )
        elif settlement.stored_reason is not None:
            self.unrouted(
                event.seq,
                settlement.stored_reason,
                waiting_on=settlement.waiting_on,
                retry_at=settlement.retry_at,
            )
        if settlement.remember_keys:
            self.remember_keys(event, evaluation)

    def release(self, seq: int) -> None:
        self.released.append(seq)

    def remember_keys(self, event: EventSnapshot, evaluation: Evaluation | None) -> None:
        """Keep the keys an unsettled Event's route decided, so later input for them waits
        behind it even in another route loop."""
        if evaluation is None or evaluation.decision is None:
            return
        for key in evaluation.decision.keys:
            if key not in event.correlation:
                self.decided_keys.append(
                    EventKey(event_id=event.seq, scope=event.scope, key=key, decided=True)
                )

    def unrouted(self, seq: int, reason: str, *, waiting_on: int | None, retry_at: datetime | None) -> None:
        self.reasons[seq] = (reason, waiting_on, retry_at)

    def failure(self, seq: int, failure: RouteFailure, *, retry_at: datetime | None, reason: str) -> None:
        self.failures[seq] = (failure, retry_at, reason)

    def settle(self, event: EventSnapshot, decision: Decision, *, forget_failure: bool) -> None:
        work_id = decision.work_id
        seq = event.seq
        if decision.new_work:
            self.new_works[work_id] = (event.scope, decision.binding, seq)
        elif decision.reason == Reason.TERMINAL:
            # Terminal Work never changes (R49, I5): the record names it, its row stays as it is;
            # its open pages still refresh to show the record.
            self.shown_works.add(work_id)
        elif work_id is not None:
            self.touched_works.add(work_id)
        for key in decision.attach_keys:
            self.keys.append([event.scope, key, work_id, seq])
        if decision.effect in INPUT_EFFECTS and work_id is not None and not decision.error:
            attempt = decision.intent_attempt
            self.inputs.append(
                [
                    work_id,
                    seq,
                    decision.binding,
                    decision.input_kind,
                    attempt.id if attempt else None,
                    self.route_priorities.get((decision.route_scope, decision.route), 0),
                ]
            )
            if attempt is not None:
                self.intents.append([work_id, attempt.id, attempt.lease_epoch, seq, decision.intent_kind])
        if decision.wake_wait is not None:
            self.wakes.append((work_id, decision.wake_wait.id, seq))
        for sub in decision.also_wakes:
            self.wakes.append((sub.work_id, sub.wait.id, seq))
            self.touched_works.add(sub.work_id)
        if decision.timed_out_wait is not None:
            self.timeouts.append((work_id, decision.timed_out_wait.id))
        error = decision.error
        disposition = _FAILED if error else _ROUTED
        self.records.append(
            [
                seq,
                work_id,
                event.scope,
                decision.route,
                decision.binding,
                self.generation,
                "failed" if error else decision.policy,
                decision.reason[:500],
                disposition,
                list(decision.refusals),
                list(decision.keys),
                error.error_text if error else "",
                error.attempts if error else 0,
                self.now,
                "",
            ]
        )
        self.settled.setdefault(disposition, []).append(seq)
        if forget_failure:
            self.cleared_failures.append(seq)

    def flush(self) -> dict[int, int]:
        """Write everything; returns the ids of the Work this window created, by temporary id."""
        ids: dict[int, int] = {}
        if self.new_works:
            temp = list(self.new_works)
            created = works_start_in_tx([self.new_works[t] for t in temp], now=self.now)
            ids = dict(zip(temp, created, strict=True))

        def resolve(rows: list[list], column: int) -> list[list]:
            for row in rows:
                row[column] = ids.get(row[column], row[column])
            return rows

        keys_attach_in_tx(resolve(self.keys, 2), now=self.now)
        inputs_add_in_tx(resolve(self.inputs, 0), now=self.now)
        intents_record_in_tx(resolve(self.intents, 0), now=self.now)
        bulk_insert(
            RouteRecord,
            (
                "event",
                "work",
                "scope",
                "route",
                "binding",
                "generation",
                "policy",
                "reason",
                "disposition",
                "refusals",
                "keys",
                "error",
                "attempts",
                "decided_at",
                "decided_by",
            ),
            resolve(self.records, 1),
        )
        if self.rate_takes:
            bulk_insert(RateLimitTake, ("name", "event_seq", "accepted_at"), self.rate_takes)
        for state, seqs in self.settled.items():
            update_rows(
                Event,
                seqs,
                route_state=state,
                routed_at=self.now,
                unrouted_reason="",
                retry_at=None,
                claimed_by="",
                claimed_until=None,
            )
            # Settled Events wait behind no one: a statement of its own, for those the commit
            # read waiting. Naming the column in the UPDATE above made SQLite check its foreign
            # key on every row (about 10 µs an Event, two thirds of that UPDATE), though most
            # settled Events never waited; a statement for the whole window filtered on the
            # column cost PostgreSQL a scan of the table.
            update_rows(Event, [seq for seq in seqs if seq in self.waiting], waiting_on=None)
        # A Work this window started had a temporary (negative) id until now: it is new, so there
        # is nothing to touch, and its pages hear of it as it is created.
        touched = {work_id for work_id in self.touched_works if work_id not in ids}
        if touched:
            # Never a terminal Work's row (R49), even one another process ended since it was read.
            works_touch_in_tx(touched, self.now)
        # The wake bridges the settlements planned, derived through the causal limits; a
        # refused one leaves its diagnostic (R55). A limit spent meanwhile by another writer
        # raises CausalRefused: the window is settled again on fresh reads.
        for bridge in self.bridges:
            envelope = wake_bridge_envelope(
                wait_id=bridge.wait.id, work_id=bridge.work_id, scope=bridge.scope, event_seq=bridge.event_seq
            )
            if bridge.refusal is None:
                self.causal.derive_in_tx(parent=Event(seq=bridge.event_seq), envelope=envelope)
            else:
                refuse(bridge.refusal, clock=lambda: self.now, envelope=envelope)
        # Wait transitions are worklife's (W7: the router records, it runs nothing).
        for _work_id, wait_id, seq in self.wakes:
            wait_wake_in_tx(wait_id=wait_id, event_seq=seq, now=self.now)
        for _work_id, wait_id in self.timeouts:
            wait_time_out_in_tx(wait_id=wait_id, now=self.now)
        failures_forget_in_tx(self.cleared_failures)
        if self.decided_keys:
            EventKey.objects.bulk_create(self.decided_keys, ignore_conflicts=True)
        for wait_id, (reason, seq) in self.blocked_waits.items():
            wait_block_in_tx(wait_id=wait_id, reason=reason, event_seq=seq)
        if self.released:
            update_rows(Event, self.released, claimed_by="", claimed_until=None)
        by_reason: dict[tuple[str, int | None, datetime | None], list[int]] = {}
        for seq, reason in self.reasons.items():
            by_reason.setdefault(reason, []).append(seq)
        for (reason, waiting_on, retry_at), seqs in by_reason.items():
            update_rows(
                Event,
                seqs,
                unrouted_reason=reason[:1000],
                waiting_on=waiting_on,
                retry_at=retry_at,
                claimed_by="",
                claimed_until=None,
            )
        for seq, (failure, retry_at, reason) in self.failures.items():
            failure_put_in_tx(seq, failure, self.now)
            Event.objects.filter(seq=seq).update(
                unrouted_reason=reason, waiting_on=None, retry_at=retry_at, claimed_by="", claimed_until=None
            )
        # Open console pages refresh once this window commits (bounded; never raises).
        publish_routed(
            [row[0] for row in self.records] + [*self.reasons, *self.failures],
            {ids.get(work_id, work_id) for work_id in self.touched_works | self.shown_works}
            | set(ids.values()),
        )
        return ids
