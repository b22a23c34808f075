"""The Work lifecycle: complete, cancel, child and successor Work (R47–R50), and the Work an
operator opens or rebinds.

Each operation is one transaction (an ``_in_tx`` one runs in its caller's). Child and successor
Work are published together with a causally linked ``core.work.created`` Event that goes through
the causal limits (R50, R51).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import F, Q

from causal.checks import EnvelopeInvalid, check_envelope
from causal.clock import Clock
from causal.limits import Causal, derived_atomic
from causal.models import Event, EventKey, RouteState
from causal.services import Envelope, assert_in_tx
from infra.live import work_changed_on_commit
from worklife.attempts import (
    attempts_end_in_tx,
    attempts_output_in_tx,
    check_authority,
    current_attempt_in_tx,
)
from worklife.errors import WorkError, WorkTerminal
from worklife.models import (
    ACTIVE_ATTEMPT_STATES,
    Attempt,
    AttemptState,
    CorrelationKey,
    DependencySubscription,
    InputKind,
    InputState,
    Intent,
    IntentState,
    Timer,
    TimerState,
    Wait,
    WaitState,
    Work,
    WorkInput,
    WorkStatus,
)

WORK_CREATED = "core.work.created"
CORE_SOURCE = "core.worklife"


class UnroutedInput(WorkError):
    """Accepted input for this Work is not routed yet: completing would overtake it (R47)."""


@dataclass(frozen=True, slots=True)
class Created:
    work: Work
    event: Event


def unrouted_inputs_for(work_ids: Sequence[int]) -> dict[int, list[int]]:
    """Seqs of accepted, still unrouted Events whose explicit targets name one of these Work
    (its id, one of its attempts, or a key it owns), by Work id, in three queries; Work with
    none are left out."""
    ids = list(work_ids)
    owners = {
        (scope, key): work_id
        for scope, key, work_id in CorrelationKey.objects.filter(work_id__in=ids).values_list(
            "scope", "key", "work_id"
        )
    }
    found: dict[int, set[int]] = {}
    if owners:
        owned = CorrelationKey.objects.filter(work_id__in=ids)
        for seq, scope, key in EventKey.objects.filter(
            event__route_state=RouteState.UNROUTED,
            scope__in=owned.values("scope"),
            key__in=owned.values("key"),
        ).values_list("event_id", "scope", "key"):
            work_id = owners.get((scope, key))
            if work_id is not None:
                found.setdefault(work_id, set()).add(seq)
    attempts = Attempt.objects.filter(work_id__in=ids)
    rows = list(
        Event.objects.filter(route_state=RouteState.UNROUTED)
        .filter(Q(work_id__in=ids) | Q(execution_id__in=attempts.values("pk")))
        .values_list("seq", "work_id", "execution_id")
    )
    executions = [execution_id for _, _, execution_id in rows if execution_id is not None]
    attempt_work = dict(attempts.filter(pk__in=executions).values_list("pk", "work_id")) if executions else {}
    for seq, work_id, execution_id in rows:
        if work_id in ids:
            found.setdefault(work_id, set()).add(seq)
        if execution_id in attempt_work:
            found.setdefault(attempt_work[execution_id], set()).add(seq)
    return {work_id: sorted(seqs) for work_id, seqs in found.items()}


def works_complete(
    *,
    authorities: Sequence[tuple[int, int]],
    clock: Clock,
    outputs: dict[int, dict] | None = None,
) -> dict[int, Work | WorkError]:
    """Complete the Work of several attempts (of distinct Work) in one transaction and a fixed
    number of statements (R47); returns, by attempt id, the Work or why it was refused
    (:class:`~worklife.errors.StaleLease`, :class:`UnroutedInput`, …)."""
    outputs = outputs or {}
    epochs = dict(authorities)
    results: dict[int, Work | WorkError] = {}
    with transaction.atomic():
        now = clock()
        current = {
            a.pk: a
            for a in Attempt.objects.select_for_update(of=("self",))
            .select_related("work")
            .filter(pk__in=list(epochs))
        }
        eligible: list[Attempt] = []
        for attempt_id, epoch in epochs.items():
            attempt = current.get(attempt_id)
            try:
                check_authority(attempt, attempt_id=attempt_id, lease_epoch=epoch)
            except WorkError as refused:
                results[attempt_id] = refused
                continue
            eligible.append(attempt)
        # Lock the Work rows as a single complete did: a concurrent route commit waits here.
        list(Work.objects.select_for_update().filter(pk__in=[a.work_id for a in eligible]).values_list("pk"))
        held = unrouted_inputs_for([a.work_id for a in eligible]) if eligible else {}
        done = []
        for attempt in eligible:
            waiting = held.get(attempt.work_id)
            if waiting:
                results[attempt.pk] = UnroutedInput(
                    f"Work {attempt.work_id} has unrouted input: " + ", ".join(f"#{s}" for s in waiting[:10])
                )
            else:
                done.append(attempt)
        if not done:
            return results
        attempts_end_in_tx(attempts=done, state=AttemptState.SUCCEEDED, now=now)
        attempts_output_in_tx({a.pk: outputs[a.pk] for a in done if a.pk in outputs})
        work_ids = [a.work_id for a in done]
        remaining = set(
            WorkInput.objects.filter(work_id__in=work_ids, state=InputState.PENDING).values_list(
                "work_id", flat=True
            )
        )
        reset = {
            "failures": 0,
            "losses": 0,
            "pending_run": False,
            "retry_at": None,
            "parked_at": None,
            "last_error": "",
        }
        ready = [w for w in work_ids if w in remaining]
        completed = [w for w in work_ids if w not in remaining]
        if ready:
            Work.objects.filter(pk__in=ready).update(
                status=WorkStatus.READY, version=F("version") + 1, updated_at=now, ended_at=None, **reset
            )
        if completed:
            Work.objects.filter(pk__in=completed).update(
                status=WorkStatus.COMPLETED, version=F("version") + 1, updated_at=now, ended_at=now, **reset
            )
        work_changed_on_commit(work_ids)
        works = Work.objects.in_bulk(work_ids)
        for attempt in done:
            results[attempt.pk] = works[attempt.work_id]
    return results


def work_cancel_in_tx(*, work_id: int, clock: Clock) -> Work:
    """Cancel a Work atomically (R48): its active attempts and waits are cancelled, its timers
    removed, its pending input leaves the queue, and the Work is terminal. Process cleanup
    follows the commit, in the scheduler. Needs no derived-Event token.

    Meant for the cancel control's transaction (``controls.work.work_cancel``); it opens a
    savepoint of its own, so it also runs alone."""
    with transaction.atomic():
        work = Work.objects.select_for_update().get(pk=work_id)
        if work.is_terminal:
            raise WorkTerminal(f"Work {work_id} is already {work.status}")
        works_cancel_in_tx(works=[work], now=clock())
        work.refresh_from_db()
        return work


def works_cancel_in_tx(*, works: Sequence[Work], now: datetime) -> tuple[list[int], int]:
    """Cancel many Work at once (R48), as :func:`work_cancel_in_tx` does one, in a fixed number
    of statements whatever their number: ``works`` are rows the caller locked and read; the live
    ones are cancelled (their active attempts ended, waits cancelled, timers removed, pending
    input dropped, intents superseded, subscriptions ended). Returns their ids and how many
    active attempts ended (their work loops stop the processes after the commit)."""
    assert_in_tx()
    ids = [w.pk for w in works if not w.is_terminal]
    if not ids:
        return [], 0
    active = list(
        Attempt.objects.select_for_update().filter(work_id__in=ids, state__in=ACTIVE_ATTEMPT_STATES)
    )
    attempts_end_in_tx(attempts=active, state=AttemptState.CANCELLED, now=now)
    Wait.objects.filter(work_id__in=ids, state=WaitState.ACTIVE).update(
        state=WaitState.CANCELLED, ended_at=now
    )
    Timer.objects.filter(work_id__in=ids, state=TimerState.PENDING).update(state=TimerState.CANCELLED)
    WorkInput.objects.filter(work_id__in=ids, state=InputState.PENDING).update(state=InputState.DROPPED)
    Intent.objects.filter(work_id__in=ids, state=IntentState.PENDING).update(state=IntentState.SUPERSEDED)
    DependencySubscription.objects.filter(work_id__in=ids, active=True).update(active=False)
    Work.objects.filter(pk__in=ids).update(
        status=WorkStatus.CANCELLED,
        version=F("version") + 1,
        updated_at=now,
        ended_at=now,
        retry_at=None,
        pending_run=False,
    )
    work_changed_on_commit(ids)
    return ids, len(active)


def work_create_child(
    *,
    attempt_id: int,
    lease_epoch: int,
    binding: str,
    keys: Sequence[str] = (),
    data: dict | None = None,
    clock: Clock,
    causal: Causal | None = None,
) -> Created:
    """Create a child Work of the leased attempt's Work (R50): parent Work, scope and trigger
    come from the attempt, never from the caller."""
    causal = causal or Causal(clock)
    with derived_atomic():
        attempt = current_attempt_in_tx(attempt_id, lease_epoch)
        parent = attempt.work
        trigger = attempt.trigger or parent.trigger
        work = _work_new_in_tx(
            scope=parent.scope, binding=binding, parent=parent, predecessor=None, clock=clock
        )
        _keys_attach_in_tx(work=work, keys=keys, clock=clock)
        event = _work_created_in_tx(
            work=work,
            link={"parent": parent.pk, "attempt": attempt.pk},
            trigger=trigger,
            data=data,
            causal=causal,
        )
        Work.objects.filter(pk=work.pk).update(trigger=event)
        work.trigger = event
        return Created(work, event)


def work_create_successor(
    *,
    predecessor_id: int,
    scope: str,
    binding: str,
    keys: Sequence[str],
    data: dict | None = None,
    clock: Clock,
    causal: Causal | None = None,
) -> Created:
    """Create the successor of a terminal Work (R50), in ``scope`` (its target scope).

    Trusted policy code only. The predecessor must be terminal and have no successor yet;
    the successor has no parent, takes new, distinct external keys (the old keys stay with
    the predecessor) and its ``core.work.created`` Event records the link."""
    causal = causal or Causal(clock)
    with derived_atomic():
        predecessor = Work.objects.select_for_update().get(pk=predecessor_id)
        if not predecessor.is_terminal:
            raise WorkError(
                f"Work {predecessor_id} is {predecessor.status}: only terminal Work has a successor"
            )
        if Work.objects.filter(predecessor=predecessor).exists():
            raise WorkError(f"Work {predecessor_id} already has a successor")
        if not keys:
            raise WorkError("a successor needs its own external keys")
        work = _work_new_in_tx(
            scope=scope, binding=binding, parent=None, predecessor=predecessor, clock=clock
        )
        _keys_attach_in_tx(work=work, keys=keys, clock=clock)
        event = _work_created_in_tx(
            work=work,
            link={"predecessor": predecessor.pk},
            trigger=predecessor.trigger,
            data=data,
            causal=causal,
        )
        Work.objects.filter(pk=work.pk).update(trigger=event)
        work.trigger = event
        return Created(work, event)


# --- operator Work (the controls in controls.work) ----------------------------------------


def work_open_in_tx(*, scope: str, binding: str, created_by: str, now: datetime) -> Work:
    """A new, ready Work in ``scope`` on ``binding`` that an operator opened (Control.CreateWork).

    It does not run by itself (no ``pending_run``): it runs once its first input, an
    addressed operator Event, is routed to it (R30)."""
    assert_in_tx()
    work = Work.objects.create(
        scope=scope, binding=binding, created_by=created_by, created_at=now, updated_at=now
    )
    work_changed_on_commit([work.pk])
    return work


def work_trigger_set_in_tx(*, work_id: int, event: Event) -> None:
    """Record ``event`` as the Event that brought a new Work about (its first input)."""
    assert_in_tx()
    Work.objects.filter(pk=work_id, trigger__isnull=True).update(trigger=event)


@dataclass(frozen=True, slots=True)
class Rebound:
    work: Work
    after_attempt: int  # the Work's latest attempt number when rebound (0: none yet)
    retry: bool  # the Work was parked or backing off: its retry runs on the new binding


def work_rebind_in_tx(*, work_id: int, binding: str, now: datetime) -> Rebound:
    """Make ``binding`` the one the Work runs on next (Control.Rebind, R30).

    The rebind is recorded after the Work's latest attempt (``rebind_binding``,
    ``rebind_after_attempt``); a parked or backing-off Work's retry state takes it too
    (``retry_binding``), and so does its pending queued, context and held input, whose binding
    would otherwise come first. Checking that ``binding`` is in the Work's scope is the
    caller's (the configuration is routing's). Terminal Work is refused (R49)."""
    assert_in_tx()
    work = Work.objects.select_for_update().get(pk=work_id)
    if work.is_terminal:
        raise WorkTerminal(f"Work {work_id} is {work.status}: terminal Work cannot be rebound")
    latest = (
        Attempt.objects.filter(work=work).order_by("-number").values_list("number", flat=True).first() or 0
    )
    retry = work.parked_at is not None or work.retry_at is not None or work.failures > 0
    WorkInput.objects.filter(
        work=work, state=InputState.PENDING, kind__in=(InputKind.QUEUE, InputKind.CONTEXT, InputKind.HELD)
    ).update(binding=binding)
    Work.objects.filter(pk=work.pk).update(
        rebind_binding=binding,
        rebind_after_attempt=latest,
        retry_binding=binding if retry else "",
        # Waiting for a binding that can run it: the new one is looked at on the next pass.
        **({"retry_at": None, "awaiting_binding": False} if work.awaiting_binding else {}),
        version=F("version") + 1,
        updated_at=now,
    )
    work_changed_on_commit([work.pk])
    work.refresh_from_db()
    return Rebound(work, latest, retry)


# --- helpers -------------------------------------------------------------------------------------


def _work_new_in_tx(
    *, scope: str, binding: str, parent: Work | None, predecessor: Work | None, clock: Clock
) -> Work:
    now = clock()
    # A new child or successor runs without waiting for input: its core.work.created Event is
    # its first input.
    work = Work.objects.create(
        scope=scope,
        binding=binding,
        parent=parent,
        predecessor=predecessor,
        created_at=now,
        updated_at=now,
        pending_run=True,
    )
    work_changed_on_commit([work.pk])
    return work


def _keys_attach_in_tx(*, work: Work, keys: Iterable[str], clock: Clock) -> None:
    """Attach new keys; a key another Work owns is refused (keys never transfer, R26)."""
    now = clock()
    for key in dict.fromkeys(keys):
        try:
            with transaction.atomic():
                CorrelationKey.objects.create(scope=work.scope, key=key, work=work, attached_at=now)
        except IntegrityError as exc:
            owner = (
                CorrelationKey.objects.filter(scope=work.scope, key=key)
                .values_list("work_id", flat=True)
                .first()
            )
            raise WorkError(f"key {key!r} in scope {work.scope} is owned by Work {owner}") from exc


def _work_created_in_tx(
    *, work: Work, link: dict, trigger: Event | None, data: dict | None, causal: Causal
) -> Event:
    envelope = Envelope(
        id=f"work-created/{work.pk}/{uuid.uuid4().hex[:12]}",
        source=CORE_SOURCE,
        type=WORK_CREATED,
        scope=work.scope,
        data={"work": work.pk, **link, **({"data": data} if data else {})},
        work_id=work.pk,
    )
    try:
        # The data came from an attempt: held to acceptance's limits, never cut.
        check_envelope(envelope)
    except EnvelopeInvalid as invalid:
        raise WorkError(str(invalid)) from invalid
    accepted = causal.derive_in_tx(parent=trigger, envelope=envelope) if trigger else None
    if accepted is None:
        from causal.services import event_accept_in_tx

        accepted = event_accept_in_tx(envelope=envelope, clock=causal.clock)
    return accepted.event
