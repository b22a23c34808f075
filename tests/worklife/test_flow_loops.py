"""Flow control across work loops: two ``manage.py work_loop`` processes on two hosts
(``CONDUIT_HOSTNAME``) and one database respect one binding's concurrency limit, a per-key limit
and a throttle together, checked from the attempts' start and end times."""

from __future__ import annotations

import os
import time

import pytest

from causal.clock import system_clock
from routing.acceptance.services import events_accept
from tests.conduit_site.management.commands.loopkit import command_running, sigterm
from tests.routing.routerkit import apply, drain, router
from tests.worklife.flowkit import flow_document, most_at_once, most_started_in
from worklife.models import Attempt, Work, WorkStatus

pytestmark = pytest.mark.django_db(transaction=True)

BLINK = {"executor": "python", "settings": {"target": "tests.worklife.targets:blink"}}
# How many Work the binding-wide limit is checked over (FLOW_LOOPS_N to scale it).
N = int(os.environ.get("FLOW_LOOPS_N", "1000"))


def _accept(binding: str, n: int, *, keys: int = 0) -> None:
    payloads = [
        {
            "specversion": "1.0",
            "id": f"{binding}-{i}",
            "source": "tests",
            "type": f"f.{binding}",
            "scope": "f",
            "data": {"key": f"{binding}-{i}", **({"channel": f"C{i % keys}"} if keys else {})},
        }
        for i in range(n)
    ]
    for start in range(0, n, 500):
        events_accept(payloads=payloads[start : start + 500], clock=system_clock, trusted=True)


def _run_two_loops(total: int, timeout: float) -> None:
    loop = ("work_loop", "--slots", "6", "--poll-interval", "0.02")
    with command_running(*loop, host="host-a") as first, command_running(*loop, host="host-b") as second:
        deadline = time.monotonic() + timeout
        while Work.objects.filter(status=WorkStatus.COMPLETED).count() < total:
            assert time.monotonic() < deadline, (
                f"{Work.objects.filter(status=WorkStatus.COMPLETED).count()} of {total} completed"
            )
            time.sleep(0.2)
        sigterm(first)
        sigterm(second)


def _intervals(binding: str) -> list[tuple]:
    return list(Attempt.objects.filter(binding=binding).values_list("started_at", "ended_at"))


def test_two_work_loops_never_exceed_a_bindings_concurrency_limit_or_a_keys(clock):
    apply(
        system_clock,
        flow_document(
            {
                "capped": {**BLINK, "concurrency": {"limit": 3}},
                "per_channel": {**BLINK, "concurrency": {"limit": 1, "key": "{data.channel}"}},
            }
        ),
    )
    _accept("capped", N)
    _accept("per_channel", 200, keys=4)
    drain(router(system_clock), rounds=200)
    assert Work.objects.count() == N + 200
    _run_two_loops(N + 200, timeout=600)
    capped = _intervals("capped")
    assert len(capped) == N and all(end is not None for _, end in capped)
    assert most_at_once(capped) == 3  # reached, never passed
    owners = set(Attempt.objects.filter(binding="capped").values_list("lease_owner", flat=True))
    assert {owner.split(":")[0] for owner in owners} == {"host-a", "host-b"}  # both hosts ran them
    for channel in range(4):
        rows = Attempt.objects.filter(binding="per_channel", work__inputs__event__data__channel=f"C{channel}")
        assert most_at_once(list(rows.values_list("started_at", "ended_at"))) == 1


def test_two_work_loops_never_start_more_than_a_throttle_allows_per_period(clock):
    apply(system_clock, flow_document({"throttled": {**BLINK, "throttle": {"limit": 20, "period": "1s"}}}))
    _accept("throttled", 150)
    drain(router(system_clock), rounds=100)
    _run_two_loops(150, timeout=300)
    starts = list(Attempt.objects.filter(binding="throttled").values_list("started_at", flat=True))
    assert len(starts) == 150
    assert most_started_in(starts, 1.0) == 20
