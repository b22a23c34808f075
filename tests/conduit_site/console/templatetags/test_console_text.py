"""Counts in templates go through ``counted`` or ``pluralize``: none is printed bare before a
plural noun."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings

pytestmark = pytest.mark.django_db


TEMPLATES = Path(settings.BASE_DIR) / "templates"


# A count printed right before a plural noun, without pluralize or counted.
BARE_COUNT = re.compile(
    r"\{\{[^}|]*\}\} (Events|passes|slots|failures|attempts|descendants|records|inputs|refusals|receivers)\b"
)


def test_no_template_prints_a_count_before_a_plural_noun_unchecked():
    bare = [
        f"{path.relative_to(TEMPLATES)}: {match.group(0)}"
        for path in sorted(TEMPLATES.rglob("*.html"))
        for match in BARE_COUNT.finditer(path.read_text(encoding="utf-8"))
    ]
    assert bare == []
