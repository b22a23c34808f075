"""``manage.py work retry|cancel --filter …`` and ``events replay --filter …``: the count check
(nothing stored without it or with another number), the job run in the foreground with a progress
bar on a terminal and its result as JSON with ``--json``, and ``--no-wait`` leaving it to the
route loop."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from controls.models import BulkJob
from tests.controls.controlkit import control_events, parked_work
from tests.routing.factories import RouteRecordFactory
from tests.routing.routerkit import apply
from tests.worklife.factories import WorkFactory
from worklife.models import Work

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def handlers(test_handlers):
    """Routing with the test handlers registered."""


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def run(command: str, *args: str, out: io.StringIO | None = None) -> str:
    out = out if out is not None else io.StringIO()
    call_command(command, *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_work_retry_by_filter_without_the_count_says_how_many_match_and_stores_nothing(clock):
    apply(clock)
    for _ in range(3):
        parked_work(clock)
    with pytest.raises(CommandError, match=r"--count: the filter matches 3 Work: .* pass --count 3"):
        run("work", "retry", "--filter", "status=parked")
    with pytest.raises(CommandError, match=r"the filter matches 3 Work, not 2"):
        run("work", "retry", "--filter", "status=parked", "--count", "2")
    with pytest.raises(CommandError, match=r"--filter: expected KEY=VALUE"):
        run("work", "retry", "--filter", "colour=red", "--count", "3")
    with pytest.raises(CommandError, match=r"name one Work or use --filter, not both"):
        run("work", "retry", "7", "--filter", "status=parked", "--count", "3")
    assert not BulkJob.objects.exists() and not control_events()


def test_work_retry_by_filter_runs_the_job_with_a_progress_bar_on_a_terminal(clock):
    apply(clock)
    parked = [parked_work(clock) for _ in range(3)]
    out = run(
        "work", "retry", "--filter", "status=parked", "--filter", "scope=acme", "--count", "3", out=Terminal()
    )
    assert "\r[" in out and "] 3 of 3, 3 done, 0 refused" in out
    assert "done: 3 Work matching scope=acme status=parked: 3 done, 0 refused of 3" in out
    assert not Work.objects.filter(pk__in=[w.pk for w in parked], parked_at__isnull=False).exists()
    assert len(control_events("retry_work")) == 3


def test_work_cancel_by_filter_answers_json_and_exits_non_zero_when_some_were_refused(clock):
    apply(clock)
    live = WorkFactory(scope="acme", binding="triage")
    done = WorkFactory(scope="acme", binding="triage", status="completed")
    out = io.StringIO()
    with pytest.raises(CommandError, match="refused 1 of 2"):
        run(
            "work",
            "cancel",
            "--filter",
            "binding=triage",
            "--count",
            "2",
            "--reason",
            "bad deploy",
            "--json",
            out=out,
        )
    body = json.loads(out.getvalue())
    assert (body["kind"], body["state"], body["done"], body["refused"]) == ("cancel_work", "done", 1, 1)
    assert [(i["target"], i["outcome"]) for i in body["items"]] == [(live.pk, "done"), (done.pk, "refused")]
    assert "\r" not in out.getvalue()
    assert control_events("cancel_work")[0].data["reason"] == "bad deploy"


def test_work_retry_no_wait_stores_the_job_for_the_route_loop(clock):
    apply(clock)
    parked_work(clock)
    out = run("work", "retry", "--filter", "status=parked", "--count", "1", "--no-wait")
    job = BulkJob.objects.get()
    assert out.strip() == f"job {job.pk} stored: 1 Work matching status=parked; the route loop runs it"
    assert job.state == "pending" and not control_events()


def test_events_replay_by_filter_needs_the_count_then_replays_each(clock):
    apply(clock)
    events = [
        RouteRecordFactory(policy="unmatched", route="", event__type="alert.fired").event for _ in range(2)
    ]
    RouteRecordFactory(policy="unmatched", route="", event__type="noise.ping")
    with pytest.raises(CommandError, match=r"--count: the filter matches 2 Events: .* pass --count 2"):
        run("events", "replay", "--filter", "type=alert.*", "--filter", "policy=unmatched")
    with pytest.raises(CommandError, match=r"--filter: expected KEY=VALUE"):
        run("events", "replay", "--filter", "colour=red", "--count", "1")
    assert not BulkJob.objects.exists()
    body = json.loads(run("events", "replay", "--filter", "type=alert.*", "--count", "2", "--json"))
    assert (body["kind"], body["done"], body["total"]) == ("replay_event", 2, 2)
    assert [i["target"] for i in body["items"]] == [e.seq for e in events]
    assert all(i["copy_seq"] for i in body["items"])
    assert len(control_events("replay_event")) == 2
