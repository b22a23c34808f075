"""The console's Event list: its total counts Events with the noun in the right number."""

from __future__ import annotations

import re

import pytest

from tests.causal.factories import EventFactory
from tests.routing.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_the_events_list_counts_one_event_in_the_singular(client):
    client.force_login(UserFactory())
    EventFactory()

    page = client.get("/events/").content.decode()

    total = re.search(r'<span class="pager-total">([^<]*)</span>', page)[1]
    assert total == "1 Event"
