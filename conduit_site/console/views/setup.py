"""The setup session (D5, D8): edit a candidate configuration, compare it with the live one,
trace Events against it, preview its impact, then apply or discard it.

Reading (the editor, a candidate's diff and tree, traces, the impact preview) needs
``routing.view_event``; storing, applying and discarding a candidate need
``routing.apply_configuration``. The domain logic is in ``routing.setup.candidates`` and
``routing.setup.impact`` (run in the background by ``routing.setup.impact_runs``, its section in
``conduit_site.console.views.impact``); these views parse, call and render.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from causal.clock import Clock, system_clock
from causal.models import Event
from conduit_site.console.views import impact
from conduit_site.console.views.access import permission_needed
from conduit_site.console.views.common import render_console
from conduit_site.console.views.impact import ImpactForm, impact_section_context
from conduit_site.console.views.trace import TraceForm
from routing.acceptance.raw import raw_envelope
from routing.access.roles import APPLY_CONFIGURATION, VIEW_EVENT
from routing.config.problems import ConfigInvalid, ConfigProblem, GenerationNotFound
from routing.config.selectors import live_generation, load_configuration
from routing.config.services import config_candidate
from routing.config.validate import parse_document
from routing.models import Generation
from routing.setup.candidates import (
    CandidateNotFound,
    CandidateStale,
    candidate_applied_as,
    candidate_apply,
    candidate_discard,
    candidate_get,
    candidate_label,
    candidates_recent,
    configuration_diff,
    effective_tree,
)
from routing.setup.impact import ImpactInvalid
from routing.setup.impact_runs import ImpactBusy, impact_run_get, impact_run_latest, impact_run_start
from routing.setup.trace import TraceRefused, samples, trace_offered

SETUP_TEMPLATE = "routing/setup.html"
SETUP_PARTIALS = ("setup-editor",)
CANDIDATE_TEMPLATE = "routing/setup_candidate.html"
CANDIDATE_PARTIALS = ("candidate-trace-result", "candidate-impact", "candidate-actions")
RECENT_EVENTS = 10

# The trusted clock (tests inject a fake one).
clock: Clock = system_clock


class DocumentForm(forms.Form):
    document = forms.CharField(
        strip=False,
        widget=forms.Textarea(attrs={"rows": 30, "class": "mono full-width", "spellcheck": "false"}),
        help_text="The whole configuration document (YAML), as manage.py config apply takes it.",
    )

    def clean_document(self) -> str:
        # A browser posts a textarea's line breaks as CRLF (the HTML standard's form submission);
        # the document is stored as it was written.
        return self.cleaned_data["document"].replace("\r\n", "\n")


class ApplyForm(forms.Form):
    expected_live = forms.IntegerField(min_value=0, required=False)


def annotated_lines(text: str, problems: list[ConfigProblem]) -> list[dict[str, Any]]:
    """The document's lines, each with the problems found at it (for showing them inline);
    problems without a line come first, on a line 0."""
    by_line: dict[int, list[ConfigProblem]] = {}
    for problem in problems:
        by_line.setdefault(problem.line or 0, []).append(problem)
    lines = [{"number": 0, "text": "", "problems": by_line[0]}] if 0 in by_line else []
    for number, line in enumerate(text.splitlines() or [""], start=1):
        lines.append({"number": number, "text": line, "problems": by_line.get(number, [])})
    # A problem past the last line (an unexpected end of the document) is shown at the end.
    last = len(lines)
    for number, found in by_line.items():
        if number > last:
            lines.append({"number": number, "text": "", "problems": found})
    return lines


def problem_markers(problems: list[ConfigProblem]) -> list[dict[str, Any]]:
    """The problems as the editor marks them (line and column when known, the message with
    its place), for the page's JSON script element."""
    return [{"line": problem.line, "column": problem.column, "message": str(problem)} for problem in problems]


def _setup_context(form: DocumentForm, problems: list[ConfigProblem] | None = None) -> dict[str, Any]:
    text = form.data.get("document", "") if form.is_bound else form.initial.get("document", "")
    return {
        "section": "config",
        "form": form,
        "problems": problems or [],
        "markers": problem_markers(problems or []),
        "lines": annotated_lines(text, problems) if problems else [],
        "live": live_generation(),
        "candidates": candidates_recent(),
    }


@permission_needed(VIEW_EVENT)
@require_GET
def setup_page(request: HttpRequest) -> HttpResponse:
    """The editor, starting from the live document (``?from=ID``: a candidate's)."""
    start = request.GET.get("from", "")
    document = ""
    if start:
        if not (start.isascii() and start.isdigit()):
            raise Http404("from: not a candidate id")
        try:
            document = candidate_get(int(start)).document
        except CandidateNotFound as exc:
            raise Http404(str(exc)) from None
    else:
        live = live_generation()
        document = live.document if live is not None else "version: 1\nscopes:\n  - path: acme\n"
    form = DocumentForm(initial={"document": document})
    return render_console(request, SETUP_TEMPLATE, _setup_context(form), partials=SETUP_PARTIALS)


@permission_needed(VIEW_EVENT)
@require_POST
def setup_check(request: HttpRequest) -> JsonResponse:
    """Check the edited document as the editor types (it lints with the answer): ``{"problems":
    [{line, column, message}]}``, empty when the document is valid; 400 with the form's problem
    for a document the form refuses (empty, too long). Nothing is stored."""
    form = DocumentForm(request.POST)
    if not form.is_valid():
        problems = [
            {"line": None, "column": None, "message": f"document: {error}"}
            for error in form.errors.get("document", [])
        ]
        return JsonResponse({"problems": problems}, status=400)
    try:
        parse_document(form.cleaned_data["document"])
    except ConfigInvalid as exc:
        return JsonResponse({"problems": problem_markers(exc.problems)})
    return JsonResponse({"problems": []})


@permission_needed(APPLY_CONFIGURATION)
@require_POST
def candidate_create(request: HttpRequest) -> HttpResponse:
    """Validate the edited document and store it as a candidate; a document with problems is
    shown again (400) with each problem at its line, nothing stored."""
    form = DocumentForm(request.POST)
    if not form.is_valid():
        return render_console(
            request, SETUP_TEMPLATE, _setup_context(form), partials=SETUP_PARTIALS, status=400
        )
    try:
        candidate = config_candidate(
            document=form.cleaned_data["document"], clock=clock, created_by=request.user.get_username()
        )
    except ConfigInvalid as exc:
        context = _setup_context(form, exc.problems)
        return render_console(request, SETUP_TEMPLATE, context, partials=SETUP_PARTIALS, status=400)
    url = reverse("candidate-detail", args=[candidate.pk])
    if getattr(request, "htmx", False):
        return HttpResponseClientRedirect(url)
    return redirect(url)


def generation_url(generation: Generation) -> str:
    """The Configuration page showing an applied ``generation``'s document."""
    return reverse("config-list") + f"?generation={generation.number}#document"


def _candidate_or_404(candidate_id: int) -> Generation:
    try:
        return candidate_get(candidate_id)
    except CandidateNotFound as exc:
        raise Http404(str(exc)) from None


def _candidate_context(request: HttpRequest, candidate: Generation) -> dict[str, Any]:
    live = live_generation()
    configuration = load_configuration(candidate)
    return {
        "section": "config",
        "candidate": candidate,
        "reference": candidate_label(candidate),
        "live": live,
        "diff": configuration_diff(load_configuration(live) if live is not None else None, configuration),
        "tree": effective_tree(configuration),
        "trace_form": TraceForm(choices=[(candidate_label(candidate), str(candidate))]),
        # The impact section: the form to start a preview (as the latest one ran, if any) and
        # the latest preview of this candidate.
        "impact_form": ImpactForm(),
        "impact_candidate": candidate.pk,
        **impact_section_context(request, impact_run_latest(candidate.pk)),
        "recent_events": list(Event.objects.order_by("-seq").only("seq", "type", "scope")[:RECENT_EVENTS]),
        "scopes": sorted(configuration.scopes),
        "samples": [],
        "result": None,
        "refused": None,
        "can_apply": request.user.has_perm(APPLY_CONFIGURATION),
    }


@permission_needed(VIEW_EVENT)
@require_GET
def candidate_detail(request: HttpRequest, candidate_id: int) -> HttpResponse:
    """A candidate: its diff against live per scope, its effective route tree, a trace form
    (``?scope=`` lists the candidate's samples for a scope, ``&sample=N`` fills one in,
    ``?event=SEQ`` fills in a recent Event's envelope), the impact preview, apply and discard."""
    try:
        candidate = candidate_get(candidate_id)
    except CandidateNotFound as exc:
        # An applied candidate's address (a reload, Back) leads to the generation it became.
        applied = candidate_applied_as(candidate_id)
        if applied is None:
            raise Http404(str(exc)) from None
        return redirect(generation_url(applied))
    context = _candidate_context(request, candidate)
    initial: dict[str, Any] = {}
    scope = request.GET.get("scope", "")
    context["scope"] = scope
    if scope in context["scopes"]:
        try:
            context["samples"] = samples(scope=scope, clock=clock, generation=context["reference"])
        except (TraceRefused, GenerationNotFound) as exc:
            context["refused"] = exc
        chosen = request.GET.get("sample", "")
        if chosen.isascii() and chosen.isdigit() and int(chosen) < len(context["samples"]):
            _, sample = context["samples"][int(chosen)]
            initial["event"] = json.dumps({"source": "console", **sample.event, "scope": scope}, indent=2)
    seq = request.GET.get("event", "")
    if seq.isascii() and seq.isdigit():
        event = Event.objects.filter(seq=int(seq)).first()
        if event is None:
            raise Http404(f"event: no Event with seq {seq}")
        initial["event"] = json.dumps(raw_envelope(event), indent=2, ensure_ascii=False)
    context["trace_form"] = TraceForm(initial=initial, choices=[(context["reference"], str(candidate))])
    return render_console(request, CANDIDATE_TEMPLATE, context, partials=CANDIDATE_PARTIALS)


@permission_needed(VIEW_EVENT)
@require_POST
def candidate_trace(request: HttpRequest, candidate_id: int) -> HttpResponse:
    """Trace an Event against the candidate, as the Trace page does (an accepted Event's
    envelope is that Event, one routing decided traced as new); a refusal (400) replaces the
    previous result."""
    candidate = _candidate_or_404(candidate_id)
    context = _candidate_context(request, candidate)
    form = TraceForm(request.POST, choices=[(context["reference"], str(candidate))])
    context["trace_form"] = form
    status = 200
    if form.is_valid():
        try:
            context["result"] = trace_offered(
                payload=form.cleaned_data["event"],
                clock=clock,
                generation=context["reference"],
                operator=form.cleaned_data["operator"],
                filter=form.cleaned_data["filter"],
            )
        except (TraceRefused, GenerationNotFound) as exc:
            context["refused"] = exc
            status = 400
    else:
        status = 400
    return render_console(request, CANDIDATE_TEMPLATE, context, partials=CANDIDATE_PARTIALS, status=status)


@permission_needed(VIEW_EVENT)
@require_http_methods(["GET", "POST"])
def candidate_impact(request: HttpRequest, candidate_id: int) -> HttpResponse:
    """The impact preview: GET shows the candidate's latest run; POST starts a run over the
    latest ``events`` Events, traced in the background, and answers its section (progress
    first), or the candidate page without JavaScript. A bad count is a 400 naming it."""
    candidate = _candidate_or_404(candidate_id)
    if request.method == "GET":
        return render_console(
            request, CANDIDATE_TEMPLATE, _candidate_context(request, candidate), partials=CANDIDATE_PARTIALS
        )
    form = ImpactForm(request.POST)
    error = ""
    run, created = None, False
    status, retry_after = 400, 0
    if form.is_valid():
        try:
            run, created = impact_run_start(
                candidate=candidate,
                clock=clock,
                events=form.cleaned_data["events"] or None,
                by=request.user.get_username(),
            )
        except ImpactInvalid as exc:
            error = exc.message
        except ImpactBusy as exc:
            # Past the login's quota of running previews: refused, told when to try again.
            error, status, retry_after = exc.message, 429, exc.retry_after
    if run is None:
        context = _candidate_context(request, candidate)
        context.update(impact_form=form, impact_error=error)
        response = render_console(
            request, CANDIDATE_TEMPLATE, context, partials=CANDIDATE_PARTIALS, status=status
        )
        if retry_after:
            response["Retry-After"] = str(retry_after)
        return response
    if created:
        impact.launch(run.pk, clock)
    if not getattr(request, "htmx", False):
        return redirect(reverse("candidate-detail", args=[candidate.pk]) + "#candidate-impact")
    # Read again: the run may have made progress already (or, run at once, be done).
    context = {
        **_candidate_context(request, candidate),
        **impact_section_context(request, impact_run_get(run.pk)),
    }
    return render_console(request, CANDIDATE_TEMPLATE, context, partials=CANDIDATE_PARTIALS)


@permission_needed(APPLY_CONFIGURATION)
@require_POST
def candidate_apply_view(request: HttpRequest, candidate_id: int) -> HttpResponse:
    """Apply the candidate as the next live generation (its applier recorded), then show the
    Configuration page; a stale diff (live changed meanwhile) or an invalid document is a 409."""
    form = ApplyForm(request.POST)
    expected = form.cleaned_data["expected_live"] if form.is_valid() else None
    try:
        generation = candidate_apply(
            candidate_id=candidate_id,
            clock=clock,
            applied_by=request.user.get_username(),
            expected_live=expected,
        )
    except CandidateNotFound as exc:
        raise Http404(str(exc)) from None
    except (CandidateStale, ConfigInvalid) as exc:
        candidate = _candidate_or_404(candidate_id)
        context = _candidate_context(request, candidate)
        context["action_error"] = str(exc)
        return render_console(request, CANDIDATE_TEMPLATE, context, partials=CANDIDATE_PARTIALS, status=409)
    messages.success(request, f"Applied candidate {candidate_id}: generation {generation.number} is live.")
    url = generation_url(generation)
    if getattr(request, "htmx", False):
        return HttpResponseClientRedirect(url)
    return redirect(url)


@permission_needed(APPLY_CONFIGURATION)
@require_http_methods(["POST"])
def candidate_discard_view(request: HttpRequest, candidate_id: int) -> HttpResponse:
    """Discard the candidate and go back to the editor."""
    try:
        candidate_discard(candidate_id=candidate_id)
    except CandidateNotFound as exc:
        raise Http404(str(exc)) from None
    url = reverse("setup")
    if getattr(request, "htmx", False):
        return HttpResponseClientRedirect(url)
    return redirect(url)
