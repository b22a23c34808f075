"""Replay several Events from the console: an impact preview group's "Replay
these N" button POSTs its run, change and route here (the Events are read from the run), any
other form the Events' seqs.

Without ``confirm`` the answer is the confirmation page (how many Events, which, carrying that
count); with ``confirm`` the Events are read again and, when they are still that many, stored as a
bulk job (:func:`controls.jobs.events_replay_job`) and the answer is the job's page: its progress,
each refusal, as the route loop copies them in batches. Works without JavaScript. Needs the permission
``routing.replay_event`` (403 without it).
"""

from __future__ import annotations

import re
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from causal.clock import Clock, system_clock
from conduit_site.console.views.controls import require_control_permission, safe_next
from controls.bulk import BulkCountChanged
from controls.events import REPLAY_EVENT
from controls.jobs import events_replay_job
from controls.replay import REPLAY_LIMIT, ReplayInvalid, replay_seqs
from routing.models import ImpactRun
from routing.setup.candidates import candidate_applied_as
from routing.setup.impact_runs import impact_run_get, impact_run_seqs

TEMPLATE = "routing/events_replay.html"
# The confirmation page names at most this many of the chosen Events.
SHOWN = 50
_SEPARATORS = re.compile(r"[\s,]+")

# The trusted clock the controls use (tests inject a fake one).
clock: Clock = system_clock


def chosen_seqs(post: Any) -> tuple[list[int], str]:
    """The Events a form names and how to call them: an impact preview run's group (``run``,
    ``group``, ``route``) or ``seqs``. Raises :class:`ReplayInvalid`."""
    run = post.get("run", "")
    if run:
        if not (run.isascii() and run.isdigit() and len(run) < 19):
            raise ReplayInvalid("run", "expected an impact preview's number")
        group, route = post.get("group", ""), post.get("route", "")
        try:
            preview = impact_run_get(int(run))
        except ImpactRun.DoesNotExist:
            raise ReplayInvalid("run", f"no impact preview has number {run}") from None
        if candidate_applied_as(preview.candidate_number) is None:
            # Copies route under the live configuration: before its candidate is applied they
            # would route as before (unmatched again), so a preview's groups wait for Apply.
            raise ReplayInvalid(
                "run",
                f"impact preview {run}'s candidate {preview.candidate_number} is not applied: "
                "its groups are replayed once it is (the copies then route as it does)",
            )
        seqs = impact_run_seqs(int(run), group=group, route=route)
        if not seqs:
            raise ReplayInvalid("group", f"impact preview {run} has no group {group!r} on route {route!r}")
        return replay_seqs(seqs), f"{group}{f' ({route})' if route else ''}, impact preview {run}"
    return parse_seqs(post.get("seqs", "")), post.get("label", "")[:200]


def parse_seqs(text: str) -> list[int]:
    """The seqs of a form's ``seqs`` field (separated by commas or spaces), or
    :class:`ReplayInvalid`."""
    parts = [part for part in _SEPARATORS.split(text.strip()) if part]
    if not all(part.isascii() and part.isdigit() for part in parts):
        raise ReplayInvalid("seqs", "expected Event seqs (positive integers) separated by commas or spaces")
    return replay_seqs([int(part) for part in parts])


@login_required
@require_POST
def events_replay_view(request: HttpRequest) -> HttpResponse:
    """Confirm (without ``confirm``) or apply (with it) a replay of the Events ``seqs`` names."""
    require_control_permission(request, REPLAY_EVENT)
    context: dict[str, Any] = {
        "section": "events",
        "limit": REPLAY_LIMIT,
        "next_url": safe_next(request),
    }
    try:
        seqs, context["label"] = chosen_seqs(request.POST)
    except ReplayInvalid as invalid:
        return render(request, TEMPLATE, {**context, "error": invalid.message}, status=400)
    # The confirmation carries the choice on as it came (a run's group is read again then).
    carry = (
        {name: request.POST.get(name, "") for name in ("run", "group", "route")}
        if request.POST.get("run")
        else {"seqs": " ".join(map(str, seqs)), "label": context["label"]}
    )
    context.update(seqs=seqs, carry=carry, shown=seqs[:SHOWN], count=len(seqs))
    if request.POST.get("confirm") != "1":
        return render(request, TEMPLATE, context)
    confirmed = request.POST.get("count", "")
    try:
        job = events_replay_job(
            seqs=seqs,
            count=int(confirmed) if confirmed.isdigit() else confirmed,
            user=request.user,
            clock=clock,
            description=f"{len(seqs)} Events" + (f" ({context['label']})" if context["label"] else ""),
        )
    except ReplayInvalid as invalid:
        return render(request, TEMPLATE, {**context, "error": invalid.message}, status=400)
    except BulkCountChanged as changed:
        return render(request, TEMPLATE, {**context, "changed_from": changed.confirmed}, status=409)
    return redirect("job-detail", job_id=job.pk)
