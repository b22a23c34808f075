"""``{{ event|route_why:record }}``: why an Event went where it went, in words, its moment shown
as every console timestamp (``timetag``)."""

from __future__ import annotations

from django import template
from django.utils.html import conditional_escape
from django.utils.safestring import SafeString, mark_safe

from conduit_site.console.templatetags.console_time import timetag
from routing.records.explain import AT, route_why

register = template.Library()


@register.filter(name="route_why")
def route_why_filter(event, record) -> SafeString:
    """The sentence of ``routing.records.explain.route_why`` as HTML: escaped text, its moment a ``<time>``."""
    why = route_why(event, record or None)
    before, _, after = why.text.partition(AT)
    moment = timetag(why.at) if why.at and _ else ""
    return mark_safe(conditional_escape(before) + moment + conditional_escape(after))  # each part escaped
