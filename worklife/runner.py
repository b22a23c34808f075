"""The Work engine: the loop behind ``manage.py work_loop``.

Each :meth:`WorkRunner.step` is one pass, on one thread, in short transactions (never one
held while an attempt runs):

1. answer the calls the running attempts made (:mod:`worklife.calls`: emit, wait, child, successor, schedule,
   complete, received), each fenced by the attempt's (id, lease epoch) (W2);
2. read what changed for them: a cancel or a lost lease ends the process (W3); a woken or
   timed-out wait answers the attempt's ``wait``; pending inject and interrupt intents are
   delivered (R32) and confirmed once received (W4);
3. take the outcomes of attempts that ended: fail with backoff and a bound, then park (W5);
   end attempts past their binding's ``timeout``;
4. renew its leases; fire due timers (R56), time out due waits and try again the wakes the
   causal limits blocked; mark lost the attempts whose lease lapsed (any loop's);
5. in one transaction, complete the Work of the attempts that ended well (R47) and claim ready
   Work for the slots they and the others left free (:mod:`worklife.dispatch`): the
   configuration is pinned and checked (R36), the input consumed in the same transaction (R46);
   then start the attempts.

The router never runs anything (R33, W7); this loop is the only caller of executors.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import reset_queries, transaction

from causal.clock import Clock
from causal.limits import Causal, CausalRefused
from causal.models import Event
from infra.connections import connections_refresh
from infra.identity import host_name, loop_identity
from infra.wakeup import STOP_CHECK_SECONDS
from worklife import metrics
from worklife.attempts import (
    Rescued,
    attempt_fail,
    attempt_output_in_tx,
    attempts_pid,
    attempts_renew,
    attempts_rescue,
)
from worklife.calls import AttemptCalls, Running, authority
from worklife.dispatch import Configurations, FlowHeld, dispatch_many_in_tx
from worklife.errors import WorkError
from worklife.executors import (
    Execution,
    Executor,
    RegistrationError,
    emit_sources_of,
    executor_class,
    start_attempt,
)
from worklife.executors.containment import lost_attempt_process_kill, pid_alive, process_started
from worklife.executors.isolation import isolation
from worklife.flow import (
    flow_claim_order,
    flow_next_release,
    flow_release,
    priorities_of,
    routes_raise_priority,
)
from worklife.heartbeat import WorkLoopHeartbeat, heartbeat_write
from worklife.lifecycle import UnroutedInput, work_create_successor, works_complete
from worklife.models import (
    ACTIVE_ATTEMPT_STATES,
    Attempt,
    AttemptState,
    Intent,
    IntentState,
    Wait,
    WaitState,
)
from worklife.retry import FailureHint, RetryPolicy
from worklife.scheduling import (
    claimable_work_in_tx,
    event_as_input,
    presented_events_many_in_tx,
    work_hold_in_tx,
)
from worklife.timers import TimerError, timer_fire, timers_due
from worklife.tracing import trace_fields, trigger_traceparent
from worklife.waits import waits_expire, waits_retry_blocked

logger = logging.getLogger("conduit.worklife.runner")

DEFAULT_INTERRUPT_GRACE = 10.0
# Attempts parked in a wait that a loop keeps beside its slots (``work_loop --wait-slots``).
DEFAULT_WAIT_SLOTS = 32
COMPLETE_RETRY_SECONDS = 1.0
BLOCKED_RETRY_SECONDS = 5.0
HEARTBEAT_SECONDS = 2.0
DUE_CHECK_SECONDS = 0.2


@dataclass(frozen=True, slots=True)
class StepResult:
    started: int = 0
    finished: int = 0
    running: int = 0
    idle: bool = True


@dataclass
class Counters:
    started: int = 0
    completed: int = 0
    failed: int = 0
    refused: int = 0
    lost: int = 0


class WorkRunner:
    """Runs attempts of ready Work, at most ``slots`` at once.

    An attempt parked in a wait holds no slot: up to ``wait_slots`` parked attempts are kept
    beside the slots (their processes wait for the answer); past that bound they hold slots
    again. A woken (or timed-out) wait is answered when a slot is free, before new Work is
    claimed, so at most ``slots`` attempts run at once and at most ``slots + wait_slots``
    processes are kept."""

    def __init__(
        self,
        *,
        clock: Clock,
        configurations: Configurations,
        slots: int = 4,
        wait_slots: int | None = None,
        lease_seconds: float | None = None,
        owner: str | None = None,
        publish: Callable[[Iterable[int]], None] | None = None,
        causal: Causal | None = None,
        maintenance: Callable[[], Any] | None = None,
        maintenance_seconds: float = 3600.0,
    ) -> None:
        self.clock = clock
        # The configuration's reader a higher package hands down (``work_loop`` gives routing's):
        # the live generation each claim pins, and the checks of the attempts' calls.
        self.configurations = configurations
        self.slots = slots
        self.wait_slots = DEFAULT_WAIT_SLOTS if wait_slots is None else wait_slots
        self.lease = timedelta(
            seconds=lease_seconds or float(getattr(settings, "CONDUIT_ATTEMPT_LEASE_SECONDS", 30))
        )
        self.owner = owner or loop_identity()
        self.publish = publish or (lambda work_ids: None)
        self.causal = causal or Causal(clock)
        self.running: dict[int, Running] = {}
        # Set by the running attempts' executions when they have something for the loop (a
        # call, an outcome): an idle loop waits on it, its poll interval at most.
        self._wake = threading.Event()
        self.counters = Counters()
        self.stopping = False
        self._executors: dict[str, Executor] = {}
        self._touched: set[int] = set()
        # The concurrency gates of this loop's attempts (by attempt id), the gates of those that
        # ended and the attempts other loops lost: the Work held on those gates is released in the
        # next claim (worklife.flow).
        self._gates: dict[int, str] = {}
        self._freed: set[str] = set()
        self._ended: set[int] = set()
        # The processes of the attempts this loop started, not recorded yet (by attempt id): they
        # ride in the next transaction the loop makes anyway (the completions', the claim's), or
        # in one of their own at the end of that pass.
        self._pids: dict[int, tuple[int, int | None] | None] = {}
        self.calls = AttemptCalls(
            clock=clock, causal=self.causal, touched=self._touched, scopes=configurations
        )
        self._next_renew = 0.0
        self._next_rescue = 0.0
        self._next_blocked = 0.0
        self._next_due = 0.0
        self.blocked_retry_seconds = BLOCKED_RETRY_SECONDS
        self._next_heartbeat = 0.0
        # Housekeeping a higher package passes down (conduit_site's retention), run on the
        # first pass and then every ``maintenance_seconds``: one comparison per pass.
        self.maintenance = maintenance
        self.maintenance_seconds = maintenance_seconds
        self._next_maintenance = 0.0

    # -- the pass -------------------------------------------------------------------------
    def step(self) -> StepResult:
        """One pass (see the module docstring), between the hygiene every loop's pass has: stale
        connections dropped before it, the query log emptied after it (``DEBUG`` keeps one)."""
        connections_refresh()
        try:
            return self._pass()
        finally:
            reset_queries()

    def _pass(self) -> StepResult:
        mono = time.monotonic()
        before = len(self.running)
        # The pids of the attempts the last pass started: recorded in this pass's first transaction.
        carried = set(self._pids)
        self.calls.answer_all(self.running.values())
        self._sync(mono)
        finished, completing = self._finish(mono)
        self._enforce(mono)
        if mono >= self._next_renew:
            self._renew()
        self._fire_due(mono)
        if mono >= self._next_rescue:
            self._rescue()
        completed, started = self._claim(completing, mono)
        finished += completed
        if not carried.isdisjoint(self._pids):  # no transaction of this pass took them
            self._record_pids()
        if mono >= self._next_heartbeat:
            self._heartbeat()
        if self.maintenance is not None and mono >= self._next_maintenance and not self.stopping:
            self._maintain(mono)
        if self._touched:
            self.publish(sorted(self._touched))
            self._touched.clear()
        return StepResult(
            started=started,
            finished=finished,
            running=len(self.running),
            idle=started == 0 and finished == 0 and before == 0 and not self.running,
        )

    def run(self, stop: Any, *, poll_interval: float = 0.1, stop_grace: float = 10.0) -> None:
        """Step until ``stop`` (a ``threading.Event``) is set; then let running attempts finish
        for up to ``stop_grace`` seconds, end the rest and give their Work back.

        After a pass that started and finished nothing, the loop waits ``poll_interval``
        seconds, or less: until one of its attempts has something for it (a call, its result)."""
        self.release_dead_owners()
        while not stop.is_set():
            # What arrives from here on (during the pass included) cuts the next wait short.
            self._wake.clear()
            try:
                result = self.step()
            except Exception:  # noqa: BLE001 - the loop boundary: log with the stack and go on
                logger.exception("work_loop.pass_failed")
                stop.wait(1.0)
                continue
            if result.started == 0 and result.finished == 0:
                self._idle(stop, poll_interval)
        # ``stop`` is set now: the grace is waited out with sleeps, not a busy loop.
        self.shutdown(grace=stop_grace)

    def _idle(self, stop: Any, seconds: float) -> None:
        """Wait ``seconds``, until an attempt wakes the loop, or until ``stop`` is set (seen
        within :data:`~infra.wakeup.STOP_CHECK_SECONDS`)."""
        deadline = time.monotonic() + seconds
        while not stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._wake.wait(min(remaining, STOP_CHECK_SECONDS)):
                return

    def drain(self, *, timeout: float = 60.0, wait: Callable[[float], Any] = time.sleep) -> int:
        """Step until no Work is claimable and nothing runs (or ``timeout``); the passes run. Work
        flow control holds until a moment before the deadline (debounced, batching, throttled) is
        waited for: it starts then."""
        deadline = time.monotonic() + timeout
        passes = 0
        while time.monotonic() < deadline:
            result = self.step()
            passes += 1
            if not self.running and result.started == 0 and result.finished == 0:
                until = flow_next_release(self.clock())
                if until is None or until > deadline - time.monotonic():
                    break
                wait(min(max(until, 0.02), 0.5))
                continue
            if result.started == 0 and result.finished == 0:
                wait(0.02)
        return passes

    def shutdown(self, *, grace: float = 10.0, wait: Callable[[float], Any] = time.sleep) -> None:
        """Stop claiming; let the running attempts end for ``grace`` seconds; end the rest
        (their Work is ready again at once: a stop is not the attempt's failure)."""
        self.stopping = True
        deadline = time.monotonic() + grace
        while self.running and time.monotonic() < deadline:
            self.step()
            if self.running:
                wait(0.05)
        for running in list(self.running.values()):
            running.ended_by = "stopped"
            running.execution.kill()
            running.execution.wait(5.0)
            try:
                attempt_fail(
                    attempt_id=running.attempt_id,
                    lease_epoch=running.epoch,
                    error="its work loop stopped",
                    state=AttemptState.LOST,
                    clock=self.clock,
                    output=self._output(running, error="its work loop stopped"),
                    count=False,
                )
            except WorkError:
                logger.info(
                    "attempt.release_refused",
                    extra={"attempt": running.attempt_id, **trace_fields(running.traceparent)},
                )
            self._forget(running)
        for executor in self._executors.values():
            executor.close()
        self._heartbeat(stopped=True)

    # -- 2. what changed for the running attempts ----------------------------------------------
    def _sync(self, mono: float) -> None:
        if not self.running:
            return
        ids = list(self.running)
        states = {
            pk: (state, epoch)
            for pk, state, epoch in Attempt.objects.filter(pk__in=ids).values_list(
                "pk", "state", "lease_epoch"
            )
        }
        for attempt_id in ids:
            running = self.running[attempt_id]
            state, epoch = states.get(attempt_id, ("gone", 0))
            if running.ended_by or running.outcome is not None:
                continue
            if state not in ACTIVE_ATTEMPT_STATES or epoch != running.epoch:
                # Cancelled, or lost to a rescuer: the commit came first, now the process ends (W3).
                running.ended_by = "cancelled" if state == AttemptState.CANCELLED else "lost"
                running.execution.kill()
                self._touched.add(running.work_id)
        waiting = {r.wait_id: r for r in self.running.values() if r.wait_id is not None and not r.ended_by}
        if waiting:
            ended = Wait.objects.filter(pk__in=list(waiting)).exclude(state=WaitState.ACTIVE)
            for wait_id, state, woken_by in ended.order_by("pk").values_list("pk", "state", "woken_by_id"):
                # A woken attempt runs again once it has a slot; until then it stays parked
                # (its process waits for the answer) and is answered in a later pass.
                if self.occupied() >= self.slots:
                    break
                self.calls.answer_wait(waiting[wait_id], state, woken_by)
        active = [r.attempt_id for r in self.running.values() if not r.ended_by and r.outcome is None]
        if active:
            intents = (
                Intent.objects.filter(attempt_id__in=active, state=IntentState.PENDING)
                .select_related("event")
                .order_by("event_id")
            )
            for intent in intents:
                running = self.running[intent.attempt_id]
                if intent.lease_epoch != running.epoch or intent.event_id in running.delivered:
                    continue
                self._deliver(running, intent, mono)

    def _deliver(self, running: Running, intent: Intent, mono: float) -> None:
        running.delivered.add(intent.event_id)
        event = event_as_input(intent.event)
        if intent.kind == "inject":
            if not running.execution.send_inputs([event]):
                return
            if not _confirms_on_receipt(running.execution):
                self.calls.consume(running, [intent.event_id])
        else:
            data = intent.event.data if isinstance(intent.event.data, dict) else {}
            reason = str(data.get("reason") or f"{intent.event.type} (#{intent.event_id})")
            running.execution.send_interrupt(reason)
            self.calls.consume(running, [intent.event_id])
            if running.interrupted_at is None:
                running.interrupted_at = mono

    # -- 3. outcomes ------------------------------------------------------------------------
    def _finish(self, mono: float) -> tuple[int, list[Running]]:
        """End the attempts whose process ended but did not complete; returns how many, and the
        attempts that ended well: their Work is completed in the claim's transaction."""
        finished = 0
        completing: list[Running] = []
        for running in list(self.running.values()):
            if running.outcome is None:
                running.outcome = running.execution.poll()
            if running.outcome is None or mono < running.next_complete:
                continue
            self._touched.add(running.work_id)
            if running.ended_by in ("cancelled", "lost"):
                # Its end is committed already (a cancel, a rescue): keep what it printed.
                with transaction.atomic():
                    attempt_output_in_tx(
                        **self._output(running, error=f"ended: {running.ended_by}"),
                        attempt_id=running.attempt_id,
                    )
                self._forget(running)
                finished += 1
            elif running.ended_by == "timeout":
                self._fail(running, f"timed out after {running.timeout:g} s")
                finished += 1
            elif not running.outcome.ok:
                self._fail(running, running.outcome.error or "failed")
                finished += 1
            else:
                completing.append(running)
        return finished, completing

    def _completed(self, completing: list[Running], results: dict[int, Any], mono: float) -> int:
        """After the commit that completed their Work (R47): forget the attempts it completed or
        refused; keep, to try again, those whose completion would overtake unrouted input."""
        finished = 0
        for running in completing:
            result = results[running.attempt_id]
            if isinstance(result, UnroutedInput):
                # Completing would overtake unrouted input: try again once it routes.
                running.next_complete = mono + COMPLETE_RETRY_SECONDS
                continue
            finished += 1
            if isinstance(result, WorkError):
                logger.info(
                    "attempt.complete_refused",
                    extra={
                        "attempt": running.attempt_id,
                        "error": str(result),
                        **trace_fields(running.traceparent),
                    },
                )
            else:
                self.counters.completed += 1
                metrics.attempt_completed(running.scope, running.binding, time.monotonic() - running.started)
                if running.successor is not None and result.is_terminal:
                    self._create_successor(running, result)
            self._forget(running)
        return finished

    def _fail(self, running: Running, error: str) -> None:
        try:
            work = attempt_fail(
                error=error,
                clock=self.clock,
                output=self._output(running, error=error),
                policy=running.retry,
                hint=_failure_hint(running),
                **authority(running),
            )
        except WorkError as exc:
            logger.info(
                "attempt.fail_refused",
                extra={"attempt": running.attempt_id, "error": str(exc), **trace_fields(running.traceparent)},
            )
        else:
            self.counters.failed += 1
            metrics.attempt_failed(
                running.scope,
                running.binding,
                time.monotonic() - running.started,
                parked=work.parked_at is not None,
            )
            logger.warning(
                "attempt.failed",
                extra={
                    "attempt": running.attempt_id,
                    "work": running.work_id,
                    "error": error[:500],
                    "failures": work.failures,
                    "parked": work.parked_at is not None,
                    **trace_fields(running.traceparent),
                },
            )
        self._forget(running)

    def _create_successor(self, running: Running, work: Any) -> None:
        request = running.successor or {}
        try:
            created = work_create_successor(
                predecessor_id=work.pk,
                scope=request.get("scope") or work.scope,
                binding=request.get("binding", ""),
                keys=request.get("keys", []),
                data=request.get("data"),
                clock=self.clock,
                causal=self.causal,
            )
        except (WorkError, CausalRefused) as exc:
            logger.warning("attempt.successor_refused", extra={"work": work.pk, "error": str(exc)})
        else:
            self._touched.add(created.work.pk)

    def _output(self, running: Running, *, error: str = "") -> dict[str, Any]:
        outcome = running.outcome
        stdout, stderr = running.execution.output()
        return {
            "result": _jsonable(outcome.result) if outcome is not None else None,
            "exit_status": outcome.exit_status if outcome is not None else None,
            "error": error or (outcome.error if outcome is not None else ""),
            "stdout": stdout,
            "stderr": stderr,
        }

    def _forget(self, running: Running) -> None:
        self.running.pop(running.attempt_id, None)
        if gate := self._gates.pop(running.attempt_id, ""):
            self._freed.add(gate)
        with contextlib.suppress(OSError):
            running.execution.release()

    def _enforce(self, mono: float) -> None:
        """End attempts past their timeout; escalate interrupts past their grace."""
        for running in self.running.values():
            if running.outcome is not None or running.ended_by:
                continue
            if running.timeout is not None and mono - running.started > running.timeout:
                running.ended_by = "timeout"
                running.execution.kill()
                continue
            if running.interrupted_at is not None:
                overdue = mono - running.interrupted_at
                if running.escalation == 0 and overdue > running.grace:
                    running.escalation = 1
                    running.execution.signal(signal.SIGTERM)
                elif running.escalation == 1 and overdue > 2 * running.grace:
                    running.escalation = 2
                    running.execution.kill()

    # -- 4. leases, timers, rescue -------------------------------------------------------------
    def _renew(self) -> None:
        held = {r.attempt_id: r.epoch for r in self.running.values() if not r.ended_by}
        attempts_renew(owner=self.owner, held=held, until=self.clock() + self.lease)
        self._next_renew = time.monotonic() + self.lease.total_seconds() / 3

    def _fire_due(self, mono: float) -> None:
        # Due timers and wait timeouts are looked for a few times a second: on time within
        # a second (R56) without a query on every pass.
        if mono < self._next_due:
            return
        self._next_due = mono + DUE_CHECK_SECONDS
        now = self.clock()
        for timer_id in timers_due(now=now):
            try:
                outcome = timer_fire(timer_id=timer_id, clock=self.clock, causal=self.causal)
            except TimerError:
                continue
            logger.info("timer.fired", extra={"timer": timer_id, "state": outcome.state})
        waits_expire(clock=self.clock)
        if mono >= self._next_blocked:
            self._next_blocked = mono + self.blocked_retry_seconds
            woken = waits_retry_blocked(causal=self.causal, clock=self.clock)
            if woken:
                logger.info("wait.unblocked", extra={"waits": woken})

    def _rescue(self) -> None:
        self._next_rescue = time.monotonic() + max(1.0, self.lease.total_seconds() / 3)
        # A loop of this host that died loses its attempts now, not when their leases lapse.
        self.release_dead_owners()
        for rescued in attempts_rescue(now=self.clock(), clock=self.clock):
            self._end_orphan(rescued)

    def release_dead_owners(self) -> int:
        """Mark lost at once the attempts of loops of this host whose process is gone (a loop
        that crashed or was killed), instead of after their lease lapses."""
        host = host_name()
        owners = set(
            Attempt.objects.filter(state__in=ACTIVE_ATTEMPT_STATES, lease_owner__startswith=f"{host}:")
            .values_list("lease_owner", flat=True)
            .distinct()
        )
        gone = [owner for owner in owners if owner != self.owner and not pid_alive(owner.split(":")[1])]
        if not gone:
            return 0
        rescued = attempts_rescue(now=self.clock(), owners_gone=gone, clock=self.clock)
        for item in rescued:
            self._end_orphan(item)
        return len(rescued)

    def _end_orphan(self, rescued: Rescued) -> None:
        self.counters.lost += 1
        self._touched.add(rescued.work_id)
        self._ended.add(rescued.attempt_id)  # its concurrency slot is free (worklife.flow)
        logger.warning(
            "attempt.lost",
            extra={"attempt": rescued.attempt_id, "work": rescued.work_id, "owner": rescued.owner},
        )
        if (
            rescued.pid
            and rescued.owner.startswith(f"{host_name()}:")
            and rescued.attempt_id not in self.running
        ):
            lost_attempt_process_kill(rescued.pid, rescued.attempt_id, rescued.pid_started)

    # -- 5. claims ------------------------------------------------------------------------------
    def parked(self) -> int:
        """Attempts of this loop parked in a wait (woken ones not answered yet included)."""
        return sum(
            1 for r in self.running.values() if r.wait_id is not None and not r.ended_by and r.outcome is None
        )

    def occupied(self) -> int:
        """Slots in use: every attempt of this loop but the parked ones kept beside the slots."""
        return len(self.running) - min(self.parked(), self.wait_slots)

    def _claim(self, completing: list[Running], mono: float) -> tuple[int, int]:
        """One transaction for the pass's writes: complete the Work of the attempts that ended well,
        release the concurrency gates of those that ended, claim ready Work for the free slots
        (theirs included) and consume its input; then start the attempts. Returns how many
        attempts finished and how many started.

        An attempt holding a concurrency gate is completed in a commit of its own first: the gate
        is seen free by every loop's claim, not refilled by this loop in the same commit (one loop
        would keep a binding's gate to itself while the others have slots free)."""
        finished = 0
        gated = [r for r in completing if r.attempt_id in self._gates]
        if gated:
            completing = [r for r in completing if r.attempt_id not in self._gates]
            with self._recording_pids():
                results = self._complete_in_tx(gated)
            finished += self._completed(gated, results, mono)
        free = 0 if self.stopping else self.slots - self.occupied()
        if not completing and free <= 0:
            return finished, 0
        now = self.clock()
        starts: list[tuple[Attempt, list[Event], dict, RetryPolicy | None]] = []
        results = {}
        ended, gates = set(self._ended), set(self._freed)
        with self._recording_pids():
            if completing:
                results = self._complete_in_tx(completing)
                if not self.stopping:
                    free += sum(1 for r in completing if not isinstance(results[r.attempt_id], UnroutedInput))
            if free > 0:
                if ended or gates:
                    flow_release(attempt_ids=ended, gates=gates)
                if work_ids := self._claimable(now, free):
                    starts = self._dispatch(work_ids, now)
        if free > 0:
            self._ended -= ended
            self._freed -= gates
        finished += self._completed(completing, results, mono)
        for attempt, presented, binding_settings, retry in starts:
            self._start(attempt, presented, binding_settings, retry)
        # Recorded in the next transaction this loop makes (see ``_pids``).
        for attempt, *_ in starts:
            if attempt.pk in self.running:
                pid = self.running[attempt.pk].execution.pid
                self._pids[attempt.pk] = (pid, process_started(pid)) if pid is not None else None
        return finished, len(starts)

    def _complete_in_tx(self, completing: list[Running]) -> dict[int, Any]:
        return works_complete(
            authorities=[(r.attempt_id, r.epoch) for r in completing],
            clock=self.clock,
            outputs={r.attempt_id: self._output(r) for r in completing},
        )

    def _claimable(self, now: Any, free: int) -> list[int]:
        live = self.configurations.live()
        priorities = priorities_of(live.configuration) if live else {}
        routes = routes_raise_priority(live.configuration) if live else False
        order, annotations = flow_claim_order(priorities, now=now, routes=routes)
        return claimable_work_in_tx(now=now, limit=free, order=order, annotations=annotations)

    def _dispatch(
        self, work_ids: list[int], now: Any
    ) -> list[tuple[Attempt, list[Event], dict, RetryPolicy | None]]:
        """Make the attempts of the claimed Work (in the claim's transaction); hold or refuse the
        Work that cannot start now."""
        dispatched = dispatch_many_in_tx(
            work_ids=work_ids,
            configurations=self.configurations,
            clock=self.clock,
            lease_until=now + self.lease,
            lease_owner=self.owner,
        )
        attempts = []
        for work_id, outcome in dispatched.items():
            if isinstance(outcome, FlowHeld):
                metrics.flow_held(outcome.hold.kind)
                self._touched.add(work_id)
            elif isinstance(outcome, WorkError):
                self.counters.refused += 1
                news = work_hold_in_tx(
                    work_id=work_id,
                    reason=str(outcome),
                    now=now,
                    queue_only=getattr(outcome, "queue_only", False),
                )
                self._touched.add(work_id)
                if news:  # once per refusal, not at every look again
                    logger.info("work.dispatch_refused", extra={"work": work_id, "reason": str(outcome)})
            else:
                attempts.append(outcome)
        if not attempts:
            return []
        events = presented_events_many_in_tx(attempts=[d.attempt for d in attempts], now=now)
        return [(d.attempt, events[d.attempt.pk], d.settings, d.retry) for d in attempts]

    @contextlib.contextmanager
    def _recording_pids(self) -> Iterator[None]:
        """A transaction that also records the processes of the attempts started since the last
        one (kept for the next when it rolls back): no commit of their own under load."""
        pids, self._pids = self._pids, {}
        try:
            with transaction.atomic():
                attempts_pid(pids)
                yield
        except BaseException:
            self._pids = {**pids, **self._pids}
            raise

    def _record_pids(self) -> None:
        """Record the pids carried from this pass in a transaction of their own (no transaction
        of the pass took them); kept for the next pass when it fails."""
        pids, self._pids = self._pids, {}
        try:
            with transaction.atomic():
                attempts_pid(pids)
        except BaseException:
            self._pids = {**pids, **self._pids}
            raise

    def _start(
        self, attempt: Attempt, events: list[Event], binding_settings: dict, retry: RetryPolicy | None = None
    ) -> None:
        self._touched.add(attempt.work_id)
        if attempt.concurrency_key:
            self._gates[attempt.pk] = attempt.concurrency_key
        traceparent = trigger_traceparent(attempt.trigger_id, events)
        try:
            executor = self._executor(attempt.executor)
            execution = start_attempt(
                executor,
                work_id=attempt.work_id,
                attempt_id=attempt.pk,
                binding_settings=binding_settings,
                inputs=[event_as_input(event) for event in events],
                traceparent=traceparent,
                idempotency_key=attempt.idempotency_key,
            )
        except (OSError, RegistrationError, LookupError, ValueError, TypeError, KeyError) as exc:
            work = attempt_fail(
                attempt_id=attempt.pk,
                lease_epoch=attempt.lease_epoch,
                error=f"could not start: {type(exc).__name__}: {exc}",
                clock=self.clock,
                policy=retry,
            )
            if gate := self._gates.pop(attempt.pk, ""):
                self._freed.add(gate)
            self.counters.failed += 1
            metrics.attempt_failed(
                attempt.work.scope, attempt.binding, None, parked=work.parked_at is not None
            )
            return
        timeout = binding_settings.get("timeout")
        grace = binding_settings.get("interrupt_grace") or DEFAULT_INTERRUPT_GRACE
        self.running[attempt.pk] = Running(
            attempt_id=attempt.pk,
            work_id=attempt.work_id,
            epoch=attempt.lease_epoch,
            number=attempt.number,
            execution=execution,
            started=time.monotonic(),
            timeout=float(timeout) if timeout else None,
            grace=float(grace),
            scope=attempt.work.scope,
            binding=attempt.binding,
            emit_sources=tuple(emit_sources_of(binding_settings)),
            retry=retry,
            traceparent=traceparent,
        )
        execution.wake_with(self._wake.set)
        self.counters.started += 1
        metrics.attempt_started(attempt.work.scope, attempt.binding)

    def _executor(self, name: str) -> Executor:
        executor = self._executors.get(name)
        if executor is None:
            executor = executor_class(name)()
            self._executors[name] = executor
        return executor

    def _maintain(self, mono: float) -> None:
        self._next_maintenance = mono + self.maintenance_seconds
        try:
            self.maintenance()
        except Exception:  # noqa: BLE001 - housekeeping must not stop the loop: log with the stack
            logger.exception("work_loop.maintenance_failed")

    def _heartbeat(self, *, stopped: bool = False) -> None:
        self._next_heartbeat = time.monotonic() + HEARTBEAT_SECONDS
        heartbeat_write(
            WorkLoopHeartbeat(
                loop=self.owner,
                at=self.clock(),
                slots=self.slots,
                running=len(self.running),
                started=self.counters.started,
                completed=self.counters.completed,
                failed=self.counters.failed,
                refused=self.counters.refused,
                lost=self.counters.lost,
                stopped=stopped,
                isolation=isolation().describe(),
            ),
            clock=self.clock,
        )


def _failure_hint(running: Running) -> FailureHint:
    """What the attempt's end says about retrying it (a timeout says nothing: it backs off)."""
    outcome = running.outcome
    if outcome is None or running.ended_by:
        return FailureHint()
    return FailureHint(
        types=outcome.error_types,
        non_retryable=outcome.non_retryable,
        retry_after=outcome.retry_after,
        exit_status=outcome.exit_status,
    )


def _confirms_on_receipt(execution: Execution) -> bool:
    """Python targets confirm an injected input when ``run.receive()`` returns it; for a
    command, the input is confirmed once written to its standard input."""
    from worklife.executors import PythonExecution

    return isinstance(execution, PythonExecution)


def _jsonable(value: Any) -> Any:
    import json

    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value
