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


def test_i39_10_h_every_doctor_check_has_a_label_people_read():
    from conduit_site.api.openapi.controls import SCHEMAS
    from conduit_site.doctor import CHECK_LABELS, Check

    names = SCHEMAS["DoctorCheck"]["properties"]["name"]["enum"]
    assert sorted(CHECK_LABELS) == sorted(names)
    assert Check("parked_work", "warn", "").label == "Parked Work"
    assert all("_" not in label for label in CHECK_LABELS.values())


def test_i39_10_h_the_home_card_names_doctors_warnings_in_words(client, clock, monkeypatch):
    from datetime import timedelta

    from conduit_site.console.views import doctor as doctor_views
    from conduit_site.console.views import home as home_views
    from tests.conduit_site.console.test_home import NOW, both_loops_alive
    from tests.worklife.factories import WorkFactory

    clock.set(NOW)
    monkeypatch.setattr(home_views, "clock", clock)
    monkeypatch.setattr(doctor_views, "clock", clock)
    both_loops_alive()
    WorkFactory(parked_at=NOW - timedelta(minutes=3), failures=5)
    client.force_login(UserFactory())

    card = client.get("/").content.decode()
    card = card[card.index('id="attention-summary"') :]
    card = card[: card.index("</section>")]
    assert "Parked Work</a></p>" in card and "parked_work<" not in card


def test_i39_10_b_the_configuration_page_names_each_configuration_once(client):
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


def test_i39_10_e_create_work_and_rebind_suggest_the_live_bindings(client, clock, test_handlers):
    from tests.controls.test_work import CONTROLS, grant
    from tests.routing.routerkit import apply
    from tests.worklife.factories import WorkFactory

    apply(clock)  # acme: triage, plain, inbox; acme/web redefines triage as a command
    client.force_login(grant(UserFactory(username="operator"), *CONTROLS))

    create = client.get("/work/new/").content.decode()
    assert 'list="binding-options"' in create and 'list="scope-options"' in create
    options = re.search(r'<datalist id="binding-options">(.*?)</datalist>', create, re.S)[1]
    assert re.findall(r'<option value="([^"]+)">', options) == ["inbox", "plain", "triage"]
    assert '<option value="triage">in acme, acme/web</option>' in options
    scopes = re.search(r'<datalist id="scope-options">(.*?)</datalist>', create, re.S)[1]
    assert re.findall(r'<option value="([^"]+)">', scopes) == ["acme", "acme/web"]

    work = WorkFactory(scope="acme/web", binding="triage")
    page = client.get(f"/work/{work.pk}/").content.decode()
    assert 'id="rebind-binding" list="rebind-binding-options"' in page
    rebind = re.search(r'<datalist id="rebind-binding-options">(.*?)</datalist>', page, re.S)[1]
    assert '<option value="triage">command</option>' in rebind
    assert '<option value="plain">command, from acme</option>' in rebind
    assert '<option value="inbox">queue-only, from acme</option>' in rebind


def test_i39_10_i_each_chart_point_has_a_tooltip_with_its_values(client, clock, monkeypatch):
    from datetime import UTC, datetime, timedelta

    from conduit_site.console.views import doctor as doctor_views
    from conduit_site.console.views import home as home_views
    from tests.conduit_site.console.test_home import NOW, both_loops_alive, chart

    clock.set(NOW)
    monkeypatch.setattr(home_views, "clock", clock)
    monkeypatch.setattr(doctor_views, "clock", clock)
    both_loops_alive()
    minute = datetime(2026, 1, 5, 12, 25, tzinfo=UTC)
    EventFactory.create_batch(3, accepted_at=minute + timedelta(seconds=5))
    client.force_login(UserFactory())

    body = client.get("/").content.decode()

    events = chart(body, "chart-events-hour")
    titles = re.findall(r'<rect class="chart-hit" [^>]*><title>([^<]*)</title></rect>', events)
    assert len(titles) == 60
    # The bucket of 12:25, five before the current one (12:30), by its age as the axis says it.
    assert "−5 min: accepted 3, routed 0, unmatched 0, dead-lettered 0 (Events per minute)" in titles
    assert titles[-1].startswith("now: ")
    days = re.findall(r'<rect class="chart-hit"', chart(body, "chart-backlog-day"))
    assert len(days) == 72
    # The same figures stay in the span's table for screen readers.
    assert '<table id="trends-hour-table">' in body
