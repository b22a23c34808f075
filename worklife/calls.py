"""What running attempts ask of their loop: the calls (emit, wait, child, successor,
schedule, received, complete), each answered on the attempt's authority (its id and lease
epoch), and the input an attempt consumes; and :class:`Running`, an attempt a loop runs."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from django.db import DatabaseError, transaction

from causal.clock import Clock
from causal.limits import Causal, CausalRefused
from causal.models import Event
from worklife.emit import emit_envelope
from worklife.errors import WorkError
from worklife.executors import Execution, Outcome
from worklife.inputs import consume_inputs_in_tx
from worklife.lifecycle import work_create_child
from worklife.models import Attempt, WaitState, WorkInput
from worklife.scheduling import event_as_input
from worklife.timers import TimerError, timer_schedule
from worklife.waits import attempt_wait_for

logger = logging.getLogger("conduit.worklife.runner")

# A call answered later (a wait: once it is woken or times out).
DEFERRED = object()


@dataclass
class Running:
    """An attempt this loop runs."""

    attempt_id: int
    work_id: int
    epoch: int
    number: int
    execution: Execution
    started: float
    timeout: float | None
    grace: float
    wait_call: Any = None
    wait_id: int | None = None
    delivered: set[int] = field(default_factory=set)
    interrupted_at: float | None = None
    escalation: int = 0
    ended_by: str = ""  # "cancelled", "lost", "timeout", "stopped": why this loop ended it
    outcome: Outcome | None = None
    next_complete: float = 0.0
    successor: dict | None = None
    scope: str = ""  # the Work's scope and the attempt's binding: its metrics' labels
    binding: str = ""
    # The sources its binding may emit as beside the Work's own (the setting emit_sources), and
    # how many emits it asked for (the n of an emitted Event's id emit/<work>/<attempt>/<n>).
    emit_sources: tuple[str, ...] = ()
    emits: int = 0
    # Its binding's retry policy, pinned at start (``None``: the defaults).
    retry: Any = None
    # The W3C traceparent of the Event that triggered it (``""``: none): its log lines carry the
    # trace's ids (``worklife.tracing.trace_fields``).
    traceparent: str = ""


def authority(running: Running) -> dict[str, int]:
    """The attempt's authority, as every call on its behalf names it."""
    return {"attempt_id": running.attempt_id, "lease_epoch": running.epoch}


class Scopes(Protocol):
    """What the calls ask of the live configuration (``routing.engine.configurations.LiveConfigurations``)."""

    def scope_problem(self, *, scope: str, binding: str = "") -> str:
        """Why the live configuration has no scope ``scope`` (or no ``binding`` in it), or ``""``."""
        ...


class AttemptCalls:
    """Answers the calls of a loop's running attempts. ``touched`` collects the Work whose
    pages should refresh (the loop publishes and clears it after each pass); ``scopes`` checks
    the scope a wait subscribes to and a child's or successor's binding against the live
    configuration."""

    def __init__(self, *, clock: Clock, causal: Causal, touched: set[int], scopes: Scopes) -> None:
        self.clock = clock
        self.causal = causal
        self._touched = touched
        self.scopes = scopes

    def answer_all(self, running_attempts: Iterable[Running]) -> None:
        """Answer every call the running attempts made since the last pass."""
        for running in list(running_attempts):
            for call in running.execution.take_calls():
                self.answer(running, call)

    def answer(self, running: Running, call: dict) -> None:
        op = call.get("op")
        call_id = call.get("id")
        try:
            value = self._perform(running, op, call)
        except (WorkError, CausalRefused, TimerError, ValueError, TypeError, DatabaseError) as exc:
            # The attempt learns its call was refused (it must never wait for an answer).
            logger.info(
                "attempt.call_refused", extra={"attempt": running.attempt_id, "op": op, "error": str(exc)}
            )
            if call_id is not None:
                running.execution.reply(call_id, ok=False, error=f"{op} refused: {exc}")
            return
        if value is DEFERRED:
            running.wait_call = call_id
            return
        if call_id is not None:
            running.execution.reply(call_id, ok=True, value=value)

    def _perform(self, running: Running, op: Any, call: dict) -> Any:
        authority = {"attempt_id": running.attempt_id, "lease_epoch": running.epoch}
        if op == "emit":
            from worklife.emit import emit

            work = Attempt.objects.select_related("work").get(pk=running.attempt_id).work
            running.emits += 1
            envelope = emit_envelope(
                work=work, attempt_id=running.attempt_id, message=call, ordinal=running.emits
            )
            accepted = emit(
                envelope=envelope, causal=self.causal, speaks_for=running.emit_sources, **authority
            )
            return accepted.event.seq
        if op == "wait":
            # A wait on another scope's Events subscribes to that scope (R42): it must be one
            # the configuration has, or no Event of it would ever come.
            scope = call.get("scope") or ""
            if isinstance(scope, str) and scope and (problem := self.scopes.scope_problem(scope=scope)):
                raise WorkError(problem)
            wait = attempt_wait_for(
                match=call.get("match") or {},
                timeout=call.get("timeout"),
                name=call.get("name") or "",
                clock=self.clock,
                scope=scope,
                **authority,
            )
            running.wait_id = wait.pk
            self._touched.add(running.work_id)
            return DEFERRED
        if op == "child":
            binding = call.get("binding")
            if not isinstance(binding, str) or not binding:
                raise WorkError("a child needs a binding (the name of one in this Work's scope)")
            # A binding the scope lacks is refused here, with nothing created: the child could
            # never run (its dispatch would be refused).
            if problem := self.scopes.scope_problem(scope=running.scope, binding=binding):
                raise WorkError(problem)
            created = work_create_child(
                binding=binding,
                keys=[str(k) for k in call.get("keys") or ()],
                data=call.get("data"),
                clock=self.clock,
                causal=self.causal,
                **authority,
            )
            self._touched.update((running.work_id, created.work.pk))
            return created.work.pk
        if op == "successor":
            keys = call.get("keys") or []
            if not keys or not all(isinstance(k, str) for k in keys):
                raise WorkError("a successor needs its own external keys (a list of strings)")
            binding, scope = call.get("binding"), call.get("scope") or running.scope
            if not isinstance(binding, str) or not binding or not isinstance(scope, str):
                raise WorkError("a successor needs a binding and, if not this Work's, a scope (strings)")
            # As for a child: a successor that could never run is refused now, not at completion.
            if problem := self.scopes.scope_problem(scope=scope, binding=binding):
                raise WorkError(problem)
            running.successor = {
                "binding": binding,
                "keys": keys,
                "data": call.get("data"),
                "scope": scope,
            }
            return "created when this Work completes"
        if op == "schedule":
            timer = timer_schedule(
                after=call.get("after"),
                type=call.get("type"),
                data=call.get("data"),
                clock=self.clock,
                **authority,
            )
            return timer.pk
        if op == "received":
            self.consume(running, [call.get("seq")])
            return None
        if op == "complete":
            return None  # the result is kept by the execution; the exit completes the Work
        raise WorkError(f"unknown call {op!r}")

    def consume(self, running: Running, seqs: list[Any]) -> None:
        with transaction.atomic():
            ids = list(
                WorkInput.objects.filter(
                    work_id=running.work_id, event_id__in=seqs, state="pending"
                ).values_list("pk", flat=True)
            )
            if ids:
                consume_inputs_in_tx(input_ids=ids, clock=self.clock, **authority(running))
        self._touched.add(running.work_id)

    def answer_wait(self, running: Running, state: str, woken_by: int | None) -> None:
        call_id, running.wait_call, running.wait_id = running.wait_call, None, None
        value = None
        if state == WaitState.WOKEN and woken_by is not None:
            event = Event.objects.filter(seq=woken_by).first()
            value = event_as_input(event) if event is not None else None
            try:
                self.consume(running, [woken_by])
            except WorkError:
                logger.info(
                    "attempt.wake_input_taken", extra={"attempt": running.attempt_id, "event": woken_by}
                )
        if call_id is not None:
            running.execution.reply(call_id, ok=True, value=value)
        self._touched.add(running.work_id)
