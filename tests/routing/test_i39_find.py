"""Finding Events and Work by part of what people remember (issue 39 item 10d): an id or subject
by its start, text in an Event's data (a bounded scan), a Work by the start of a key."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from routing.records import filters
from routing.records.filters import EventListFilter
from routing.records.selectors import events_route_page
from tests.causal.factories import EventFactory
from tests.routing.factories import UserFactory, api_token_with_secret
from tests.worklife.factories import CorrelationKeyFactory, WorkFactory
from worklife.selectors import WorkFilter, work_filtered

pytestmark = pytest.mark.django_db


def found(**filters) -> list[int]:
    return [item.event.seq for item in events_route_page(EventListFilter(**filters))]


def test_i39_10_d_find_takes_the_start_of_an_id_or_a_subject():
    pr42 = EventFactory(envelope_id="pr-42-opened", subject="acme/web#42")
    pr43 = EventFactory(envelope_id="pr-43-opened", subject="acme/web#43")
    EventFactory(envelope_id="deploy-1", subject="acme/api")

    assert found(query="pr-4") == [pr43.seq, pr42.seq]
    assert found(query="pr-42-opened") == [pr42.seq]
    assert found(query="acme/web#4") == [pr43.seq, pr42.seq]
    assert found(query="opened") == []  # the start, not anywhere inside
    assert found(query=f"#{pr42.seq}") == [pr42.seq]


def test_i39_10_d_data_search_finds_text_in_the_data_case_sensitively():
    hit = EventFactory(data={"pull_request": {"title": "Fix the flaky login test", "user": "zoë"}})
    EventFactory(data={"pull_request": {"title": "Add metrics"}})
    quoted = EventFactory(data={"text": 'say "hi"'})
    EventFactory(data=None)

    assert found(data="flaky login") == [hit.seq]
    assert found(data="Flaky") == []
    assert found(data="zoë") == [hit.seq]
    assert found(data='"hi"') == [quoted.seq]
    assert found(data="pull_request") == [hit.seq + 1, hit.seq]  # a key too


def test_i39_10_d_data_search_reads_only_the_newest_window(monkeypatch):
    old = EventFactory(data={"n": "needle"})
    newer = [EventFactory(data={"n": i}) for i in range(3)]
    monkeypatch.setattr(filters, "DATA_SEARCH_WINDOW", 3)

    assert found(data="needle") == []
    monkeypatch.setattr(filters, "DATA_SEARCH_WINDOW", 4)
    assert found(data="needle") == [old.seq]
    assert newer


def test_i39_10_d_the_console_the_api_and_the_cli_search_data_alike(client):
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


def test_i39_10_d_the_work_key_filter_takes_the_start_of_a_key():
    web42 = WorkFactory(scope="acme/web")
    CorrelationKeyFactory(work=web42, key="pr:acme/web#42")
    web43 = WorkFactory(scope="acme/web")
    CorrelationKeyFactory(work=web43, key="pr:acme/web#43")
    api = WorkFactory(scope="acme/api")
    CorrelationKeyFactory(work=api, key="pr:acme/api#1")

    def ids(**filters):
        return sorted(work_filtered(WorkFilter(**filters)).values_list("pk", flat=True))

    assert ids(key="pr:acme/web#") == [web42.pk, web43.pk]
    assert ids(key="pr:acme/web#42") == [web42.pk]
    assert ids(key="pr:", scope="acme/api") == [api.pk]
    assert ids(key="acme") == []
