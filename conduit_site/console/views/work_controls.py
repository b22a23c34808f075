"""Operator controls on Work in the console: cancel, retry, send input and rebind on the Work
page (``templates/worklife/work_controls.html``), and the Create Work page.

Without JavaScript, Cancel and Retry are links to a confirmation page
(``GET work/<id>/cancel/``) whose form POSTs back; Send input and Rebind are plain POST forms
(their ``GET`` page shows the form alone). A control that succeeds redirects to the Work page,
which shows what it did. With htmx the buttons and forms POST after ``hx-confirm``; the
response is the ``work-controls`` section with what the control did, and the Work page's live
partials (its state, lists and history) out of band.

A refusal (the Work's state or the live configuration refuses the control: 409) or bad input
(400) shows the server's message: in the ``work-controls`` section with htmx, on the control's
own page without JavaScript; nothing is stored then.

Each control needs its own permission (``worklife.cancel_work``, ``worklife.retry_work``,
``worklife.send_input``, ``worklife.rebind_work``, ``worklife.create_work``): 403 without it.
Anonymous users are sent to the sign-in page; a POST without the CSRF token is refused (403)
by Django's CSRF middleware.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_http_methods
from django_htmx.http import HttpResponseClientRedirect

import controls.work
from causal.clock import Clock, system_clock
from conduit_site.console.forms import form_errors_text
from conduit_site.console.views.common import HTMX_VARY
from conduit_site.console.views.work import DETAIL_TEMPLATE, LIVE_PARTIALS, work_detail_context
from controls.work import (
    WorkControl,
    WorkControlInvalid,
    WorkControlRefused,
    WorkControlResult,
    retry_outlook,
    wrong_state,
)
from routing.acceptance.envelopes import loads
from worklife.models import Work
from worklife.selectors import work_get

CONTROLS_TEMPLATE = "worklife/work_controls.html"
PAGE_TEMPLATE = "worklife/work_control.html"

# The trusted clock the controls use (tests inject a fake one).
clock: Clock = system_clock


# --- forms ---------------------------------------------------------------------------------------


class JsonDataField(forms.CharField):
    """A JSON value typed into a text area; empty is no data (``None``)."""

    widget = forms.Textarea

    def to_python(self, value: Any) -> Any:
        text = super().to_python(value)
        if not text.strip():
            return None
        try:
            return loads(text)
        except ValueError as exc:
            raise forms.ValidationError(f"invalid JSON: {exc}") from exc


class InputForm(forms.Form):
    """Operator input: an Event type of the operator's own, a subject and JSON data."""

    type = forms.CharField(
        max_length=255, help_text="The input's Event type, your own (core.* is reserved), e.g. operator.note."
    )
    subject = forms.CharField(required=False, max_length=512, help_text="Optional.")
    data = JsonDataField(required=False, help_text='JSON, e.g. {"text": "look again"}; empty for none.')


class CancelForm(forms.Form):
    reason = forms.CharField(
        required=False,
        max_length=controls.work.CANCEL_REASON_MAX,
        help_text="Optional: why, kept with the control Event and shown in the Work's history.",
    )


# The suggestions work_control.html lists for these fields (a <datalist> of the live configuration).
SUGGESTED = {"list": "binding-options"}


class RebindForm(forms.Form):
    binding = forms.CharField(
        max_length=128,
        help_text="A binding of the Work's scope in the live configuration.",
        widget=forms.TextInput(attrs=SUGGESTED),
    )


class CreateWorkForm(InputForm):
    scope = forms.CharField(
        max_length=255,
        help_text="A scope of the live configuration.",
        widget=forms.TextInput(attrs={"list": "scope-options"}),
    )
    binding = forms.CharField(
        max_length=128, help_text="A binding visible in that scope.", widget=forms.TextInput(attrs=SUGGESTED)
    )

    field_order = ["scope", "binding", "type", "subject", "data"]


# --- the controls on the Work page --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ControlPage:
    """How the console shows one control: its verb, its URL name, what it does, its form."""

    verb: str
    url: str
    explain: str
    form: type[forms.Form] | None = None


ACTIONS: dict[WorkControl, ControlPage] = {
    WorkControl.CANCEL: ControlPage(
        verb="Cancel",
        url="work-cancel",
        explain="Its active attempts and waits are cancelled, its timers removed and its pending input leaves "
        "the queue: the Work is terminal and takes no more input. The work loop running an attempt stops its "
        "process.",
        form=CancelForm,
    ),
    WorkControl.RETRY: ControlPage(
        verb="Retry",
        url="work-retry",
        explain="The parked or backing-off Work runs again at once, with the input its failed attempts took and "
        "a fresh attempt budget (its binding can run it).",
    ),
    WorkControl.SEND: ControlPage(
        verb="Send input to",
        url="work-send",
        explain="The input is accepted as an operator Event addressed to this Work (source core.manual): the "
        "router queues it on the binding the Work runs on next.",
        form=InputForm,
    ),
    WorkControl.REBIND: ControlPage(
        verb="Rebind",
        url="work-rebind",
        explain="The Work's next attempt runs on this binding (its pending input and a retry too).",
        form=RebindForm,
    ),
}


@login_required
@require_http_methods(["GET", "POST"])
def work_cancel_view(request: HttpRequest, work_id: int) -> HttpResponse:
    """Cancel a Work: the confirmation page (GET) or the control (POST)."""
    return _control(
        request,
        work_id,
        WorkControl.CANCEL,
        # The reason: the confirmation page's field, or what the Work page's prompt asked for.
        lambda data: controls.work.work_cancel(
            work_id=work_id,
            user=request.user,
            clock=clock,
            reason=data.get("reason") or (request.htmx.prompt if request.htmx else None),
        ),
    )


@login_required
@require_http_methods(["GET", "POST"])
def work_retry_view(request: HttpRequest, work_id: int) -> HttpResponse:
    """Retry a parked or backing-off Work: the confirmation page (GET) or the control (POST)."""
    return _control(
        request,
        work_id,
        WorkControl.RETRY,
        lambda data: controls.work.work_retry(work_id=work_id, user=request.user, clock=clock),
    )


@login_required
@require_http_methods(["GET", "POST"])
def work_send_view(request: HttpRequest, work_id: int) -> HttpResponse:
    """Send operator input to a Work: the form (GET) or the control (POST)."""
    return _control(
        request,
        work_id,
        WorkControl.SEND,
        lambda data: controls.work.work_input_send(
            work_id=work_id,
            event_type=data["type"],
            data=data["data"],
            subject=data["subject"],
            user=request.user,
            clock=clock,
        ),
    )


@login_required
@require_http_methods(["GET", "POST"])
def work_rebind_view(request: HttpRequest, work_id: int) -> HttpResponse:
    """Rebind a Work: the form (GET) or the control (POST)."""
    return _control(
        request,
        work_id,
        WorkControl.REBIND,
        lambda data: controls.work.work_rebind(
            work_id=work_id, binding=data["binding"], user=request.user, clock=clock
        ),
    )


def require_permission(request: HttpRequest, action: WorkControl) -> None:
    """Refuse (403) a user who lacks the permission of the control ``action``."""
    permission = controls.work.PERMISSIONS[action]
    if not request.user.has_perm(permission):
        raise PermissionDenied(f"You need the permission {permission} to {action.value.replace('_', ' ')}.")


def _control(
    request: HttpRequest,
    work_id: int,
    action: WorkControl,
    call: Callable[[dict[str, Any]], WorkControlResult],
) -> HttpResponse:
    require_permission(request, action)
    spec = ACTIONS[action]
    work = _work(work_id)
    if request.method == "GET":
        form = spec.form(initial=_initial(work, action)) if spec.form else None
        error = wrong_state(work, action)
        return _page(
            request, work, action, form, error=error, blocked=bool(error), status=409 if error else 200
        )
    form = spec.form(request.POST) if spec.form else None
    if form is not None and not form.is_valid():
        return _refused(request, work, action, form, error=form_errors_text(form), status=400)
    try:
        result = call(form.cleaned_data if form is not None else {})
    except Work.DoesNotExist:
        raise Http404(f"No Work with id {work_id}.") from None
    except WorkControlRefused as refused:
        return _refused(request, _work(work_id), action, form, error=refused.message, status=409)
    except WorkControlInvalid as invalid:
        return _refused(request, work, action, form, error=str(invalid), status=400)
    if request.htmx:
        return controls_response(request, work_id, control=result)
    messages.success(request, result.message)
    return redirect("work-detail", work_id)


def _initial(work: Work, action: WorkControl) -> dict[str, Any]:
    if action == WorkControl.REBIND:
        return {"binding": work.rebind_binding or work.binding}
    return {}


def _work(work_id: int) -> Work:
    try:
        return work_get(work_id)
    except Work.DoesNotExist:
        raise Http404(f"No Work with id {work_id}.") from None


def _page(
    request: HttpRequest,
    work: Work,
    action: WorkControl,
    form: forms.Form | None,
    *,
    error: str = "",
    blocked: bool = False,
    status: int = 200,
) -> HttpResponse:
    """The control's own page (no JavaScript): a confirmation, or the control's form; none when
    the Work's state refuses the control (``blocked``)."""
    spec = ACTIONS[action]
    outlook = retry_outlook(work.pk) if action == WorkControl.RETRY and work.is_retryable else ""
    context = {
        "section": "work",
        "work": work,
        "action": action.value,
        "verb": spec.verb,
        "explain": f"{outlook}." if outlook else spec.explain,
        "post_url": reverse(spec.url, args=[work.pk]),
        "back_url": reverse("work-detail", args=[work.pk]),
        "form": form,
        "error": error,
        "blocked": blocked,
    }
    return render(request, PAGE_TEMPLATE, context, status=status)


def _refused(
    request: HttpRequest,
    work: Work,
    action: WorkControl,
    form: forms.Form | None,
    *,
    error: str,
    status: int,
) -> HttpResponse:
    """A refusal or bad input: the controls section saying why (htmx), else the control's page."""
    if request.htmx:
        forms_by_action = {f"{action.value}_form": form} if form is not None else {}
        return controls_response(request, work.pk, control_error=error, status=status, **forms_by_action)
    return _page(
        request, work, action, form, error=error, blocked=bool(wrong_state(work, action)), status=status
    )


def controls_response(
    request: HttpRequest, work_id: int, *, status: int = 200, **context: Any
) -> HttpResponse:
    """The ``work-controls`` section re-rendered for an htmx request, with (after a control that
    changed the Work) the Work page's live partials out of band, as the websocket sends them."""
    work = _work(work_id)
    outlook = retry_outlook(work.pk) if work.is_retryable else ""
    html = render_to_string(
        CONTROLS_TEMPLATE, {"work": work, "retry_outlook": outlook, **context}, request=request
    )
    if "control" in context:
        page = work_detail_context(work, LIVE_PARTIALS)
        page.update(oob=True, return_to=reverse("work-detail", args=[work.pk]))
        html += "".join(
            render_to_string(f"{DETAIL_TEMPLATE}#{name}", page, request=request) for name in LIVE_PARTIALS
        )
    response = HttpResponse(html, status=status)
    patch_vary_headers(response, HTMX_VARY)
    return response


# --- Create Work ---------------------------------------------------------------------------------


@login_required
@require_http_methods(["GET", "POST"])
def work_create_view(request: HttpRequest) -> HttpResponse:
    """Create a Work with its first input: the form (GET, ``?scope=&binding=`` fill it in) or the
    control (POST), which goes to the new Work's page."""
    require_permission(request, WorkControl.CREATE)
    if request.method == "GET":
        form = CreateWorkForm(
            initial={"scope": request.GET.get("scope", ""), "binding": request.GET.get("binding", "")}
        )
        return _create_page(request, form)
    form = CreateWorkForm(request.POST)
    if not form.is_valid():
        return _create_page(request, form, error=form_errors_text(form), status=400)
    data = form.cleaned_data
    try:
        result = controls.work.work_create(
            scope=data["scope"],
            binding=data["binding"],
            event_type=data["type"],
            data=data["data"],
            subject=data["subject"],
            user=request.user,
            clock=clock,
        )
    except WorkControlRefused as refused:
        return _create_page(request, form, error=refused.message, status=409)
    except WorkControlInvalid as invalid:
        return _create_page(request, form, error=str(invalid), status=400)
    messages.success(request, result.message)
    url = reverse("work-detail", args=[result.work_id])
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


def _create_page(
    request: HttpRequest, form: CreateWorkForm, *, error: str = "", status: int = 200
) -> HttpResponse:
    context = {
        "section": "work",
        "work": None,
        "action": WorkControl.CREATE.value,
        "verb": "Create Work",
        "explain": "A Work is opened in the scope on the binding, and its first input is accepted as an "
        "operator Event addressed to it (source core.manual): it runs once the router queues that input.",
        "post_url": reverse("work-create"),
        "back_url": reverse("work-list"),
        "form": form,
        "error": error,
        "blocked": False,
    }
    if request.htmx:
        response = render(request, f"{PAGE_TEMPLATE}#control-form", context, status=status)
        patch_vary_headers(response, HTMX_VARY)
        return response
    return render(request, PAGE_TEMPLATE, context, status=status)
