"""The Flow page: the pauses in force (who, why, until) with Resume, a form to pause a scope, a
binding, a route or a schedule, and the live configuration's schedules with their next and last
fire times, Pause, Resume and Fire now (``controls.pauses``).

Every control is a plain POST form that redirects back to the page with what it did (no
JavaScript needed); a refusal or bad input shows its message there and stores nothing. Reading
needs ``routing.view_event``, the controls ``worklife.pause_work`` (403 without it).
"""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_GET, require_POST

import controls.pauses
from causal.clock import Clock, system_clock
from conduit_site.console.views.access import permission_needed
from conduit_site.console.views.common import render_console
from controls.pauses import KINDS, PauseInvalid, PauseRefused
from routing.access.roles import VIEW_EVENT
from routing.config.selectors import live_generation, load_configuration
from routing.schedules import schedule_rows
from worklife.pauses import pause_line, target_of

TEMPLATE = "routing/flow.html"
PARTIALS = ("flow-pauses", "flow-schedules")

# The trusted clock the page and its controls use (tests inject a fake one).
clock: Clock = system_clock


@permission_needed(VIEW_EVENT)
@require_GET
def flow_page(request: HttpRequest) -> HttpResponse:
    """The pauses in force and the schedules, with their controls."""
    now = clock()
    generation = live_generation()
    rows = schedule_rows(load_configuration(generation), now=now) if generation is not None else []
    pauses = [(p, target_of(p), pause_line(p)) for p in controls.pauses.pauses_in_force(clock)]
    context = {
        "section": "flow",
        "pauses": pauses,
        "schedules": rows,
        "kinds": KINDS,
        "may_pause": request.user.has_perm(controls.pauses.PERMISSION),
    }
    return render_console(request, TEMPLATE, context, partials=PARTIALS)


def _done(request: HttpRequest, action) -> HttpResponse:
    try:
        text = action()
    except (PauseInvalid, PauseRefused) as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, text)
    return redirect("flow")


@permission_needed(controls.pauses.PERMISSION)
@require_POST
def flow_pause(request: HttpRequest) -> HttpResponse:
    """Pause the posted ``kind``, ``scope``, ``name`` with ``reason`` and ``until``."""
    post = request.POST

    def act() -> str:
        target = controls.pauses.target_parse(post.get("kind"), post.get("scope"), post.get("name", ""))
        result = controls.pauses.pause(
            target=target,
            user=request.user,
            reason=post.get("reason", ""),
            until=controls.pauses.until_parse(post.get("until"), now=clock()),
            clock=clock,
        )
        return f"{target}: {pause_line(result.pause)}"

    return _done(request, act)


@permission_needed(controls.pauses.PERMISSION)
@require_POST
def flow_resume(request: HttpRequest) -> HttpResponse:
    """Resume the posted ``kind``, ``scope``, ``name``."""
    post = request.POST

    def act() -> str:
        target = controls.pauses.target_parse(post.get("kind"), post.get("scope"), post.get("name", ""))
        result = controls.pauses.resume(target=target, user=request.user, clock=clock)
        released = f", {result.released} held Events released" if result.released else ""
        return f"{target}: resumed{released}"

    return _done(request, act)


@permission_needed(controls.pauses.PERMISSION)
@require_POST
def flow_fire(request: HttpRequest) -> HttpResponse:
    """Fire the posted schedule (``scope``, ``name``) now."""
    post = request.POST

    def act() -> str:
        scope, name = post.get("scope", ""), post.get("name", "")
        event = controls.pauses.schedule_fire(scope=scope, name=name, user=request.user, clock=clock)
        return f"schedule {name!r} in {scope} fired now: Event #{event.seq}"

    return _done(request, act)
