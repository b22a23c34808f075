"""One parser of the moments the filters take (ISO 8601, a time ago like -10m, -2h or -3d, today
and yesterday), alike in the console, the API and the CLI."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command

from infra.times import parse_time
from tests.causal.factories import EventFactory
from tests.routing.factories import UserFactory, api_token_with_secret

NOW = datetime(2026, 1, 7, 15, 30, 5, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "moment"),
    [
        ("-10m", NOW - timedelta(minutes=10)),
        ("-2h", NOW - timedelta(hours=2)),
        ("-3d", NOW - timedelta(days=3)),
        (" -45s ", NOW - timedelta(seconds=45)),
        ("-1w", NOW - timedelta(weeks=1)),
        ("today", datetime(2026, 1, 7, tzinfo=UTC)),
        ("Yesterday", datetime(2026, 1, 6, tzinfo=UTC)),
        ("2026-01-05T12:00", datetime(2026, 1, 5, 12, tzinfo=UTC)),
        ("2026-01-05T12:00:00+01:00", datetime(2026, 1, 5, 11, tzinfo=UTC)),
    ],
)
def test_moments_are_read_as_people_type_them(text, moment):
    assert parse_time(text, now=NOW) == moment


@pytest.mark.parametrize("text", ["last week", "-2", "2h", "-2y", "tomorrow", ""])
def test_anything_else_is_refused_naming_each_accepted_form(text):
    with pytest.raises(ValueError) as refused:
        parse_time(text, now=NOW)
    message = str(refused.value)
    assert "ISO 8601" in message and "-2h" in message and "today or yesterday" in message


@pytest.mark.django_db
def test_the_console_the_api_and_the_cli_read_minus_2h_alike(client):
    now = datetime.now(UTC)
    EventFactory(accepted_at=now - timedelta(hours=3))
    recent = EventFactory(accepted_at=now - timedelta(hours=1))
    old_yesterday = EventFactory(accepted_at=now.replace(hour=0, minute=0, second=0) - timedelta(hours=30))

    out = io.StringIO()
    call_command("events", "list", "--json", "--since", "-2h", stdout=out)
    assert [item["conduit"]["seq"] for item in json.loads(out.getvalue())["events"]] == [recent.seq]

    _, secret = api_token_with_secret()
    api = client.get("/api/events", {"since": "-2h"}, headers={"Authorization": f"Bearer {secret}"})
    assert [item["conduit"]["seq"] for item in api.json()["events"]] == [recent.seq]

    client.force_login(UserFactory())
    page = client.get("/events/", {"since": "-2h"}).content.decode()
    assert f'id="event-{recent.seq}"' in page and page.count('<tr id="event-') == 1
    until = client.get("/events/", {"until": "yesterday"}).content.decode()
    assert f'id="event-{old_yesterday.seq}"' in until and until.count('<tr id="event-') == 1

    bad = client.get("/events/", {"since": "last week"})
    assert bad.status_code == 400 and "a time ago like -10m, -2h or -3d" in bad.content.decode()


def test_a_time_ago_before_the_year_1_is_refused_not_an_error():
    with pytest.raises(ValueError, match="further back than times go"):
        parse_time("-999999w", now=NOW)


def test_an_iso_time_is_read_in_utc_whatever_its_offset():
    moment = parse_time("0841-10-25T20:35:18-19:38", now=NOW)
    assert moment.utcoffset() == timedelta(0) and moment == datetime(841, 10, 26, 16, 13, 18, tzinfo=UTC)
    with pytest.raises(ValueError, match="further back than times go"):
        parse_time("0001-01-01T00:00:00+01:00", now=NOW)


@pytest.mark.django_db
def test_the_events_list_takes_an_offset_its_database_would_not(client):
    from tests.routing.factories import api_token_with_secret, user_with_role

    _, secret = api_token_with_secret(user=user_with_role("viewer", username="vic"))
    response = client.get(
        "/api/events", {"since": "0841-10-25T20:35:18-19:38"}, headers={"Authorization": f"Bearer {secret}"}
    )
    assert response.status_code == 200, response.content
