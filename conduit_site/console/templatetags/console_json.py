"""``{{ value|as_json }}``: a JSON value as the console shows it (attempt results, wait
matches, timer data): compact on one line, or indented with ``as_json:"pretty"``."""

from __future__ import annotations

import json
from typing import Any

from django import template

register = template.Library()


@register.filter
def as_json(value: Any, style: str = "") -> str:
    """``value`` as JSON, keys sorted and non-ASCII kept; indented when ``style`` is
    ``"pretty"``."""
    if style == "pretty":
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str, separators=(", ", ": "))
