"""``{{ event.type|wrap_at_dots }}``: a dotted name (an Event type) that wraps between its parts,
never inside one. A built-in of the console's templates (``TEMPLATES`` in settings): no load."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from infra.words import counted

register = template.Library()


@register.filter
def wrap_at_dots(value: Any) -> SafeString:
    """``value`` escaped, with a line-break opportunity (``<wbr>``) after each dot, in a
    ``type-name`` span whose text breaks only there while the column has room for a part."""
    parts = escape(value).replace(".", ".<wbr>")
    return mark_safe(f'<span class="type-name">{parts}</span>')  # parts are escaped above


@register.filter
def state_label(value: Any) -> str:
    """A state's code as words: ``backing_off`` reads "backing off", ``awaiting_binding``
    "waiting for a binding"."""
    return WORDS.get(str(value), str(value).replace("_", " "))


# The states whose code does not read as words by its underscores alone.
WORDS = {"awaiting_binding": "waiting for a binding"}


@register.filter(name="counted")
def counted_filter(value: Any, noun: str) -> str:
    """``{{ total|counted:"Events" }}``: the count and its noun in the right number ("1 Event")."""
    return counted(value, noun)
