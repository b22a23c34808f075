"""Bulk operator controls on Work: retry or cancel several Work at once.

Each Work goes through its own control (:func:`controls.work.work_retry` or
``work_cancel``): one transaction and one control Event per Work, exactly as one at a time, so a
refusal of one leaves the others done. The Work are named by ids or by a Work list filter
(:class:`worklife.selectors.WorkFilter`), at most :data:`BULK_LIMIT` of them in one request; a
filter's set is acted on only when it still holds the number of Work the caller confirmed.
Who may act is the caller's check, as for each control (the control's own permission).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser

import controls.work
from causal.clock import Clock
from controls.common import actor_name
from controls.work import WorkControl, WorkControlInvalid, WorkControlRefused
from worklife.models import Work
from worklife.selectors import WorkFilter, work_filtered

logger = logging.getLogger("conduit.routing")

# The most Work one bulk request acts on: a larger set is refused before anything is done.
BULK_LIMIT = 10_000
# The controls a bulk request takes, by the name the console, the API and the CLI use.
BULK_ACTIONS = {"retry": WorkControl.RETRY, "cancel": WorkControl.CANCEL}
_DONE = {WorkControl.RETRY: "retried", WorkControl.CANCEL: "cancelled"}


@dataclass(frozen=True, slots=True)
class BulkOutcome:
    """What the control did to one Work: done (with its control Event) or refused (why)."""

    work_id: int
    ok: bool
    message: str
    control_seq: int | None = None
    error: str = ""  # the refusal's code

    def as_dict(self) -> dict[str, Any]:
        return {
            "work_id": self.work_id,
            "ok": self.ok,
            "control_seq": self.control_seq,
            "error": self.error,
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class BulkResult:
    """What a bulk control did, Work by Work, in id order."""

    action: WorkControl
    by: str
    outcomes: list[BulkOutcome] = field(default_factory=list)

    @property
    def done(self) -> list[BulkOutcome]:
        return [o for o in self.outcomes if o.ok]

    @property
    def refused(self) -> list[BulkOutcome]:
        return [o for o in self.outcomes if not o.ok]

    @property
    def summary(self) -> str:
        """The result in one line: "retried 3, refused 1 (Work 7: …)"."""
        text = f"{_DONE[self.action]} {len(self.done)}"
        if self.refused:
            why = "; ".join(f"Work {o.work_id}: {o.message}" for o in self.refused[:3])
            more = f"; {len(self.refused) - 3} more" if len(self.refused) > 3 else ""
            text += f", refused {len(self.refused)} ({why}{more})"
        return text

    def as_dict(self) -> dict[str, Any]:
        return {
            "action": self.action.value,
            "by": self.by,
            "done": len(self.done),
            "refused": len(self.refused),
            "summary": self.summary,
            "outcomes": [o.as_dict() for o in self.outcomes],
        }


def bulk_action(name: Any) -> WorkControl:
    """The control a bulk request names (``retry`` or ``cancel``), or :class:`WorkControlInvalid`."""
    if not isinstance(name, str) or name not in BULK_ACTIONS:
        raise WorkControlInvalid("action", f"expected one of {', '.join(BULK_ACTIONS)}, got {name!r}")
    return BULK_ACTIONS[name]


def work_bulk_ids(
    *,
    ids: Sequence[int] | None = None,
    filters: WorkFilter | None = None,
    now: datetime,
    limit: int = BULK_LIMIT,
) -> list[int]:
    """The ids a bulk request names, in id order: ``ids`` (deduplicated) or the Work matching
    ``filters`` at ``now``. Refuses (:class:`WorkControlInvalid`) neither or both, and more
    than ``limit``."""
    if (ids is None) == (filters is None):
        raise WorkControlInvalid(None, "name the Work by ids or by a filter, not both")
    if ids is not None:
        if not all(isinstance(i, int) and not isinstance(i, bool) and i > 0 for i in ids):
            raise WorkControlInvalid("ids", "expected a list of Work ids (positive integers)")
        chosen = sorted(set(ids))
    else:
        chosen = list(
            work_filtered(filters, now=now).order_by("id").values_list("pk", flat=True)[: limit + 1]
        )
    if len(chosen) > limit:
        raise WorkControlInvalid(
            "ids" if ids is not None else "filter", f"at most {limit} Work in one request; narrow the filter"
        )
    return chosen


class BulkCountChanged(Exception):
    """ "All matching" a filter now matches another number of Work than the caller confirmed
    (HTTP 409): nothing was done; confirming the new ``count`` acts on them."""

    code = "count_changed"

    def __init__(self, *, confirmed: int, count: int, noun: str = "Work") -> None:
        self.confirmed = confirmed
        self.count = count
        self.message = (
            f"the request now names {count} {noun}, not the {confirmed} confirmed: nothing was done; "
            f"confirm {count} to act on them"
        )
        super().__init__(self.message)

    def details(self) -> dict[str, Any]:
        """The JSON body of the refusal."""
        return {"error": self.code, "message": self.message, "confirmed": self.confirmed, "count": self.count}


def work_bulk_count_check(*, work_ids: Sequence[int], count: Any) -> None:
    """Check the number of Work a caller confirmed (``count``) against the ids a bulk request
    names now. Required for "all matching" a filter, whose set grows while an operator reads:
    refuses a missing or malformed one (:class:`WorkControlInvalid`) and another number
    (:class:`BulkCountChanged`), so that no Work is acted on unseen."""
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise WorkControlInvalid(
            "count",
            "acting on all Work matching a filter needs the number of Work confirmed (count, a whole "
            f"number), got {count!r}: Work that began to match since would be acted on unseen",
        )
    if count != len(work_ids):
        raise BulkCountChanged(confirmed=count, count=len(work_ids))


def work_bulk(
    *, action: WorkControl, work_ids: Sequence[int], user: AbstractBaseUser | str, clock: Clock
) -> BulkResult:
    """Apply ``action`` (retry or cancel) to each of ``work_ids`` through its own control, one
    transaction and one control Event per Work; a refusal (or an unknown id) is recorded as
    that Work's outcome and the others go on."""
    if action not in _DONE:
        raise WorkControlInvalid("action", f"{action} is not a bulk control")
    service = controls.work.work_retry if action == WorkControl.RETRY else controls.work.work_cancel
    result = BulkResult(action=action, by=actor_name(user))
    for work_id in work_ids:
        try:
            done = service(work_id=work_id, user=user, clock=clock)
        except WorkControlRefused as refused:
            result.outcomes.append(
                BulkOutcome(work_id=work_id, ok=False, message=refused.message, error=refused.code.value)
            )
        except Work.DoesNotExist:
            result.outcomes.append(
                BulkOutcome(work_id=work_id, ok=False, message="no such Work", error="not_found")
            )
        else:
            result.outcomes.append(
                BulkOutcome(work_id=work_id, ok=True, message=done.message, control_seq=done.control_seq)
            )
    logger.info(
        "work_control.bulk",
        extra={
            "action": action.value,
            "by": result.by,
            "done": len(result.done),
            "refused": len(result.refused),
        },
    )
    return result
