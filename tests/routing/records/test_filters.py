"""Finding Events by part of what people remember (an id or subject by its start, text in the
data by a bounded scan), alike in the console, the API and the CLI."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

import pytest
from django.core.management import call_command

from routing.records import filters
from routing.records.filters import EventListFilter, EventListInvalid
from routing.records.selectors import events_route_page
from tests.causal.factories import EventFactory
from tests.routing.factories import UserFactory, api_token_with_secret


def found(**given) -> list[int]:
    return [item.event.seq for item in events_route_page(EventListFilter(**given))]


NOW = datetime(2026, 1, 7, 15, 30, 5, tzinfo=UTC)


@pytest.mark.django_db
def test_find_takes_the_start_of_an_id_or_a_subject():
    pr42 = EventFactory(envelope_id="pr-42-opened", subject="acme/web#42")
    pr43 = EventFactory(envelope_id="pr-43-opened", subject="acme/web#43")
    EventFactory(envelope_id="deploy-1", subject="acme/api")

    assert found(query="pr-4") == [pr43.seq, pr42.seq]
    assert found(query="pr-42-opened") == [pr42.seq]
    assert found(query="acme/web#4") == [pr43.seq, pr42.seq]
    assert found(query="opened") == []  # the start, not anywhere inside
    assert found(query=f"#{pr42.seq}") == [pr42.seq]


@pytest.mark.django_db
def test_data_search_finds_text_in_the_data_case_sensitively():
    hit = EventFactory(data={"pull_request": {"title": "Fix the flaky login test", "user": "zoë"}})
    EventFactory(data={"pull_request": {"title": "Add metrics"}})
    quoted = EventFactory(data={"text": 'say "hi"'})
    EventFactory(data=None)

    assert found(data="flaky login") == [hit.seq]
    assert found(data="Flaky") == []
    assert found(data="zoë") == [hit.seq]
    assert found(data='"hi"') == [quoted.seq]
    assert found(data="pull_request") == [hit.seq + 1, hit.seq]  # a key too


@pytest.mark.django_db
def test_data_search_reads_only_the_newest_window(monkeypatch):
    old = EventFactory(data={"n": "needle"})
    newer = [EventFactory(data={"n": i}) for i in range(3)]
    monkeypatch.setattr(filters, "DATA_SEARCH_WINDOW", 3)

    assert found(data="needle") == []
    monkeypatch.setattr(filters, "DATA_SEARCH_WINDOW", 4)
    assert found(data="needle") == [old.seq]
    assert newer


@pytest.mark.django_db
def test_the_console_the_api_and_the_cli_search_data_alike(client):
    hit = EventFactory(data={"alert": "disk full on db-3"})
    EventFactory(data={"alert": "cpu high"})

    out = io.StringIO()
    call_command("events", "list", "--json", "--data", "db-3", stdout=out)
    assert [item["conduit"]["seq"] for item in json.loads(out.getvalue())["events"]] == [hit.seq]
    _, secret = api_token_with_secret()
    api = client.get("/api/events", {"data": "db-3"}, headers={"Authorization": f"Bearer {secret}"})
    assert [item["conduit"]["seq"] for item in api.json()["events"]] == [hit.seq]
    client.force_login(UserFactory())
    page = client.get("/events/", {"data": "db-3"}).content.decode()
    assert page.count('<tr id="event-') == 1 and f'id="event-{hit.seq}"' in page
    assert 'name="data"' in page


# --- the Event list filter's fields (R29) ---------------------------------------------------------
@pytest.fixture
def handlers(test_handlers):
    """The test handlers registered (tests/conftest.py), for the tests here that route."""


@pytest.mark.django_db
@pytest.mark.usefixtures("handlers")
def test_r29_event_list_filter_validates_its_fields():
    from datetime import datetime

    with pytest.raises(EventListInvalid) as info:
        EventListFilter(since=datetime(2026, 1, 5))
    assert info.value.field == "since"
    with pytest.raises(EventListInvalid) as info:
        EventListFilter(state="nope")
    assert info.value.field == "state"
    with pytest.raises(EventListInvalid) as info:
        EventListFilter(work_id=0)
    assert info.value.field == "work_id"
