"""The impact preview's runs in the console: what the candidate page's
impact section and a run's own page show, and that page (``config/impact/<run>/``).

A run is started from its candidate's page (``setup.candidate_impact``) and traced in the
background (``routing.setup.impact_runs``); while it runs, its section polls this page every
second (htmx), which keeps it going (a run nobody polls for CONDUIT_IMPACT_ABANDON_SECONDS
stops), and shows "Events traced N of M", the start button disabled; then the roll-up by
effect and route, each group with its replay, and the changed Events 50 a page (``?page=N``).
Reading needs ``routing.view_event``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django import forms
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import reverse
from django.views.decorators.http import require_GET

from causal.clock import Clock, system_clock
from conduit_site.console.views.access import permission_needed
from conduit_site.console.views.common import render_console
from controls.events import PERMISSIONS, REPLAY_EVENT
from routing.access.roles import VIEW_EVENT
from routing.models import GenerationKind, ImpactRun, ImpactRunStatus
from routing.setup.candidates import candidate_applied_as
from routing.setup.impact import DEFAULT_EVENTS, MAX_EVENTS
from routing.setup.impact_runs import (
    PAGE_SIZE,
    impact_run_get,
    impact_run_launch,
    impact_run_lost,
    impact_run_page,
    impact_run_pages,
    impact_run_rollup,
    impact_run_summary,
    impact_run_waited,
)

TEMPLATE = "routing/impact_run.html"
PARTIALS = ("candidate-impact",)

# The trusted clock (tests inject a fake one), and how a started run is traced: in a thread of
# this process (tests run it at once).
clock: Clock = system_clock
launch: Callable[[int, Clock], Any] = impact_run_launch


class ImpactForm(forms.Form):
    events = forms.IntegerField(
        min_value=1,
        max_value=MAX_EVENTS,
        required=False,
        initial=DEFAULT_EVENTS,
        help_text=f"How many of the latest accepted Events to trace again (at most {MAX_EVENTS:,}).",
    )


def page_number(request: HttpRequest, pages: int) -> int:
    """The ``page`` query parameter, 1 to ``pages`` (1 when absent or not a number)."""
    text = request.GET.get("page", "")
    number = int(text) if text.isascii() and text.isdigit() and len(text) < 7 else 1
    return min(max(number, 1), pages)


def impact_context(
    request: HttpRequest, run: ImpactRun | None, *, page: int = 1, now: datetime
) -> dict[str, Any]:
    """What the impact section shows for ``run`` (none yet: only the form): its progress while
    it runs, else its roll-up and page ``page`` of its changed Events, and the generation its
    candidate became (``applied_as``: its groups are replayed only then, for the copies to route
    as the candidate does; not while it is a candidate, nor once discarded). Four queries at
    most."""
    if run is None:
        return {"run": None, "running": False}
    lost = impact_run_lost(run, now=now)
    running = run.status == ImpactRunStatus.RUNNING and not lost
    done = run.status == ImpactRunStatus.DONE
    pages = impact_run_pages(run)
    page = min(max(page, 1), pages)
    base = reverse("impact-run", args=[run.pk])
    return {
        "run": run,
        "running": running,
        "lost": lost,
        "poll_url": base,
        "rollup": impact_run_rollup(run) if done else [],
        "summary": impact_run_summary(run) if done else "",
        "changes": impact_run_page(run, page) if done and run.changed else [],
        "page": page,
        "pages": pages,
        "page_size": PAGE_SIZE,
        "previous_url": f"{base}?page={page - 1}" if page > 1 else "",
        "next_url": f"{base}?page={page + 1}" if page < pages else "",
        "can_replay": request.user.has_perm(PERMISSIONS[REPLAY_EVENT]),
        "applied_as": candidate_applied_as(run.candidate_number)
        if done and run.candidate_id is None
        else None,
    }


def impact_section_context(request: HttpRequest, run: ImpactRun | None, *, page: int = 1) -> dict[str, Any]:
    """The impact section's whole context: the run's, and the start form while its candidate is
    still one."""
    context: dict[str, Any] = {"impact": impact_context(request, run, page=page, now=clock())}
    candidate = run.candidate if run is not None else None
    if candidate is not None and candidate.kind == GenerationKind.CANDIDATE:
        context.update(impact_form=ImpactForm(initial={"events": run.events}), impact_candidate=candidate.pk)
    return context


@permission_needed(VIEW_EVENT)
@require_GET
def impact_run_view(request: HttpRequest, run_id: int) -> HttpResponse:
    """A run of the impact preview: its progress, or its roll-up and a page of its changes
    (``?page=N``); the candidate page's section polls it while it runs."""
    try:
        run = impact_run_get(run_id)
    except ImpactRun.DoesNotExist:
        raise Http404(f"no impact preview {run_id}") from None
    if run.status == ImpactRunStatus.RUNNING:
        # The page polls while it runs: someone still waits for it (a run nobody polls stops).
        impact_run_waited(run.pk, clock=clock)
    context = {
        "section": "config",
        **impact_section_context(request, run, page=page_number(request, impact_run_pages(run))),
    }
    return render_console(request, TEMPLATE, context, partials=PARTIALS)
