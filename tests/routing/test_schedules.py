"""Schedules fire (routing.schedules): each fire time accepted once with its reserved id, from
any number of loops; catch-up after downtime, overlap, pause and fire-now as declared."""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import UTC, datetime, timedelta

import pytest

from causal.clock import system_clock
from causal.models import RouteState
from routing.config.schedules import ScheduleSpec
from routing.config.selectors import live_generation, load_configuration
from routing.config.services import config_apply
from routing.engine.loop import RouteLoop
from routing.models import ScheduleState
from routing.schedules import schedule_event_id, schedule_fire_now, schedule_rows
from tests.conduit_site.management.commands.loopkit import command_running, sigterm
from tests.routing.routerkit import drain, router
from tests.routing.schedulekit import apply_schedule, fire, fired_events, fired_ids, schedule_document
from worklife.models import PauseKind
from worklife.pauses import PauseTarget, pause_create, pause_end

START = datetime(2026, 1, 5, 12, 0, 30, tzinfo=UTC)
TEN_MINUTES = 600


@pytest.fixture
def clock(clock):
    clock.set(START)
    return clock


@pytest.mark.django_db
def test_each_fire_time_is_accepted_once_with_its_reserved_id(clock):
    apply_schedule(clock, every=60, data={"digest": True}, subject="daily")
    assert fire(clock) == []  # first seen now: fire times from now on
    clock.set(START + timedelta(seconds=30, milliseconds=300))
    fired = fire(clock)
    assert [f.outcome for f in fired] == ["fired"]
    assert fire(clock) == []  # the same moment again: nothing due
    [event] = fired_events()
    assert (
        event.envelope_id
        == "schedule/tick/2026-01-05T12:01:00Z"
        == schedule_event_id("tick", fired[0].fire_time)
    )
    assert (event.type, event.subject, event.data, event.scope) == ("s.tick", "daily", {"digest": True}, "s")
    assert event.time == datetime(2026, 1, 5, 12, 1, tzinfo=UTC)


@pytest.mark.django_db
def test_a_second_loop_with_a_stale_view_accepts_nothing_twice(clock):
    apply_schedule(clock, every=60, overlap="allow")
    fire(clock, owner="one")
    clock.advance(60)
    fire(clock, owner="one")
    # A loop that handled nothing yet (its row rolled back) offers the same fire time again.
    ScheduleState.objects.update(handled_until=START)
    again = fire(clock, owner="two")
    assert [f.outcome for f in again] == ["duplicate"]
    assert fired_ids() == ["schedule/tick/2026-01-05T12:01:00Z"]


def _stopped_for_five_fire_times(clock, **policy) -> list[str]:
    """A loop fires at 12:10, then is stopped for five fire times (12:20 .. 12:60), and fires
    again 2 minutes after the last of them: the fire times accepted since."""
    apply_schedule(clock, every=TEN_MINUTES, overlap="allow", **policy)
    fire(clock)
    clock.set(datetime(2026, 1, 5, 12, 10, 5, tzinfo=UTC))
    fire(clock)
    before = set(fired_ids())
    clock.set(datetime(2026, 1, 5, 13, 2, tzinfo=UTC))
    fire(clock)
    return [i.rsplit("/", 1)[1] for i in fired_ids() if i not in before]


@pytest.mark.django_db
def test_after_five_missed_fire_times_catch_up_none_fires_none_of_them(clock):
    assert _stopped_for_five_fire_times(clock, catch_up="none") == []
    state = ScheduleState.objects.get()
    assert state.skipped == 5 and state.last_outcome == "missed"


@pytest.mark.django_db
def test_after_five_missed_fire_times_catch_up_last_fires_the_latest_only(clock):
    assert _stopped_for_five_fire_times(clock, catch_up="last") == ["2026-01-05T13:00:00Z"]


@pytest.mark.django_db
def test_after_five_missed_fire_times_catch_up_all_fires_the_newest_up_to_its_limit_in_order(clock):
    assert _stopped_for_five_fire_times(clock, catch_up="all", catch_up_limit=3) == [
        "2026-01-05T12:40:00Z",
        "2026-01-05T12:50:00Z",
        "2026-01-05T13:00:00Z",
    ]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("declared", "on_time", "missed"),
    [
        ({"every": 10}, 4.9, 5.1),  # half the interval
        ({"every": 0.2}, 0.9, 1.1),  # at least a second
        ({"every": 600}, 59, 61),  # at most a minute
        ({"cron": "* * * * *"}, 29, 31),  # half the time to the next cron fire time
    ],
)
def test_a_fire_time_is_missed_once_later_than_half_the_time_to_the_next_one(
    clock, declared, on_time, missed
):
    spec = ScheduleSpec(scope="s", name="tick", type="s.tick", **declared)
    moment = spec.next_after(START)
    assert not spec.is_late(moment, moment + timedelta(seconds=on_time))
    assert spec.is_late(moment, moment + timedelta(seconds=missed))


@pytest.mark.django_db
def test_after_five_missed_fire_times_catch_up_all_within_its_limit_fires_every_one(clock):
    assert len(_stopped_for_five_fire_times(clock, catch_up="all", catch_up_limit=10)) == 5


@pytest.mark.django_db(transaction=True)
def test_overlap_skip_fires_nothing_while_the_last_fires_work_has_its_input_pending(clock):
    apply_schedule(clock, every=60, overlap="skip")
    fire(clock)
    clock.advance(60)
    fire(clock)
    drain(router(clock))  # queued on the queue-only binding: pending for ever
    clock.advance(60)
    [skipped] = fire(clock)
    assert skipped.outcome.startswith("skipped: the last fire's Work") and skipped.outcome.endswith(
        "is still running"
    )
    assert len(fired_events()) == 1


@pytest.mark.django_db
def test_overlap_allow_fires_even_while_the_last_fire_is_not_routed(clock):
    apply_schedule(clock, every=60, overlap="allow")
    fire(clock)
    for _ in range(3):
        clock.advance(60)
        fire(clock)
    assert len(fired_events()) == 3
    assert all(e.route_state == RouteState.UNROUTED for e in fired_events())


@pytest.mark.django_db
def test_a_paused_schedule_skips_its_fire_times_and_fires_again_once_resumed(clock):
    apply_schedule(clock, every=60, overlap="allow")
    fire(clock)
    target = PauseTarget(PauseKind.SCHEDULE, "s", "tick")
    pause_create(target=target, paused_by="alice", reason="quiet hours", until=None, clock=clock)
    clock.advance(60)
    [skipped] = fire(clock)
    assert skipped.outcome.startswith("skipped: paused by alice") and fired_events() == []
    [row] = schedule_rows(load_configuration(live_generation()), now=clock())
    assert row.paused.startswith("paused by alice") and row.last_outcome.startswith("skipped")
    pause_end(target=target, ended_by="alice", clock=clock)
    clock.advance(60)
    assert [f.outcome for f in fire(clock)] == ["fired"]


@pytest.mark.django_db
def test_fire_now_accepts_an_event_at_once_and_the_rows_show_next_and_last_fire_times(clock):
    apply_schedule(clock, every=TEN_MINUTES)
    configuration = load_configuration(live_generation())
    event = schedule_fire_now(configuration=configuration, scope="s", name="tick", by="alice", clock=clock)
    assert event.envelope_id.startswith("schedule/tick/now/") and event.type == "s.tick"
    [row] = schedule_rows(configuration, now=clock())
    assert row.next_fire == datetime(2026, 1, 5, 12, 10, tzinfo=UTC)
    assert row.last_event == event.seq and row.fired == 1 and row.last_outcome == "fired now by alice"


@pytest.mark.django_db
def test_route_loops_fire_schedules_from_their_passes(clock):
    apply_schedule(clock, every=60, overlap="allow")
    loops = [RouteLoop(clock=clock), RouteLoop(clock=clock)]
    try:
        for loop in loops:
            loop.schedules.every = 0
        for _ in range(5):
            for loop in loops:
                loop.step()
            clock.advance(60)
        assert len(fired_events()) == 4  # 12:01 .. 12:04; the first pass only saw the schedule
    finally:
        for loop in loops:
            loop.close()


@pytest.mark.django_db(transaction=True)
def test_two_route_loops_on_two_hosts_fire_each_of_100_fire_times_exactly_once():
    """Two ``route_loop`` processes on two hosts and one database fire a 0.2 s schedule: over
    100 consecutive fire times each is accepted once (the state row's lock, then the reserved
    id), and both hosts fired some."""
    apply_schedule(system_clock, every=0.2, overlap="allow", catch_up="all", catch_up_limit=100)
    with (
        command_running("route_loop", "--poll-interval", "0.05", host="host-a") as one,
        command_running("route_loop", "--poll-interval", "0.05", host="host-b") as two,
    ):
        deadline = time.monotonic() + 120
        while len(fired_events()) < 102:
            assert time.monotonic() < deadline, f"only {len(fired_events())} fires in time"
            assert one.poll() is None and two.poll() is None, (one.stderr.read(), two.stderr.read())
            time.sleep(0.2)
        sigterm(one)
        sigterm(two)
    events = fired_events()
    times = [e.time for e in events]
    assert len(set(times)) == len(times)
    steps = {round((b - a).total_seconds(), 3) for a, b in zip(times, times[1:], strict=False)}
    assert steps == {0.2}, steps  # no fire time missed, none twice
    assert ScheduleState.objects.get().fired == len(events)
    assert {_host(e) for e in events} == {"host-a", "host-b"}


def _host(event) -> str:
    """The host whose route loop fired ``event`` (accepted by ``core.schedule host-a:PID:…``)."""
    return event.accepted_by.removeprefix("core.schedule ").split(":")[0]


def _catch_up_document() -> str:
    """Scope ``s`` with one 2 s schedule per catch-up policy, named after it."""
    document = json.loads(schedule_document(every=2, overlap="allow"))
    scope = document["scopes"][0]
    tick = scope["schedules"].pop("tick")
    for policy in ("none", "last", "all"):
        scope["schedules"][policy] = {**tick, "catch_up": policy, "catch_up_limit": 10}
    return json.dumps(document)


def _fired_times(name: str) -> list[datetime]:
    prefix = f"schedule/{name}/"
    return sorted(e.time for e in fired_events() if e.envelope_id.startswith(prefix))


@pytest.mark.django_db(transaction=True)
def test_loops_on_two_hosts_stopped_for_five_fire_times_catch_up_as_each_policy_says():
    """Two ``route_loop`` processes on two hosts fire three 2 s schedules (catch-up none, last,
    all). Just after fire time L both are stopped (SIGSTOP) until 1.5 s past L+10, five fire
    times later, then continued: ``none`` fires none of the five, ``last`` only L+10, ``all``
    every one in order; each then fires on time again, every fire time once."""
    config_apply(document=_catch_up_document(), clock=system_clock)
    loop = ("route_loop", "--poll-interval", "0.05")
    with command_running(*loop, host="host-a") as one, command_running(*loop, host="host-b") as two:
        deadline = time.monotonic() + 60
        while not all(len(_fired_times(name)) >= 2 for name in ("none", "last", "all")):
            assert time.monotonic() < deadline, "the schedules did not fire"
            assert one.poll() is None and two.poll() is None, (one.stderr.read(), two.stderr.read())
            time.sleep(0.05)
        last = max(max(_fired_times(name)) for name in ("none", "last", "all"))
        assert {max(_fired_times(name)) for name in ("none", "last", "all")} == {last}
        assert datetime.now(UTC) < last + timedelta(seconds=1.5), "too late to stop before L+2"
        for proc in (one, two):
            os.kill(proc.pid, signal.SIGSTOP)
        try:
            time.sleep(max(0.0, (last + timedelta(seconds=11.5) - datetime.now(UTC)).total_seconds()))
        finally:
            for proc in (one, two):
                os.kill(proc.pid, signal.SIGCONT)
        again = last + timedelta(seconds=14)
        while not all(again in _fired_times(name) for name in ("none", "last", "all")):
            assert time.monotonic() < deadline + 30, "the schedules did not fire again"
            time.sleep(0.1)
        sigterm(one)
        sigterm(two)

    def after_last(name: str) -> list[int]:
        times = [t for t in _fired_times(name) if last < t <= again]
        return [round((t - last).total_seconds()) for t in times]

    assert after_last("none") == [12, 14]
    assert after_last("last") == [10, 12, 14]
    assert after_last("all") == [2, 4, 6, 8, 10, 12, 14]
    ids = [e.envelope_id for e in fired_events()]
    assert len(ids) == len(set(ids))
    assert {_host(e) for e in fired_events()} <= {"host-a", "host-b"}
