"""What the engines read of a Work: :class:`WorkView` (its state, latest and active attempt,
active wait, queued input), read for many Works in a fixed number of queries
(:func:`read_work_views`), and the binding the Work runs on next (:func:`addressed_binding`).
The router decides with them; the work loop dispatches with them."""

from __future__ import annotations

import operator
from collections.abc import Iterable
from datetime import datetime

from django.db.models import OuterRef, Q, Subquery

from infra.frozen import frozen
from infra.queries import CompiledOnce, Listed
from worklife.models import (
    ACTIVE_ATTEMPT_STATES,
    TERMINAL_STATUSES,
    Attempt,
    Wait,
    WaitState,
    Work,
    WorkInput,
)

_TERMINAL = frozenset(status.value for status in TERMINAL_STATUSES)


@frozen
class AttemptView:
    id: int
    number: int
    binding: str
    capabilities: frozenset[str]
    lease_epoch: int
    state: str


@frozen
class WaitView:
    id: int
    name: str
    match: dict
    timeout_at: datetime | None
    blocked_reason: str = ""


@frozen
class WorkView:
    """What routing reads of a Work. ``id`` is negative for Work a window creates."""

    id: int
    scope: str
    status: str
    binding: str = ""
    retry_binding: str = ""
    rebind_binding: str = ""
    rebind_after_attempt: int | None = None
    active_attempt: AttemptView | None = None
    latest_attempt: AttemptView | None = None
    active_wait: WaitView | None = None
    queued_binding: str = ""
    max_input_seq: int = 0

    @property
    def terminal(self) -> bool:
        return self.status in _TERMINAL


def addressed_binding(work: WorkView) -> str:
    """The binding the Work runs on next: its queued input's, else its retry state's, else
    the newer of its last rebind and its latest attempt's (R30)."""
    if work.queued_binding:
        return work.queued_binding
    if work.retry_binding:
        return work.retry_binding
    latest = work.latest_attempt
    if work.rebind_binding and (latest is None or (work.rebind_after_attempt or 0) >= latest.number):
        return work.rebind_binding
    if latest is not None:
        return latest.binding
    return work.binding


# The Work columns a WorkView copies, under the names it uses: its first fields, in its order
# (read_work_views builds it by position; a test checks the order).
WORK_VIEW_FIELDS = (
    "id",
    "scope",
    "status",
    "binding",
    "retry_binding",
    "rebind_binding",
    "rebind_after_attempt",
)


def work_views_query(ids: list[int]):
    pending_queue = WorkInput.objects.filter(work=OuterRef("pk"), state="pending", kind="queue").order_by(
        "-seq"
    )
    latest_input = WorkInput.objects.filter(work=OuterRef("pk")).order_by("-seq")
    latest_attempt = Attempt.objects.filter(work=OuterRef("pk")).order_by("-number")
    return (
        Work.objects.filter(pk__in=Listed(ids))
        .annotate(
            queued_binding=Subquery(pending_queue.values("binding")[:1]),
            max_input_seq=Subquery(latest_input.values("seq")[:1]),
            latest_attempt_id=Subquery(latest_attempt.values("pk")[:1]),
        )
        .values(*WORK_VIEW_FIELDS, "queued_binding", "max_input_seq", "latest_attempt_id")
    )


_ATTEMPT_VIEW_FIELDS = ("pk", "number", "binding", "capabilities", "lease_epoch", "state", "work_id")

# Read on every pass that touches Work: built and compiled once per shape (CompiledOnce).
_WORK_VIEWS = CompiledOnce(work_views_query)
_ATTEMPTS_OF = CompiledOnce(
    lambda attempt_ids, ids: Attempt.objects.filter(
        Q(pk__in=Listed(attempt_ids)) | Q(work_id__in=Listed(ids), state__in=ACTIVE_ATTEMPT_STATES)
    ).values_list(*_ATTEMPT_VIEW_FIELDS)
)
_ACTIVE_ATTEMPTS_OF = CompiledOnce(
    lambda ids: Attempt.objects.filter(work_id__in=Listed(ids), state__in=ACTIVE_ATTEMPT_STATES).values_list(
        *_ATTEMPT_VIEW_FIELDS
    )
)


def read_work_views(work_ids: Iterable[int]) -> dict[int, WorkView]:
    """What routing (and trace) reads of these Works, in a fixed number of queries."""
    ids = sorted(set(work_ids))
    if not ids:
        return {}
    names, rows = _WORK_VIEWS.run(ids)
    # Each row's WORK_VIEW_FIELDS (WorkView's first fields, in its order), then the three
    # annotations: read by position, no dict a row (a window reads hundreds of Works).
    fields = operator.itemgetter(*(names.index(name) for name in WORK_VIEW_FIELDS))
    queued_at, max_seq_at, latest_at = (
        names.index(name) for name in ("queued_binding", "max_input_seq", "latest_attempt_id")
    )
    attempt_ids = [row[latest_at] for row in rows if row[latest_at]]
    attempts = {
        pk: (AttemptView(pk, number, binding, frozenset(capabilities or ()), epoch, state), work_id)
        for pk, number, binding, capabilities, epoch, state, work_id in (
            _ATTEMPTS_OF.rows(attempt_ids, ids) if attempt_ids else _ACTIVE_ATTEMPTS_OF.rows(ids)
        )
    }
    active = {work_id: a for a, work_id in attempts.values() if a.state in ACTIVE_ATTEMPT_STATES}
    id_at, status_at = names.index("id"), names.index("status")
    waiting = [row[id_at] for row in rows if row[status_at] == "waiting"]
    waits = {}
    if waiting:
        for wait in Wait.objects.filter(work_id__in=Listed(waiting), state=WaitState.ACTIVE).order_by(
            "created_at", "pk"
        ):
            waits.setdefault(wait.work_id, wait)
    views: dict[int, WorkView] = {}
    for row in rows:
        work = fields(row)
        work_id = work[0]
        latest = attempts.get(row[latest_at])
        wait = waits.get(work_id)
        views[work_id] = WorkView(
            *work,
            active.get(work_id),
            latest[0] if latest else None,
            (
                WaitView(wait.pk, wait.name, dict(wait.match or {}), wait.timeout_at, wait.blocked_reason)
                if wait
                else None
            ),
            row[queued_at] or "",
            row[max_seq_at] or 0,
        )
    return views
