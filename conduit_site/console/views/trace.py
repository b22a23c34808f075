"""The trace form (D5): a hypothetical Event against the live configuration or a candidate,
limited to some routes when a filter names them (R37). ``?event=SEQ`` ("Trace this Event")
traces an accepted Event at once: one routing already decided is traced as new, its recorded
outcome said first."""

from __future__ import annotations

import json

from django import forms
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.http import require_http_methods

from causal.clock import system_clock
from causal.models import Event
from conduit_site.console.views.access import permission_needed
from conduit_site.console.views.common import render_console
from routing.acceptance.envelopes import EnvelopeInvalid, loads
from routing.acceptance.raw import raw_envelope
from routing.access.roles import VIEW_EVENT
from routing.config.problems import GenerationNotFound
from routing.config.selectors import live_generation
from routing.engine.decide import MANUAL_SOURCE
from routing.models import Generation, GenerationKind, Scope
from routing.setup.trace import TraceRefused, route_filter, samples, trace_offered

TEMPLATE = "routing/trace.html"
PARTIALS = ("trace-result",)
CANDIDATES_SHOWN = 20


class TraceForm(forms.Form):
    generation = forms.ChoiceField(
        required=False, help_text="The live configuration, or a candidate not yet applied."
    )
    event = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 12, "class": "mono", "spellcheck": "false"}),
        help_text="A structured-mode CloudEvent as JSON, with its scope; specversion and id may be left out.",
    )
    operator = forms.BooleanField(
        required=False, help_text="An operator Event (source core.manual naming its Work)."
    )
    filter = forms.CharField(
        required=False,
        max_length=2000,
        help_text="Only these routes (their slots, comma-separated); empty: every route of the scope.",
    )

    def __init__(self, *args, choices: list[tuple[str, str]], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["generation"].choices = choices

    def clean_event(self):
        try:
            value = loads(self.cleaned_data["event"])
        except EnvelopeInvalid as exc:
            raise forms.ValidationError(exc.message) from exc
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(
                f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
            ) from exc
        except ValueError as exc:
            raise forms.ValidationError(f"invalid JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise forms.ValidationError("the Event must be a JSON object")
        return value

    def clean_filter(self) -> tuple[str, ...] | None:
        return route_filter(self.cleaned_data["filter"])


def candidate_id(reference: str) -> int | None:
    """The candidate's id a generation reference names (``candidate:12`` → 12), else ``None``."""
    kind, _, ident = (reference or "").partition(":")
    return int(ident) if kind == "candidate" and ident.isdigit() else None


def generation_choices() -> list[tuple[str, str]]:
    live = live_generation()
    choices = [("", f"live (generation {live.number})" if live else "live (none applied)")]
    candidates = Generation.objects.filter(kind=GenerationKind.CANDIDATE).order_by("-pk")[:CANDIDATES_SHOWN]
    choices.extend(
        (f"candidate:{c.pk}", f"candidate {c.pk}{f' – {c.note}' if c.note else ''}") for c in candidates
    )
    return choices


@permission_needed(VIEW_EVENT)
@require_http_methods(["GET", "POST"])
def trace_page(request: HttpRequest) -> HttpResponse:
    """GET: the form (``?scope=`` lists that scope's samples, ``?sample=N`` fills one in,
    ``?event=SEQ`` fills in that Event's raw envelope and traces it, against ``?generation=``
    and limited to ``?filter=`` when given). POST: the trace, rendered under the form (only
    the result for htmx; a refusal is a 400 the page swaps in too)."""
    choices = generation_choices()
    live = live_generation()
    scopes = list(Scope.objects.filter(generation=live).values_list("path", flat=True)) if live else []
    context = {"section": "trace", "scopes": scopes, "result": None, "refused": None, "samples": []}
    status = 200
    if request.method == "POST":
        form = TraceForm(request.POST, choices=choices)
        status = _traced(form, context)
    else:
        initial = {}
        scope = request.GET.get("scope", "")
        if scope in scopes:
            try:
                context["samples"] = samples(scope=scope, clock=system_clock)
            except TraceRefused as exc:
                context["refused"] = exc
            chosen = request.GET.get("sample", "")
            if chosen.isascii() and chosen.isdigit() and int(chosen) < len(context["samples"]):
                route, sample = context["samples"][int(chosen)]
                initial["event"] = json.dumps({"source": "console", **sample.event, "scope": scope}, indent=2)
        form = TraceForm(initial=initial, choices=choices)
        seq = request.GET.get("event", "")
        if seq:
            if not (seq.isascii() and seq.isdigit()):
                raise Http404("event: not an Event seq")
            event = Event.objects.filter(seq=int(seq)).first()
            if event is None:
                raise Http404(f"event: no Event with seq {seq}")
            context["traced_event"] = event
            # "Trace this Event": its raw envelope, traced at once (a dry run writes nothing).
            offered = {
                "event": json.dumps(raw_envelope(event), indent=2, ensure_ascii=False),
                "operator": event.source == MANUAL_SOURCE,
                "generation": request.GET.get("generation", ""),
                "filter": request.GET.get("filter", ""),
            }
            form = TraceForm(offered, choices=choices)
            status = _traced(form, context)
        context["scope"] = scope
    context["form"] = form
    return render_console(request, TEMPLATE, context, partials=PARTIALS, status=status)


def _traced(form: TraceForm, context: dict) -> int:
    """Trace what a bound form offers into ``context``; the status: 400 for an invalid form
    or a refused trace."""
    if not form.is_valid():
        return 400
    context["candidate_id"] = candidate_id(form.cleaned_data["generation"])
    try:
        context["result"] = trace_offered(
            payload=form.cleaned_data["event"],
            clock=system_clock,
            generation=form.cleaned_data["generation"] or None,
            operator=form.cleaned_data["operator"],
            filter=form.cleaned_data["filter"],
        )
    except (TraceRefused, GenerationNotFound) as exc:
        context["refused"] = exc
        return 400
    return 200
