"""The configuration page: each configuration named once, generations and candidates apart."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from causal.selectors import ListTotal
from routing.config.selectors import generations_total
from tests.conduit_site.console.views.consolekit import newest_and_oldest, text
from tests.routing.factories import GenerationFactory, UserFactory

pytestmark = pytest.mark.django_db


def test_the_configuration_page_names_each_configuration_once(client):
    from tests.routing.factories import GenerationFactory

    client.force_login(UserFactory())
    # Ids and numbers apart, as after a candidate was applied: the candidate took an id.
    first = GenerationFactory(number=1, document="version: 1\n# first\nscopes: []\n")
    candidate = GenerationFactory(kind="candidate", number=None, document="version: 1\n# candidate\n")
    second = GenerationFactory(number=2, document="version: 1\n# second\nscopes: []\n")
    assert second.pk != second.number

    body = client.get("/config/").content.decode()
    table = body[body.index('<div id="generation-list">') : body.index('<section id="document">')]
    assert ">Id<" not in table and ">Configuration<" in table
    cells = re.findall(r'<tr id="generation-\d+">\s*<td>([^<]+)<', table)
    assert [cell.strip() for cell in cells] == ["Generation 2", f"Candidate {candidate.pk}", "Generation 1"]
    assert 'href="/config/?generation=2#document"' in table
    assert f'href="/config/?candidate={candidate.pk}#document"' in table

    shown = client.get("/config/", {"generation": 1}).content.decode()
    assert "# first" in shown and "Generation 1 (superseded)" in shown
    assert client.get("/config/", {"generation": first.pk + 10}).status_code == 404
    assert client.get("/config/", {"candidate": second.pk}).status_code == 404


# --- the Configuration page (D4) ------------------------------------------------------------------


def test_d4_config_page_lists_generations_and_shows_the_live_document(signed_in):
    GenerationFactory(number=1, document="version: 1\n# first\nscopes: []\n")
    live = GenerationFactory(number=2, document="version: 1\n# the live one\nscopes: []\n")
    candidate = GenerationFactory(kind="candidate", number=None, document="version: 1\n# a candidate\n")
    body = text(signed_in.get(reverse("config-list")))
    ids = [int(s) for s in re.findall(r'<tr id="generation-(\d+)">', body)]
    assert ids == [candidate.pk, live.pk, live.pk - 1]
    assert "# the live one" in body and "# a candidate" not in body and "# first" not in body
    assert "Live document: generation 2" in body
    shown = text(signed_in.get(reverse("config-list"), {"candidate": candidate.pk}))
    assert "# a candidate" in shown and f"Candidate {candidate.pk} (not applied)" in shown
    assert signed_in.get(reverse("config-list"), {"generation": 999999}).status_code == 404


def test_d4_config_page_without_configuration(signed_in):
    body = text(signed_in.get(reverse("config-list")))
    assert "No configuration stored yet" in body


# --- totals, paging both ways and the CLI's own filters -------------------------------------------


@pytest.mark.usefixtures("routing_handlers")
@pytest.mark.django_db
def test_configuration_generations_show_their_total_and_jump_to_the_oldest(operator_console):
    ids = [g.pk for g in GenerationFactory.create_batch(55)]
    newest_and_oldest(operator_console, "config-list", "generation", ids, "generations")
    assert generations_total(cap=5) == ListTotal(5, capped=True)
