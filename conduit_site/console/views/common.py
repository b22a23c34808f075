"""Helpers shared by the console's views."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any
from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.cache import patch_vary_headers

from conduit_site import live

# A response differs with these request headers: a full page or one partial.
HTMX_VARY = ("HX-Request", "HX-Target")


def htmx_partial(request: HttpRequest, partials: Collection[str]) -> str | None:
    """The partial an htmx request asks for: the name of its target when it is one of
    ``partials`` (each partial's root has the partial's name as its id), else ``None``.

    A history-restore request (htmx lost its cache) and a boosted request want a whole page.
    """
    htmx = getattr(request, "htmx", None)
    if not htmx or htmx.history_restore_request or htmx.boosted:
        return None
    target = htmx.target
    return target if target in partials else None


def render_console(
    request: HttpRequest,
    template_name: str,
    context: Mapping[str, Any],
    *,
    partials: Collection[str] = (),
    status: int = 200,
) -> HttpResponse:
    """Render a console screen: the whole page, or only ``template#partial`` when an htmx
    request targets one of ``partials``. The response varies on the htmx headers. A page's
    ``live_url`` (its websocket) says the outbox position it is rendered at."""
    partial = htmx_partial(request, partials)
    name = f"{template_name}#{partial}" if partial else template_name
    if context.get("live_url"):
        # The page's websocket resumes from the outbox position the page is rendered at.
        context = {**context, "live_url": live.position_url(context["live_url"])}
    response = render(request, name, context, status=status)
    patch_vary_headers(response, HTMX_VARY)
    return response


def query_string(params: Mapping[str, Any]) -> str:
    """``?a=1&b=2`` from the non-empty values of ``params`` (empty string when none)."""
    pairs = [(key, value) for key, value in params.items() if value not in (None, "")]
    return f"?{urlencode(pairs)}" if pairs else ""


def list_paging_urls(
    url_name: str, params: Mapping[str, Any], *, oldest: bool, cursor: int | None, next_cursor: int | None
) -> dict[str, Any]:
    """The pager of a keyset-paged list that reads newest first (``before`` a key) or oldest
    first (``oldest``, ``after`` a key): ``first_url`` (the newest page), ``oldest_url`` (the
    oldest page; empty on it), ``next_url`` (empty on the last page), its label and
    ``oldest_first``."""
    base = reverse(url_name)
    on_oldest = oldest and cursor is None
    if next_cursor is None:
        next_url = ""
    elif oldest:
        next_url = base + query_string({**params, "oldest": "1", "after": next_cursor})
    else:
        next_url = base + query_string({**params, "before": next_cursor})
    return {
        "first_url": base + query_string(params),
        "oldest_url": "" if on_oldest else base + query_string({**params, "oldest": "1"}),
        "next_url": next_url,
        "next_label": "Newer →" if oldest else "Older →",
        "oldest_first": oldest,
    }
