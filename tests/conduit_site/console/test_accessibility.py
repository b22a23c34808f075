"""Accessibility of the console's markup, as the server renders it: the skip
link, the navigation's current page on the causal pages, Event types that wrap at dots,
scrollable blocks a keyboard reaches, live regions. Behaviour in a browser (focus, axe-core) is
in ``tests/browser/test_accessibility_browser.py``."""

from __future__ import annotations

import re

import pytest
from django.template import Context, Template
from django.urls import reverse

from tests.causal.factories import CausalDiagnosticFactory, EventFactory
from tests.routing.factories import UserFactory, live_scopes

pytestmark = pytest.mark.django_db


@pytest.fixture
def console(client):
    client.force_login(UserFactory())
    return client


def current_nav(body: str) -> list[str]:
    return re.findall(r'<a href="[^"]*" aria-current="page">([^<]+)</a>', body)


def test_causal_pages_highlight_their_place_in_the_navigation(console):
    root = EventFactory(type="demo.opened")
    CausalDiagnosticFactory(root_seq=root.seq, parent_seq=root.seq)
    # A root's causal tree is an Event's page; the refusals have their own item.
    assert current_nav(console.get(reverse("causal-root", args=[root.seq])).content.decode()) == ["Events"]
    assert current_nav(console.get(reverse("causal-diagnostics")).content.decode()) == ["Causal refusals"]
    assert current_nav(console.get(reverse("event-list")).content.decode()) == ["Events"]


def test_every_page_starts_with_a_skip_link_to_the_focusable_main(console):
    body = console.get(reverse("console-home")).content.decode()
    first_link = re.search(r"<a [^>]*>[^<]*</a>", body.split("<body", 1)[1]).group(0)
    assert first_link == '<a class="skip-link" href="#main">Skip to content</a>'
    assert '<main id="main" tabindex="-1">' in body


def test_wrap_at_dots_breaks_after_each_dot_and_escapes():
    rendered = Template("{{ value|wrap_at_dots }}").render(Context({"value": "github.pull_request.<b>"}))
    assert rendered == '<span class="type-name">github.<wbr>pull_request.<wbr>&lt;b&gt;</span>'


def test_event_types_wrap_at_dots_in_the_lists(console):
    live_scopes("acme")
    event = EventFactory(type="github.pull_request.review_comment.created")
    body = console.get(reverse("event-list")).content.decode()
    assert "github.<wbr>pull_request.<wbr>review_comment.<wbr>created" in body
    detail = console.get(reverse("event-detail", args=[event.seq])).content.decode()
    assert "github.<wbr>pull_request.<wbr>review_comment.<wbr>created" in detail


def test_scrollable_blocks_are_tab_stops_with_a_name(console):
    event = EventFactory(data={"body": "x" * 300}, extensions={"traceparent": "00-abc"})
    body = console.get(reverse("event-detail", args=[event.seq])).content.decode()
    blocks = re.findall(r"<pre [^>]*>", body)
    assert blocks
    for block in blocks:
        assert (
            'tabindex="0"' in block and 'role="region"' in block and re.search(r'aria-label="[^"]+"', block)
        )


def test_live_regions_are_announced_politely(console):
    live_scopes("acme")
    body = console.get(reverse("event-list")).content.decode()
    assert re.search(r'<section id="event-list" aria-live="polite"', body)
