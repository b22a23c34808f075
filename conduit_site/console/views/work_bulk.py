"""Bulk Retry and Cancel on the Work list.

The Work list is a form: a checkbox per Work (or "all matching this filter") and a Retry or
Cancel button POST here. Without ``confirm`` the answer is the confirmation page, which shows
how many Work the control will act on and carries the choice on, with that count; with
``confirm`` the set is read again and, when it still holds that many Work, stored as a bulk job
(:func:`controls.jobs.work_bulk_job`) and the answer is the job's page, where its progress and
each refusal show as the route loop runs it. Works without JavaScript. Needs the control's own
permission (403 without it).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from causal.clock import Clock, system_clock
from conduit_site.console.views.common import query_string
from conduit_site.console.views.work_controls import require_permission
from controls.bulk import (
    BULK_ACTIONS,
    BULK_LIMIT,
    BulkCountChanged,
    bulk_action,
    work_bulk_ids,
)
from controls.jobs import work_bulk_job
from controls.work import PERMISSIONS, WorkControl, WorkControlInvalid
from worklife.selectors import WorkFilter

TEMPLATE = "worklife/work_bulk.html"
# The confirmation page names at most this many of the chosen Work.
SHOWN = 50
VERBS = {WorkControl.RETRY: "Retry", WorkControl.CANCEL: "Cancel"}
EXPLAIN = {
    WorkControl.RETRY: "Each parked or backing-off Work's input is ready again with a fresh attempt budget: "
    "it runs at once, unless its binding only queues input (no executor) or cannot run, which runs nothing "
    "until the Work is rebound. Any other Work is refused and left as it is.",
    WorkControl.CANCEL: "Each live Work is cancelled: its attempts, waits and timers end and it takes no more "
    "input. Terminal Work is refused and left as it is.",
}

# The trusted clock the controls use (tests inject a fake one).
clock: Clock = system_clock


@login_required
@require_POST
def work_bulk_view(request: HttpRequest) -> HttpResponse:
    """Confirm (without ``confirm``) or apply (with it) Retry or Cancel to the chosen Work."""
    if not any(request.user.has_perm(PERMISSIONS[a]) for a in BULK_ACTIONS.values()):
        require_permission(request, WorkControl.RETRY)  # neither bulk control: 403 first
    try:
        action = bulk_action(request.POST.get("action"))
    except WorkControlInvalid as invalid:
        return render(request, TEMPLATE, {"section": "work", "error": invalid.message}, status=400)
    require_permission(request, action)
    filters, everything = _filters(request), request.POST.get("all") == "1"
    params = {
        "scope": filters.scope,
        "status": filters.status,
        "binding": filters.binding,
        "key": filters.key,
    }
    context: dict[str, Any] = {
        "section": "work",
        "action": action,
        "action_name": request.POST["action"],
        "verb": VERBS[action],
        "explain": EXPLAIN[action],
        "all": everything,
        "filter_params": params,
        "back_url": reverse("work-list") + query_string(params),
        "limit": BULK_LIMIT,
    }
    try:
        if everything:
            ids = work_bulk_ids(filters=filters, now=clock())
        else:
            ids = work_bulk_ids(ids=[int(i) for i in request.POST.getlist("ids") if i.isdigit()], now=clock())
    except WorkControlInvalid as invalid:
        return render(request, TEMPLATE, {**context, "error": invalid.message}, status=400)
    if not ids:
        return render(request, TEMPLATE, {**context, "error": "No Work is selected."}, status=400)
    context.update(ids=ids, shown=ids[:SHOWN], count=len(ids))
    if request.POST.get("confirm") != "1":
        return render(request, TEMPLATE, context)
    # The set is read again on confirming: when it is another number of Work than the operator
    # was shown (more began to match the filter, or ids vanished), nothing is done and the new
    # count is confirmed instead.
    confirmed = request.POST.get("count", "")
    try:
        job = work_bulk_job(
            action=action,
            ids=None if everything else ids,
            filters=filters if everything else None,
            count=int(confirmed) if confirmed.isdigit() else confirmed,
            user=request.user,
            clock=clock,
        )
    except WorkControlInvalid as invalid:
        return render(request, TEMPLATE, {**context, "error": invalid.message}, status=400)
    except BulkCountChanged as changed:
        return render(request, TEMPLATE, {**context, "changed_from": changed.confirmed}, status=409)
    return redirect("job-detail", job_id=job.pk)


def _filters(request: HttpRequest) -> WorkFilter:
    try:
        return WorkFilter(
            **{name: request.POST.get(name, "") for name in ("scope", "status", "binding", "key")}
        )
    except ValueError:
        return WorkFilter()
