"""In Chromium: a list filter the server refuses (400, an unreadable time) shows why in place of
the list instead of leaving the unfiltered list on screen (htmx swaps no 4xx by itself;
static/js/console.js swaps the statuses marked with ``data-swap-statuses``)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.browser.browserkit import operator, signed_in
from tests.causal.factories import EventFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_invalid_time_filter_shows_the_error_instead_of_the_unfiltered_list(live_server, browser):
    operator()
    EventFactory.create_batch(3)
    rows = "#event-rows"
    page = signed_in(browser, live_server.url)
    page.goto(live_server.url + reverse("event-list"))
    assert page.locator(f"{rows} table tbody tr").count() == 3

    page.fill("#id_since", "-2x")
    page.press("#id_since", "Enter")

    alert = page.locator(f"{rows} .errorlist[role=alert]")
    alert.wait_for(timeout=5000)
    assert "since" in alert.inner_text()
    assert page.locator(f"{rows} table").count() == 0
    assert page.errors == []
    page.context.close()
