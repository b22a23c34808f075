"""The Configuration page: generations (applied and candidates) and a document."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.urls import reverse
from django.views.decorators.http import require_GET

from routing.config.selectors import live_generation
from routing.models import Generation
from routing.roles import VIEW_EVENT
from routing.selectors import generation_get, generations_page
from routing.views.access import permission_needed
from routing.views.common import query_string, render_console
from routing.views.forms import ConfigListForm

TEMPLATE = "routing/config_list.html"
PARTIALS = ("generation-list",)


@permission_needed(VIEW_EVENT)
@require_GET
def config_list(request: HttpRequest) -> HttpResponse:
    """Generations newest first, keyset paginated, and the live (or chosen) document."""
    form = ConfigListForm(request.GET)
    if not form.is_valid():
        context = {"section": "config", "form": form, "page": None, "shown": None}
        return render_console(request, TEMPLATE, context, partials=PARTIALS, status=400)
    before = form.cleaned_data["before"]
    chosen = form.cleaned_data["generation"]
    page = generations_page(before=before)
    live = live_generation()
    if chosen is None:
        shown = live
    else:
        try:
            shown = generation_get(chosen)
        except Generation.DoesNotExist:
            raise Http404(f"generation: no generation with id {chosen}") from None
    base = reverse("config-list")
    context = {
        "section": "config",
        "form": form,
        "page": page,
        "live": live,
        "shown": shown,
        "next_url": (
            base + query_string({"generation": chosen, "before": page.next_cursor}) if page.has_next else ""
        ),
        "first_url": base,
    }
    return render_console(request, TEMPLATE, context, partials=PARTIALS)
