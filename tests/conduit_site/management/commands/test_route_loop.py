"""``manage.py route_loop``: modes, flags, signals and the heartbeat doctor reads (D3)."""

from __future__ import annotations

import threading
import time
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from causal.clock import system_clock
from causal.models import KV, Event, RouteState
from routing.acceptance.services import events_accept
from routing.engine.heartbeat import HEARTBEATS_NAMESPACE
from routing.engine.loop import RouteLoop
from tests.conduit_site.management.commands.loopkit import command_running, sigterm
from tests.routing.routerkit import MATCH_ONLY, apply, conversation_payloads


@pytest.mark.django_db
def test_d3_drain_routes_everything_and_reports_plain_lines_off_a_terminal():
    apply(system_clock, MATCH_ONLY)
    events_accept(payloads=conversation_payloads(30, 4), clock=system_clock, may_address_work=True)
    out = StringIO()
    call_command("route_loop", "--drain", "--batch-size", "10", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("routed 10, backlog ")
    assert lines[-1] == "drained: 30 Events routed, 0 unrouted left"
    assert not Event.objects.filter(route_state=RouteState.UNROUTED).exists()
    beat = KV.objects.get(namespace=HEARTBEATS_NAMESPACE)
    assert beat.value["routed"] == 30 and beat.value["generation"] == "1"


@pytest.mark.django_db
@pytest.mark.parametrize(("every", "counts", "lines"), [(0.0, 8, 6), (1e9, 3, 1)])
def test_drain_counts_the_backlog_after_its_first_pass_then_once_a_second(monkeypatch, every, counts, lines):
    """Counting the backlog reads every unrouted Event, so --drain counts it after its
    first pass and then at most once every PROGRESS_EVERY seconds, not after every pass (a
    drain's time would grow with the square of its backlog, and each of several loops counts)."""
    from conduit_site.management.commands import route_loop

    apply(system_clock, MATCH_ONLY)
    events_accept(payloads=conversation_payloads(30, 4), clock=system_clock, may_address_work=True)
    monkeypatch.setattr(route_loop, "PROGRESS_EVERY", every)
    counted = []
    backlog = RouteLoop.backlog
    monkeypatch.setattr(RouteLoop, "backlog", lambda self: counted.append(1) or backlog(self))
    out = StringIO()
    call_command("route_loop", "--drain", "--batch-size", "5", stdout=out)
    # Start, progress lines (six passes of five Events), end.
    assert len(counted) == counts
    printed = out.getvalue().splitlines()
    assert len(printed) == lines + 1
    assert printed[0] == "routed 5, backlog 25"
    assert printed[-1] == "drained: 30 Events routed, 0 unrouted left"


@pytest.mark.django_db
def test_d3_once_runs_one_pass():
    apply(system_clock, MATCH_ONLY)
    events_accept(payloads=conversation_payloads(30, 4), clock=system_clock, may_address_work=True)
    out = StringIO()
    call_command("route_loop", "--once", "--batch-size", "10", stdout=out)
    # Every Event still unrouted is counted, not only those of the pass's window.
    assert out.getvalue().strip() == "pass: 10 routed, 20 unrouted left, generation 1"
    assert Event.objects.filter(route_state=RouteState.UNROUTED).count() == 20


@pytest.mark.django_db
def test_once_asks_the_routes_of_its_own_window_only(test_handlers):
    """A full window, but one pass: no next window is claimed and asked only to be given back
    (a pass of the running loop would, on SQLite)."""
    from tests.routing import sample_handlers
    from tests.routing.routerkit import SCRIPTED_ONLY

    apply(system_clock, SCRIPTED_ONLY)
    events_accept(
        payloads=[
            {"specversion": "1.0", "id": f"o{n}", "source": "tests", "type": "x", "scope": "acme", "data": {}}
            for n in range(8)
        ],
        clock=system_clock,
    )
    call_command("route_loop", "--once", "--batch-size", "4", stdout=StringIO())
    assert sorted(sample_handlers.CALLS) == [f"o{n}" for n in range(4)]
    assert Event.objects.filter(route_state=RouteState.UNROUTED).count() == 4
    assert not Event.objects.exclude(claimed_by="").exists()


@pytest.mark.django_db
def test_route_loop_routes_with_the_collector_tuned_and_puts_it_back(monkeypatch):
    """Passes run with the first generation's threshold raised, start-up's
    objects still frozen (conduit_site.apps); the collector is as it was once the command ends."""
    import gc

    from conduit_site.management.loops import LOOP_GC_THRESHOLD

    apply(system_clock, MATCH_ONLY)
    events_accept(payloads=conversation_payloads(5, 2), clock=system_clock, may_address_work=True)
    before = (gc.get_threshold(), gc.get_freeze_count())
    seen = []
    step = RouteLoop.step

    def observed(self, **options):
        seen.append((gc.get_threshold()[0], gc.get_freeze_count()))
        return step(self, **options)

    monkeypatch.setattr(RouteLoop, "step", observed)
    call_command("route_loop", "--once", stdout=StringIO())
    assert seen and seen[0][0] == max(LOOP_GC_THRESHOLD, before[0][0]) and seen[0][1] == before[1] > 0
    assert (gc.get_threshold(), gc.get_freeze_count()) == before


@pytest.mark.django_db
def test_d3_without_configuration_once_says_so():
    out = StringIO()
    call_command("route_loop", "--once", stdout=out)
    assert "no configuration applied" in out.getvalue()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--batch-size", "0"], "--batch-size must be at least 1"),
        (["--call-timeout", "0"], "--call-timeout must be positive"),
        (["--poll-interval", "-1"], "--poll-interval cannot be negative"),
        (["--gather", "-0.1"], "--gather cannot be negative"),
    ],
)
def test_d3_bad_flags_are_refused(args, message):
    with pytest.raises(CommandError, match=message):
        call_command("route_loop", "--once", *args)


@pytest.mark.django_db(transaction=True)
def test_d3_sigterm_stops_the_loop_gracefully():
    apply(system_clock, MATCH_ONLY)
    with command_running("route_loop", "--poll-interval", "0.1") as proc:
        deadline = time.monotonic() + 60
        while not KV.objects.filter(namespace=HEARTBEATS_NAMESPACE).exists():
            assert time.monotonic() < deadline, "the loop recorded no heartbeat"
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.1)
        events_accept(payloads=conversation_payloads(5, 2), clock=system_clock, may_address_work=True)
        while Event.objects.filter(route_state=RouteState.UNROUTED).exists():
            assert time.monotonic() < deadline, "the running loop routed nothing"
            time.sleep(0.1)
        out, err = sigterm(proc)
    assert proc.returncode == 0, err
    assert "route_loop stopped" in out


@pytest.mark.django_db(transaction=True)
def test_an_acceptance_wakes_the_idle_loop_long_before_its_poll_interval():
    """A loop waiting out a 30 s poll interval routes a new Event within seconds: the
    acceptance's commit wakes it (LISTEN/NOTIFY on PostgreSQL, a local socket on SQLite)."""
    apply(system_clock, MATCH_ONLY)
    with command_running("route_loop", "--poll-interval", "30") as proc:
        deadline = time.monotonic() + 60
        # The heartbeat ends the first (empty) pass: what is accepted next, only a wake-up or
        # the poll interval 30 s later can bring to the loop.
        while not KV.objects.filter(namespace=HEARTBEATS_NAMESPACE).exists():
            assert time.monotonic() < deadline, "the loop recorded no heartbeat"
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.05)
        events_accept(payloads=conversation_payloads(3, 1), clock=system_clock, may_address_work=True)
        accepted = time.monotonic()
        while Event.objects.filter(route_state=RouteState.UNROUTED).exists():
            assert time.monotonic() - accepted < 10, "not routed within 10 s of acceptance: no wake-up"
            time.sleep(0.05)
        out, err = sigterm(proc)
    assert proc.returncode == 0, err
    assert "route_loop stopped" in out


@pytest.mark.django_db
def test_a_woken_loop_beats_once_per_interval_unless_something_changes(clock):
    """Many short passes (one per acceptance) write one heartbeat per ``heartbeat_every``; a
    new generation or a failing pass is written at once."""
    apply(clock, MATCH_ONLY)
    loop = RouteLoop(clock=clock, heartbeat_every=5.0)
    try:
        loop.step()
        first = KV.objects.get(namespace=HEARTBEATS_NAMESPACE)
        events_accept(payloads=conversation_payloads(3, 1), clock=clock, may_address_work=True)
        clock.advance(seconds=1)
        assert loop.step().settled == 3
        assert KV.objects.get(namespace=HEARTBEATS_NAMESPACE).value == first.value

        clock.advance(seconds=4)
        loop.step()
        assert KV.objects.get(namespace=HEARTBEATS_NAMESPACE).value["routed"] == 3

        loop.pass_failed(RuntimeError("boom"))
        assert (
            KV.objects.get(namespace=HEARTBEATS_NAMESPACE).value["failing"]["error"] == "RuntimeError: boom"
        )
        loop.step()  # the next pass that goes through clears it at once
        assert KV.objects.get(namespace=HEARTBEATS_NAMESPACE).value["failing"] is None

        apply(clock, MATCH_ONLY.replace('"c.*"', '"c.x*"'))
        loop.step()
        assert KV.objects.get(namespace=HEARTBEATS_NAMESPACE).value["generation"] == "2"
    finally:
        loop.close()


class ScriptedLoop:
    """Stands in for RouteLoop in the schedule test: its passes' results are scripted."""

    def __init__(self, results, batch_size: int = 500) -> None:
        from types import SimpleNamespace

        self.results = list(results)
        self.options = SimpleNamespace(batch_size=batch_size)
        self.owner = "scripted"

    def step(self):
        return self.results.pop(0)


class RecordingStop(threading.Event):
    """A stop event that records each wait and stops the loop once the script is spent."""

    def __init__(self, loop: ScriptedLoop) -> None:
        super().__init__()
        self.loop = loop
        self.waits: list[float] = []

    def wait(self, timeout=None):
        self.waits.append(timeout)
        if not self.loop.results:
            self.set()
        return self.is_set()


def test_after_a_pass_that_routed_events_the_loop_gathers_before_the_next():
    """--gather: a pass that routed some Events (a stream) waits the gather time, so that the
    next window holds what arrived meanwhile; a full window (a backlog) goes on at once; an
    empty pass waits the poll interval (no listener here)."""
    from conduit_site.management.commands.route_loop import Command
    from routing.engine.loop import StepResult

    loop = ScriptedLoop(
        [
            StepResult(settled=3, generation="1"),  # a stream: gather
            StepResult(settled=10, generation="1"),  # a full window: at once
            StepResult(settled=1, generation="1"),  # gather
            StepResult(empty=True),  # nothing left: poll
        ],
        batch_size=10,
    )
    stop = RecordingStop(loop)
    Command(stdout=StringIO())._forever(loop, stop, 0.5, None, gather=0.01)
    assert stop.waits == [0.01, 0.01, 0.5]
    loop = ScriptedLoop([StepResult(settled=3, generation="1"), StepResult(empty=True)], batch_size=10)
    stop = RecordingStop(loop)
    Command(stdout=StringIO())._forever(loop, stop, 0.5, None, gather=0.0)
    assert stop.waits == [0.5]  # --gather 0: the next pass at once


@pytest.mark.django_db
def test_drain_runs_the_stored_bulk_jobs_to_their_end_and_routes_the_replay_copies(test_handlers):
    from controls.jobs import events_replay_job
    from controls.models import BulkJob

    apply(system_clock, MATCH_ONLY)
    events_accept(payloads=conversation_payloads(3, 1), clock=system_clock, may_address_work=True)
    call_command("route_loop", "--drain", stdout=StringIO())
    seqs = list(Event.objects.order_by("seq").values_list("seq", flat=True))
    job = events_replay_job(seqs=seqs, count=len(seqs), user="ops", clock=system_clock)
    out = StringIO()
    call_command("route_loop", "--drain", stdout=out)
    job = BulkJob.objects.get(pk=job.pk)
    assert (job.state, job.succeeded) == ("done", len(seqs))
    assert f"bulk job {job.pk} done: {len(seqs)} done, 0 refused" in out.getvalue()
    assert not Event.objects.filter(route_state=RouteState.UNROUTED).exists()  # the copies routed too


@pytest.mark.django_db(transaction=True)
def test_a_running_route_loop_runs_a_bulk_job_stored_while_it_idles(test_handlers):
    """``make run`` starts no other runner: the route loop's process, woken by the job's commit,
    runs it batch after batch."""
    from controls.jobs import work_bulk_job
    from controls.models import BulkJob
    from controls.work import WorkControl
    from tests.worklife.factories import WorkFactory

    apply(system_clock, MATCH_ONLY)
    works = [WorkFactory(scope="acme", failures=5, parked_at=system_clock()) for _ in range(5)]
    with command_running("route_loop", "--poll-interval", "30") as proc:
        deadline = time.monotonic() + 60
        while not KV.objects.filter(namespace=HEARTBEATS_NAMESPACE).exists():
            assert time.monotonic() < deadline, "the loop recorded no heartbeat"
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.05)
        job = work_bulk_job(
            action=WorkControl.RETRY, ids=[w.pk for w in works], count=5, user="ops", clock=system_clock
        )
        stored = time.monotonic()
        while BulkJob.objects.get(pk=job.pk).state != "done":
            assert time.monotonic() - stored < 10, "the job did not run within 10 s: no wake-up"
            time.sleep(0.05)
        out, err = sigterm(proc)
    assert proc.returncode == 0, err
    assert BulkJob.objects.get(pk=job.pk).succeeded == 5
