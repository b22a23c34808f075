"""A bulk job's page: its progress (N of M, done and refused), each refused target with why, and
Cancel. While the job runs, the progress section polls itself (htmx, every second) and stops
once the job is finished; without JavaScript a reload shows the same. Cancel needs the
permission of the job's control (403 without it)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from causal.clock import Clock, system_clock
from controls.jobs import JOB_PERMISSIONS, bulk_job_cancel, bulk_job_get, bulk_job_items
from controls.models import BulkJob, JobKind

TEMPLATE = "controls/job_detail.html"
# The refused targets the page names (the API pages through them all).
REFUSED_SHOWN = 100
TARGET_URLS = {
    JobKind.RETRY_WORK: "work-detail",
    JobKind.CANCEL_WORK: "work-detail",
    JobKind.REPLAY_EVENT: "event-detail",
}

# The trusted clock the controls use (tests inject a fake one).
clock: Clock = system_clock


def job_context(job: BulkJob) -> dict[str, Any]:
    return {
        "job": job,
        "refused_items": bulk_job_items(job, refused_only=True, limit=REFUSED_SHOWN),
        "target_url": TARGET_URLS[job.kind],
        "target_noun": "Event" if job.kind == JobKind.REPLAY_EVENT else "Work",
        "target_nouns": "Events" if job.kind == JobKind.REPLAY_EVENT else "Work",
    }


@login_required
def job_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    """The job's page, or its progress section alone for htmx's polling."""
    job = _job(job_id)
    context = {"section": "events" if job.kind == JobKind.REPLAY_EVENT else "work", **job_context(job)}
    if request.htmx:
        return render(request, f"{TEMPLATE}#job-progress", context)
    return render(request, TEMPLATE, context)


@login_required
@require_POST
def job_cancel(request: HttpRequest, job_id: int) -> HttpResponse:
    """Stop the job; back to its page."""
    job = _job(job_id)
    permission = JOB_PERMISSIONS[job.kind]
    if not request.user.has_perm(permission):
        raise PermissionDenied(f"You need the permission {permission} to cancel this job.")
    bulk_job_cancel(job_id=job.pk, user=request.user, clock=clock)
    return redirect("job-detail", job_id=job.pk)


def _job(job_id: int) -> BulkJob:
    try:
        return bulk_job_get(job_id)
    except BulkJob.DoesNotExist:
        raise Http404(f"no job has id {job_id}") from None
