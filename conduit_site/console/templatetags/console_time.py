"""``{{ value|timetag }}``: a timestamp as the console shows it, everywhere.

A ``<time datetime="…Z">`` element whose text is the UTC time to the second with the zone
named (``2026-01-05 12:00:00 UTC``); ``static/js/console.js`` rewrites it in the browser's
time zone, naming that zone. ``{{ value|timetag:"ago" }}`` marks a timestamp whose recency
matters (lists): the script shows its age ("3 min ago") and keeps the time in the title.
Without JavaScript both read as UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from worklife.models import Work

register = template.Library()

# The one precision of the console's timestamps: seconds.
DISPLAY_FORMAT = "%Y-%m-%d %H:%M:%S UTC"
NONE = "—"


@register.filter
def timetag(value: datetime | None, style: str = "") -> SafeString | str:
    """``value`` as a ``<time>`` element (``—`` for none); ``style`` ``"ago"`` asks for the
    relative age in the browser."""
    if value is None or value == "":
        return NONE
    if not isinstance(value, datetime):
        raise template.TemplateSyntaxError(f"timetag needs a datetime, not {type(value).__name__}")
    if value.tzinfo is None:
        raise template.TemplateSyntaxError("timetag needs an aware datetime")
    moment = value.astimezone(UTC)
    iso = moment.isoformat().replace("+00:00", "Z")
    shown = moment.strftime(DISPLAY_FORMAT)
    if style == "ago":
        return format_html('<time datetime="{}" data-ago>{}</time>', iso, shown)
    if style:
        raise template.TemplateSyntaxError(f'timetag takes "ago" or nothing, not {style!r}')
    return format_html('<time datetime="{}">{}</time>', iso, shown)


def in_words(seconds: float) -> str:
    """A span in the console's words ("4 s", "3 min", "2 h", "5 d"), as ``console.js`` says it."""
    span = abs(round(seconds))
    if span < 120:
        return f"{span} s"
    if span < 120 * 60:
        return f"{span // 60} min"
    if span < 48 * 3600:
        return f"{span // 3600} h"
    return f"{span // 86400} d"


@register.filter
def countdown(value: datetime | None, now: datetime) -> SafeString | str:
    """``value``, a moment after ``now``, as ``<time>`` reading "in 4 s" with the absolute
        time in its title; ``console.js`` counts it down every second (``data-ago``) with no request,
    and says "now" once it has run out (``data-countdown``)."""
    if value is None or value == "":
        return NONE
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise template.TemplateSyntaxError("countdown needs an aware datetime")
    moment = value.astimezone(UTC)
    iso = moment.isoformat().replace("+00:00", "Z")
    seconds = max((moment - now).total_seconds(), 0)
    return format_html(
        '<time datetime="{}" data-ago data-countdown title="{}">in {}</time>',
        iso,
        moment.strftime(DISPLAY_FORMAT),
        in_words(seconds),
    )


@register.filter
def backing_off(work: Work, now: datetime) -> bool:
    """Whether ``work`` is backing off at ``now`` (:meth:`worklife.models.Work.is_backing_off`)."""
    # A page rendered without ``now`` shows no backoff, as a template comparison with it would.
    return isinstance(now, datetime) and work.is_backing_off(now)


@register.filter
def flow_held(work: Work, now: datetime) -> bool:
    """Whether flow control holds ``work`` at ``now`` (:func:`worklife.flow.flow_hold_active`)."""
    from worklife.flow import flow_hold_active

    return isinstance(now, datetime) and flow_hold_active(work, now)
