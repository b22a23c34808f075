"""Waits: an attempt parks on a wait, an Event wakes it (through the ``core.wait.woken``
bridge the causal limits may block) or its timeout ends it, and the parked attempt runs again.

The router and the work loop share these transitions (the router wakes and times out waits
in its commit, the loop times out due ones and retries blocked wakes), so each exists once
(W7: the router still makes no execution call). Each function is one short transaction, or
says ``_in_tx`` and runs in its caller's.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F

from causal.clock import Clock
from causal.limits import Causal, CausalRefused, derived_atomic
from causal.models import Event
from causal.services import Envelope, assert_in_tx
from infra.live import work_changed_on_commit
from worklife.attempts import current_attempt_in_tx, work_status_set
from worklife.errors import WorkError
from worklife.models import (
    Attempt,
    AttemptState,
    DependencySubscription,
    InputKind,
    InputState,
    Wait,
    WaitState,
    Work,
    WorkInput,
    WorkStatus,
)

WAIT_WOKEN = "core.wait.woken"
BRIDGE_SOURCE = "core.routing"
SCOPE_MAX = DependencySubscription._meta.get_field("scope").max_length


# --- parking an attempt ------------------------------------------------------------------------


def attempt_wait(
    *,
    attempt_id: int,
    lease_epoch: int,
    match: dict,
    clock: Clock,
    name: str = "",
    timeout_at: datetime | None = None,
    scope: str = "",
) -> Wait:
    """Park the attempt on a wait: the Work waits for an Event matching ``match`` (type and
    source globs, and optionally ``keys``) or for ``timeout_at``; with ``scope``, an Event of
    that scope matching ``match`` wakes it too, whichever Work it routes to (a dependency
    subscription, R42)."""
    with transaction.atomic():
        attempt = current_attempt_in_tx(attempt_id, lease_epoch)
        now = clock()
        wait = Wait.objects.create(
            work_id=attempt.work_id,
            attempt=attempt,
            name=name,
            match=dict(match),
            timeout_at=timeout_at,
            created_at=now,
        )
        if scope:
            DependencySubscription.objects.create(
                work_id=attempt.work_id, wait=wait, scope=scope, match=dict(match), created_at=now
            )
        attempt.state = AttemptState.WAITING
        attempt.save(update_fields=["state"])
        work_status_set(attempt.work, status=WorkStatus.WAITING, now=now)
        return wait


def attempt_wait_for(
    *,
    attempt_id: int,
    lease_epoch: int,
    match: dict,
    timeout: float | None,
    name: str,
    clock: Clock,
    scope: Any = "",
) -> Wait:
    """Park the attempt until an Event of its Work matches ``match`` or ``timeout`` seconds
    pass (R41); with ``scope``, until an Event of that scope matches too (R42: the caller
    checks that the configuration has the scope). Fenced by the attempt's authority."""
    if scope is None:
        scope = ""
    if not isinstance(scope, str) or len(scope) > SCOPE_MAX:
        raise WorkError(f"scope must be a scope path (a string of at most {SCOPE_MAX} characters)")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0
    ):
        raise WorkError(f"timeout must be a non-negative number of seconds, got {timeout!r}")
    clean = {k: match[k] for k in ("type", "source") if isinstance(match.get(k), str) and match.get(k)}
    keys = match.get("keys")
    if keys:
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise WorkError("keys must be a list of strings")
        clean["keys"] = keys
    return attempt_wait(
        attempt_id=attempt_id,
        lease_epoch=lease_epoch,
        match=clean,
        name=str(name or "")[:128],
        timeout_at=clock() + timedelta(seconds=timeout) if timeout is not None else None,
        clock=clock,
        scope=scope,
    )


# --- ending a wait -----------------------------------------------------------------------------


def wait_wake_in_tx(*, wait_id: int, event_seq: int, now: datetime) -> bool:
    """Wake an active wait with the Event that won it: the parked attempt runs again."""
    return _wait_end_in_tx(
        wait_id=wait_id, now=now, state=WaitState.WOKEN, woken_by_id=event_seq, blocked_reason=""
    )


def wait_time_out_in_tx(*, wait_id: int, now: datetime) -> bool:
    """End an active wait at its timeout: the parked attempt runs again and learns that
    nothing came (the wait returns ``None``)."""
    return _wait_end_in_tx(wait_id=wait_id, now=now, state=WaitState.TIMED_OUT)


def _wait_end_in_tx(*, wait_id: int, now: datetime, **ended: Any) -> bool:
    """End the wait ``wait_id`` if it is still active (``ended``: its new state and what ended
    it), end its dependency subscriptions and resume its parked attempt; ``False`` when it was
    no longer active."""
    assert_in_tx()
    wait = (
        Wait.objects.filter(pk=wait_id, state=WaitState.ACTIVE).values_list("work_id", "attempt_id").first()
    )
    if wait is None:
        return False
    work_id, attempt_id = wait
    Wait.objects.filter(pk=wait_id).update(ended_at=now, **ended)
    DependencySubscription.objects.filter(wait_id=wait_id, active=True).update(active=False)
    _resume_in_tx(work_id=work_id, attempt_id=attempt_id, now=now)
    return True


def wait_block_in_tx(*, wait_id: int, reason: str, event_seq: int) -> None:
    """The causal limits refused the wake bridge: the wait is blocked with the reason and the
    Event is kept to try the wake again once capacity returns."""
    assert_in_tx()
    Wait.objects.filter(pk=wait_id, state=WaitState.ACTIVE).update(blocked_reason=reason[:500])
    Wait.objects.filter(pk=wait_id, state=WaitState.ACTIVE, blocked_event__isnull=True).update(
        blocked_event_id=event_seq
    )


def _resume_in_tx(*, work_id: int, attempt_id: int | None, now: datetime) -> None:
    if attempt_id is not None:
        Attempt.objects.filter(pk=attempt_id, state=AttemptState.WAITING).update(state=AttemptState.RUNNING)
    running = Attempt.objects.filter(work_id=work_id, state=AttemptState.RUNNING).exists()
    Work.objects.filter(pk=work_id, status=WorkStatus.WAITING).update(
        status=WorkStatus.RUNNING if running else WorkStatus.READY, version=F("version") + 1, updated_at=now
    )
    work_changed_on_commit([work_id])


# --- the wake bridge ---------------------------------------------------------------------------


def wake_bridge_envelope(*, wait_id: int, work_id: int, scope: str, event_seq: int) -> Envelope:
    """The ``core.wait.woken`` bridge Event that wakes ``wait_id`` from Event ``event_seq``."""
    return Envelope(
        id=f"wait-woken/{wait_id}",
        source=BRIDGE_SOURCE,
        type=WAIT_WOKEN,
        scope=scope,
        work_id=work_id,
        data={"work": work_id, "wait": wait_id, "event": event_seq},
    )


def wake_bridge_in_tx(*, causal: Causal, wait_id: int, work_id: int, scope: str, event_seq: int) -> None:
    """Derive the ``core.wait.woken`` bridge that wakes a parked attempt from the Event that
    won its wait, through the causal limits; raises ``CausalRefused`` when they refuse it."""
    assert_in_tx()
    envelope = wake_bridge_envelope(wait_id=wait_id, work_id=work_id, scope=scope, event_seq=event_seq)
    causal.derive_in_tx(parent=Event(seq=event_seq), envelope=envelope)


# --- the work loop's sweeps --------------------------------------------------------------------


def waits_expire(*, clock: Clock, limit: int = 100) -> list[int]:
    """Time out the active waits whose timeout is due; returns their ids."""
    now = clock()
    due = list(
        Wait.objects.filter(state=WaitState.ACTIVE, timeout_at__lte=now)
        .order_by("timeout_at")
        .values_list("pk", flat=True)[:limit]
    )
    expired = []
    for wait_id in due:
        with transaction.atomic():
            if wait_time_out_in_tx(wait_id=wait_id, now=now):
                expired.append(wait_id)
    return expired


def waits_retry_blocked(*, causal: Causal, clock: Clock, limit: int = 50) -> list[int]:
    """Try again the wakes the causal limits refused (R41): a rate refusal passes once the
    next minute restores capacity. Returns the ids of the waits woken."""
    blocked = list(
        Wait.objects.filter(state=WaitState.ACTIVE, blocked_event__isnull=False)
        .select_related("work")
        .order_by("pk")[:limit]
    )
    woken = []
    for wait in blocked:
        now = clock()
        try:
            with derived_atomic():
                wake_bridge_in_tx(
                    causal=causal,
                    wait_id=wait.pk,
                    work_id=wait.work_id,
                    scope=wait.work.scope,
                    event_seq=wait.blocked_event_id,
                )
                WorkInput.objects.filter(
                    work_id=wait.work_id, event_id=wait.blocked_event_id, state=InputState.PENDING
                ).update(kind=InputKind.QUEUE)
                if wait_wake_in_tx(wait_id=wait.pk, event_seq=wait.blocked_event_id, now=now):
                    woken.append(wait.pk)
        except CausalRefused as refused:
            with transaction.atomic():
                Wait.objects.filter(pk=wait.pk, state=WaitState.ACTIVE).update(
                    blocked_reason=f"causal limits refuse the wake ({refused.kind}): {refused.detail}"[:500]
                )
    return woken
