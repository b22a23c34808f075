"""Skip, reroute and replay in the console (R20, D4): on each Event of the Work page
and on the Event page.

``GET events/<seq>/skip/`` (and ``…/reroute/``, ``…/replay/``) is the confirmation page (no JavaScript);
its form POSTs back. With htmx the buttons POST directly after ``hx-confirm`` and the
response is the element the button targets, re-rendered with the Event's new state: a row
of the Work page (``unrouted-<seq>``, ``input-<seq>``, ``history-<seq>``) or the Event page's
``event-route`` section. A refusal (the Event is no longer in a state the control takes) is
a 409 whose body is the same element with the reason; the buttons swap it in too.

Each control needs its own permission (``routing.skip_event``, ``routing.reroute_event``,
``routing.replay_event``):
403 without it. Anonymous users are sent to the sign-in page; a POST without the CSRF token
is refused (403) by Django's CSRF middleware.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods

import controls.events
from causal.clock import Clock, system_clock
from causal.models import Event
from conduit_site.console.views.common import HTMX_VARY
from conduit_site.console.views.events import DETAIL_PARTIALS, event_detail_context
from conduit_site.console.views.events import DETAIL_TEMPLATE as EVENT_PAGE
from controls import replay
from routing.models import RouteRecord

CONFIRM_TEMPLATE = "routing/event_control.html"
ROW_TEMPLATE = "routing/event_control_row.html"
# The Work page's rows the controls sit in, by id prefix, and how many columns each has: the
# swapped row spans the same width.
ROW_COLUMNS = {"unrouted": 5, "input": 8, "history": 10}
_ROW_TARGET = re.compile(r"^(?P<kind>[a-z]+)-(?P<seq>\d+)$")

# The trusted clock the controls use (tests inject a fake one).
clock: Clock = system_clock

ACTIONS: dict[str, dict[str, Any]] = {
    controls.events.SKIP_EVENT: {
        "service": controls.events.event_skip,
        "verb": "Skip",
        "url": "event-skip",
        "explain": "The Event is routed as skipped without asking its routes. Its failures are kept in "
        "its record, and the Work it holds takes its later input.",
    },
    controls.events.REROUTE_EVENT: {
        "service": controls.events.event_reroute,
        "verb": "Reroute",
        "url": "event-reroute",
        "explain": "An unrouted Event's failures are forgotten: the router tries it again on its next "
        "pass. A failed or skipped Event is accepted again as a copy (id reroute/…), which routes like "
        "new input.",
    },
    controls.events.REPLAY_EVENT: {
        "service": replay.event_replay,
        "verb": "Replay",
        "url": "event-replay",
        "explain": "The Event is accepted again as a copy (id replay/…/n, the same envelope and source), which "
        "routes like new input under the live configuration. The Event itself and its record stay as they are.",
    },
}


@login_required
@require_http_methods(["GET", "POST"])
def event_skip_view(request: HttpRequest, seq: int) -> HttpResponse:
    """Skip an unrouted Event: the confirmation page (GET) or the control (POST)."""
    return _control(request, seq, controls.events.SKIP_EVENT)


@login_required
@require_http_methods(["GET", "POST"])
def event_reroute_view(request: HttpRequest, seq: int) -> HttpResponse:
    """Reroute an Event: the confirmation page (GET) or the control (POST)."""
    return _control(request, seq, controls.events.REROUTE_EVENT)


@login_required
@require_http_methods(["GET", "POST"])
def event_replay_view(request: HttpRequest, seq: int) -> HttpResponse:
    """Replay a settled Event: the confirmation page (GET) or the control (POST)."""
    return _control(request, seq, controls.events.REPLAY_EVENT)


def require_control_permission(request: HttpRequest, action: str) -> None:
    """Refuse (403) a user who lacks the permission of the control ``action``."""
    permission = controls.events.PERMISSIONS[action]
    if not request.user.has_perm(permission):
        raise PermissionDenied(f"You need the permission {permission} to {action.replace('_', ' ')}.")


def _control(request: HttpRequest, seq: int, action: str) -> HttpResponse:
    require_control_permission(request, action)
    spec = ACTIONS[action]
    next_url = safe_next(request)
    if request.method == "GET":
        event = _event(seq)
        return _confirmation(
            request, event, action, next_url, error=controls.events.wrong_state(event, action)
        )
    service: Callable[..., controls.events.ControlResult] = spec["service"]
    try:
        result = service(seq=seq, user=request.user, clock=clock)
    except Event.DoesNotExist:
        raise Http404(f"No Event with seq {seq}.") from None
    except controls.events.ControlRefused as refused:
        if request.htmx:
            return _swapped(request, seq, error=refused.message, copy_seq=refused.copy_seq, status=409)
        return _confirmation(request, _event(seq), action, next_url, error=refused.message, status=409)
    if request.htmx:
        # The rows link a reroute's copy in place of the Reroute button; a replay's is in the message.
        copy_seq = result.copy_seq if action == controls.events.REROUTE_EVENT else None
        return _swapped(request, seq, result=result, copy_seq=copy_seq)
    return redirect(next_url or reverse("event-detail", args=[seq]))


def _event(seq: int) -> Event:
    try:
        return Event.objects.select_related("route_record", "route_record__work").get(seq=seq)
    except Event.DoesNotExist:
        raise Http404(f"No Event with seq {seq}.") from None


def _confirmation(
    request: HttpRequest, event: Event, action: str, next_url: str, *, error: str = "", status: int = 200
) -> HttpResponse:
    spec = ACTIONS[action]
    context = {
        "section": "events",
        "event": event,
        "record": getattr(event, "route_record", None) if event.is_settled else None,
        "action": action,
        "verb": spec["verb"],
        "explain": spec["explain"],
        "post_url": reverse(spec["url"], args=[event.seq]),
        "next_url": next_url,
        "back_url": next_url or reverse("event-detail", args=[event.seq]),
        "error": error,
    }
    return render(request, CONFIRM_TEMPLATE, context, status=status if not error else 409)


def _swapped(
    request: HttpRequest,
    seq: int,
    *,
    result: controls.events.ControlResult | None = None,
    error: str = "",
    copy_seq: int | None = None,
    status: int = 200,
) -> HttpResponse:
    """The element the htmx button targets, re-rendered with the Event's new state."""
    context: dict[str, Any] = {
        "control": result,
        "control_error": error,
        # The page the buttons sit on (the no-JavaScript links come back to it).
        "return_to": _page_path(request.htmx.current_url),
    }
    target = request.htmx.target or ""
    if target == "event-route":
        response = HttpResponse(_event_page_parts(request, seq, context), status=status)
    else:
        event = _event(seq)
        record: RouteRecord | None = getattr(event, "route_record", None) if event.is_settled else None
        context.update(event=event, record=record, copy_seq=copy_seq)
        match = _ROW_TARGET.match(target)
        kind = match["kind"] if match and int(match["seq"]) == seq else ""
        context.update(
            row_id=target if kind else f"event-{seq}",
            span=max(ROW_COLUMNS.get(kind, 3) - 3, 1),
        )
        response = render(request, ROW_TEMPLATE, context, status=status)
    patch_vary_headers(response, HTMX_VARY)
    return response


def _event_page_parts(request: HttpRequest, seq: int, control: dict[str, Any]) -> str:
    """The Event page's route section with the Event's new state, and its heading, state box,
    causal chain and the control's message out of band: the whole page agrees at once."""
    try:
        context = {**event_detail_context(seq), **control, "control_target": "#event-route"}
    except Event.DoesNotExist:
        raise Http404(f"No Event with seq {seq}.") from None
    html = [render_to_string(f"{EVENT_PAGE}#event-route", context, request)]
    if control["control"] is not None:
        html.append(render_to_string(f"{EVENT_PAGE}#event-control-result", context, request))
    oob = {**context, "oob": True}
    html.extend(
        render_to_string(f"{EVENT_PAGE}#{name}", oob, request)
        for name in DETAIL_PARTIALS
        if name != "event-route"
    )
    return "".join(html)


def _page_path(url: str | None) -> str:
    """The path and query of the page an htmx request came from."""
    if not url:
        return ""
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def safe_next(request: HttpRequest) -> str:
    """The page to return to (``next``), when it is on this site."""
    candidate = request.POST.get("next") or request.GET.get("next") or ""
    if candidate and url_has_allowed_host_and_scheme(
        candidate, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return candidate
    return ""
