"""The Configuration page: generations (applied and candidates) and a document."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from conduit_site.console.forms import ConfigListForm
from conduit_site.console.views.access import permission_needed
from conduit_site.console.views.common import list_paging_urls, render_console
from routing.access.roles import VIEW_EVENT
from routing.config.selectors import generation_shown, generations_page, generations_total, live_generation
from routing.models import Generation
from routing.setup.impact_runs import impact_runs_recent

TEMPLATE = "routing/config_list.html"
PARTIALS = ("generation-list",)


@permission_needed(VIEW_EVENT)
@require_GET
def config_list(request: HttpRequest) -> HttpResponse:
    """Generations newest (or oldest) first, keyset paginated, with their total, and the live
    (or chosen) document."""
    form = ConfigListForm(request.GET)
    if not form.is_valid():
        context = {"section": "config", "form": form, "page": None, "shown": None}
        return render_console(request, TEMPLATE, context, partials=PARTIALS, status=400)
    cursor, oldest = form.cursor(), form.oldest_first()
    number, candidate = form.cleaned_data["generation"], form.cleaned_data["candidate"]
    page = generations_page(before=cursor, oldest=oldest)
    live = live_generation()
    try:
        shown = generation_shown(number=number, candidate=candidate) if number or candidate else live
    except Generation.DoesNotExist:
        which = f"generation: no generation {number}" if number else f"candidate: no candidate {candidate}"
        raise Http404(which) from None
    chosen = {"generation": number, "candidate": candidate}
    paging = list_paging_urls(
        "config-list", chosen, oldest=oldest, cursor=cursor, next_cursor=page.next_cursor
    )
    context = {
        "section": "config",
        "form": form,
        "page": page,
        "live": live,
        "shown": shown,
        "total": generations_total(),
        "total_noun": "generations",
        # After Apply, the candidate's impact preview is where its groups are replayed.
        "impact_runs": impact_runs_recent() if not request.htmx else [],
        **paging,
    }
    return render_console(request, TEMPLATE, context, partials=PARTIALS)
