"""The console's words (issue 39 item 10): counts with nouns in the right number, codes as
labels people read."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings

from tests.causal.factories import EventFactory
from tests.routing.factories import UserFactory

pytestmark = pytest.mark.django_db

TEMPLATES = Path(settings.BASE_DIR) / "templates"
# A count printed right before a plural noun, without pluralize or counted.
BARE_COUNT = re.compile(
    r"\{\{[^}|]*\}\} (Events|passes|slots|failures|attempts|descendants|records|inputs|refusals|receivers)\b"
)


def test_i39_10_g_the_events_list_counts_one_event_in_the_singular(client):
    client.force_login(UserFactory())
    EventFactory()

    page = client.get("/events/").content.decode()

    total = re.search(r'<span class="pager-total">([^<]*)</span>', page)[1]
    assert total == "1 Event"


def test_i39_10_g_no_template_prints_a_count_before_a_plural_noun_unchecked():
    bare = [
        f"{path.relative_to(TEMPLATES)}: {match.group(0)}"
        for path in sorted(TEMPLATES.rglob("*.html"))
        for match in BARE_COUNT.finditer(path.read_text(encoding="utf-8"))
    ]
    assert bare == []
