"""A scope's schedules as declared (routing.config.schedules): validated with their places, and
their fire times the same on every host, cron ones in their time zone across daylight saving."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from routing.config.problems import ConfigInvalid
from routing.config.schedules import fire_time_text, schedule_spec
from routing.config.validate import parse_document


def _doc(schedules) -> str:
    return json.dumps({"version": 1, "scopes": [{"path": "s", "schedules": schedules}]})


@pytest.mark.parametrize(
    ("schedule", "place"),
    [
        ({"type": "x"}, "digest"),
        ({"cron": "0 9 * * *", "every": 60, "type": "x"}, "digest"),
        ({"cron": "61 9 * * *", "type": "x"}, "digest.cron"),
        ({"cron": "0 9 * * *", "timezone": "Mars/Olympus", "type": "x"}, "digest.timezone"),
        ({"every": 60, "timezone": "UTC", "type": "x"}, "digest.timezone"),
        ({"every": 0.01, "type": "x"}, "digest.every"),
        ({"every": 60}, "digest.type"),
        ({"every": 60, "type": "core.tick"}, "digest.type"),
        ({"every": 60, "type": "x", "overlap": "queue"}, "digest.overlap"),
        ({"every": 60, "type": "x", "catch_up": "some"}, "digest.catch_up"),
        ({"every": 60, "type": "x", "catch_up_limit": 0}, "digest.catch_up_limit"),
        ({"every": 60, "type": "x", "when": "later"}, "digest.when"),
    ],
)
def test_a_bad_schedule_is_refused_naming_its_place(schedule, place):
    with pytest.raises(ConfigInvalid) as caught:
        parse_document(_doc({"digest": schedule}))
    assert any(p.place == f"scopes[0].schedules.{place}" for p in caught.value.problems), caught.value


def test_a_valid_schedule_is_kept_with_its_name():
    parsed = parse_document(
        _doc({"digest": {"cron": "0 9 * * 1-5", "timezone": "Europe/Berlin", "type": "d"}})
    )
    assert parsed.scopes[0].schedules == (
        {"name": "digest", "cron": "0 9 * * 1-5", "timezone": "Europe/Berlin", "type": "d"},
    )


def test_a_cron_schedule_fires_at_its_local_time_on_both_sides_of_a_daylight_saving_change():
    spec = schedule_spec("s", "digest", {"cron": "0 9 * * *", "timezone": "Europe/Berlin", "type": "d"})
    times = spec.due(datetime(2026, 3, 27, 12, tzinfo=UTC), datetime(2026, 3, 30, 12, tzinfo=UTC))
    assert times == [
        datetime(2026, 3, 28, 8, tzinfo=UTC),  # 09:00 CET
        datetime(2026, 3, 29, 7, tzinfo=UTC),  # 09:00 CEST
        datetime(2026, 3, 30, 7, tzinfo=UTC),
    ]


def test_an_interval_counts_from_the_epoch_so_every_host_computes_the_same_fire_times():
    spec = schedule_spec("s", "tick", {"every": 0.2, "type": "t"})
    after = datetime(2026, 1, 5, 12, 0, 0, 130000, tzinfo=UTC)
    assert spec.next_after(after) == datetime(2026, 1, 5, 12, 0, 0, 200000, tzinfo=UTC)
    assert spec.due(after, after + timedelta(seconds=1)) == [
        datetime(2026, 1, 5, 12, 0, 0, 200000, tzinfo=UTC) + timedelta(seconds=0.2 * i) for i in range(5)
    ]
    assert fire_time_text(datetime(2026, 1, 5, 12, 0, 0, 200000, tzinfo=UTC)) == "2026-01-05T12:00:00.200Z"
    assert fire_time_text(datetime(2026, 1, 5, 12, tzinfo=UTC)) == "2026-01-05T12:00:00Z"
