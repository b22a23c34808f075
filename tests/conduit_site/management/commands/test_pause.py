"""``manage.py pause``, ``resume`` and ``schedules``: pause with who, why and until, list, resume;
schedules with next and last fire times, fire one now; refusals exit non-zero storing nothing."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from tests.routing.factories import T0
from tests.routing.schedulekit import apply_schedule, fired_events
from worklife.models import Pause

pytestmark = pytest.mark.django_db


def _run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.fixture
def live():
    apply_schedule(lambda: T0, every=3600)


def test_pause_list_and_resume_a_binding_from_the_command_line(live):
    said = _run("pause", "binding", "s", "inbox", "--reason", "incident 42", "--until", "2h")
    assert said.startswith("binding 'inbox' in s: paused by cli at ") and ": incident 42 (until " in said
    assert "binding 'inbox' in s: paused by cli" in _run("pause", "--list")
    assert _run("resume", "binding", "s", "inbox").strip() == "binding 'inbox' in s: resumed"
    assert _run("pause", "--list").strip() == "nothing is paused"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("binding", "s"), "name the binding"),
        (("binding", "s", "nope"), "no binding 'nope' in scope s"),
        (("scope", "elsewhere"), "scope elsewhere is not in the live configuration"),
        (("scope", "s", "--until", "whenever"), "until: expected a duration"),
        ((), "name what to pause"),
    ],
)
def test_a_refused_pause_exits_non_zero_and_stores_nothing(live, args, message):
    with pytest.raises(CommandError, match=message):
        _run("pause", *args)
    assert not Pause.objects.exists()


def test_resuming_what_is_not_paused_is_refused(live):
    with pytest.raises(CommandError, match="is not paused"):
        _run("resume", "scope", "s")


def test_schedules_lists_next_fire_times_and_fires_one_now(live):
    listed = _run("schedules")
    assert listed.startswith("s:tick  every 3600 s  next ") and "last never" in listed
    assert _run("schedules", "--fire", "s", "tick").startswith("fired s:tick now: Event #")
    assert len(fired_events()) == 1
    assert "fired now by cli" in _run("schedules")
    with pytest.raises(CommandError, match="no schedule 'nope'"):
        _run("schedules", "--fire", "s", "nope")
