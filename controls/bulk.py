"""Bulk operator controls on Work: which Work a bulk retry or cancel names, and the count check.

The Work are named by ids or by a Work list filter (:class:`worklife.selectors.WorkFilter`), at
most :data:`BULK_LIMIT` of them in one request, and are acted on only when they are still the
number of Work the caller confirmed. The job that acts on them, one control Event per Work, is
:mod:`controls.jobs`. Who may act is the caller's check, as for each control (the control's own
permission).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from controls.work import WorkControl, WorkControlInvalid
from worklife.selectors import WorkFilter, work_filtered

# The most Work one bulk request acts on: a larger set is refused before anything is done.
BULK_LIMIT = 10_000
# The controls a bulk request takes, by the name the console, the API and the CLI use.
BULK_ACTIONS = {"retry": WorkControl.RETRY, "cancel": WorkControl.CANCEL}


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
    names now. Required on every path (the console, the API, the CLI), by ids as by a filter,
    whose set grows while an operator reads: refuses a missing or malformed one (:class:`WorkControlInvalid`) and another number
    (:class:`BulkCountChanged`), so that no Work is acted on unseen."""
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise WorkControlInvalid(
            "count",
            "acting on several Work needs the number of Work confirmed (count, a whole number), got "
            f"{count!r}: Work that began to match since, or ids mistyped, would be acted on unseen",
        )
    if count != len(work_ids):
        raise BulkCountChanged(confirmed=count, count=len(work_ids))
