"""The configuration page: each configuration named once, generations and candidates apart."""

from __future__ import annotations

import re

import pytest

from tests.routing.factories import UserFactory

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
