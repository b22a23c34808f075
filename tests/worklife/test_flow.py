"""Flow control in the claim (worklife.flow): concurrency per binding and per key, throttle,
debounce, batch and priority, each held with its reason on the Work's row and said in one
line by the Work's "why not running"."""

from __future__ import annotations

import json

import pytest
from django.db import transaction

from tests.routing.routerkit import accept, apply
from tests.worklife.enginekit import route_all, runner, step_until
from tests.worklife.flowkit import flow_document, flow_send, flow_setup, inputs_taken, live_work
from worklife.flow import duration_parse, flow_holds_by_kind, flow_parse, key_parse
from worklife.lifecycle import work_cancel_in_tx
from worklife.models import Attempt, HoldKind, Work, WorkInput, WorkStatus
from worklife.selectors import NotRunning, work_why_not_running

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def loop(clock):
    flow_setup(clock)
    r = runner(clock, slots=8)
    yield r
    r.shutdown(grace=0)


def _why(work: Work, clock) -> str:
    work.refresh_from_db()
    return work_why_not_running(work, now=clock()).text


def test_a_binding_at_its_concurrency_limit_holds_the_rest_until_an_attempt_of_it_ends(clock, loop):
    works = [flow_send(clock, "capped", f"c{i}") for i in range(4)]
    step_until(loop, lambda: len(live_work("capped")) == 2)
    for _ in range(3):
        loop.step()
    assert live_work("capped") == {works[0].pk, works[1].pk}
    held = works[2]
    held.refresh_from_db()
    assert held.hold_kind == HoldKind.CONCURRENCY
    assert _why(held, clock) == (
        f"held: binding `capped` is at its concurrency limit 2 — running: Work {works[0].pk}, {works[1].pk}"
    )
    assert work_why_not_running(held, now=clock()).reason == NotRunning.FLOW_HELD
    assert flow_holds_by_kind(clock())[HoldKind.CONCURRENCY] == 2
    with transaction.atomic():
        work_cancel_in_tx(work_id=works[0].pk, clock=clock)
    # The oldest held Work takes the freed slot, at once (not after the recheck).
    step_until(loop, lambda: live_work("capped") == {works[1].pk, works[2].pk}, timeout=10)
    works[3].refresh_from_db()
    assert works[3].hold_kind == HoldKind.CONCURRENCY


def test_a_per_key_limit_runs_one_attempt_per_channel_and_other_channels_freely(clock, loop):
    first = flow_send(clock, "per_channel", "a", channel="C1")
    second = flow_send(clock, "per_channel", "b", channel="C1")
    other = flow_send(clock, "per_channel", "c", channel="C2")
    step_until(loop, lambda: len(live_work("per_channel")) == 2)
    loop.step()
    assert live_work("per_channel") == {first.pk, other.pk}
    assert _why(second, clock) == (
        f"held: binding `per_channel` is at its concurrency limit 1 for key `C1` — running: Work {first.pk}"
    )


def test_a_throttled_binding_starts_at_most_its_limit_per_period_and_the_rest_wait(clock, loop):
    works = [flow_send(clock, "throttled", f"t{i}") for i in range(3)]
    step_until(loop, lambda: Work.objects.filter(status=WorkStatus.COMPLETED).count() == 2)
    loop.step()
    last = works[2]
    last.refresh_from_db()
    assert last.status == WorkStatus.READY and last.hold_kind == HoldKind.THROTTLE
    assert _why(last, clock).startswith("throttled until ")
    assert "binding `throttled` started 2 attempts in 60 s" in _why(last, clock)
    clock.advance(61)
    step_until(loop, lambda: Work.objects.filter(pk=last.pk, status=WorkStatus.COMPLETED).exists())


def test_a_debounced_work_starts_once_its_input_is_quiet_with_every_pending_input(clock, loop):
    work = flow_send(clock, "debounced", "d")
    flow_send(clock, "debounced", "d")
    loop.step()
    assert not Attempt.objects.filter(work=work).exists()
    assert _why(work, clock).endswith("(input quiet for 10 s)")
    assert _why(work, clock).startswith("debounced until ")
    clock.advance(6)
    flow_send(clock, "debounced", "d")  # the burst goes on: quiet counts from here
    clock.advance(6)
    loop.step()
    loop.step()
    assert not Attempt.objects.filter(work=work).exists()
    clock.advance(5)
    step_until(loop, lambda: Work.objects.filter(pk=work.pk, status=WorkStatus.COMPLETED).exists())
    assert [len(seqs) for seqs in inputs_taken(work)] == [3]


def test_a_debounced_work_under_steady_input_starts_at_its_maximum_wait(clock, loop):
    work = flow_send(clock, "debounced", "m")
    for _ in range(12):
        clock.advance(5)
        flow_send(clock, "debounced", "m")
        loop.step()
        if Attempt.objects.filter(work=work).exists():
            break
    assert Attempt.objects.filter(work=work).exists()
    started = Attempt.objects.get(work=work).started_at
    assert (started - work.created_at).total_seconds() >= 60


def test_a_batching_work_starts_at_its_size_or_when_the_oldest_input_waited(clock, loop):
    full = flow_send(clock, "batched", "b")
    flow_send(clock, "batched", "b")
    loop.step()
    assert _why(full, clock).endswith("or 3 inputs (2 pending)")
    flow_send(clock, "batched", "b")
    step_until(loop, lambda: Work.objects.filter(pk=full.pk, status=WorkStatus.COMPLETED).exists())
    assert [len(seqs) for seqs in inputs_taken(full)] == [3]
    late = flow_send(clock, "batched", "late")
    loop.step()
    assert not Attempt.objects.filter(work=late).exists()
    clock.advance(31)
    step_until(loop, lambda: Work.objects.filter(pk=late.pk, status=WorkStatus.COMPLETED).exists())
    assert [len(seqs) for seqs in inputs_taken(late)] == [1]


def test_claims_take_the_higher_priority_first_then_the_oldest_and_aged_work_before_any(clock, settings):
    flow_setup(clock)
    old = flow_send(clock, "plain", "p")
    urgent = flow_send(clock, "urgent", "u")
    one = runner(clock, slots=1)
    try:
        one.step()
        assert set(Attempt.objects.values_list("work_id", flat=True)) == {urgent.pk}
        step_until(one, lambda: Work.objects.filter(status=WorkStatus.COMPLETED).count() == 2)
        # Starvation is bounded: a Work whose input waited past the aging bound goes first.
        settings.CONDUIT_FLOW_AGING = 5
        aged = flow_send(clock, "plain", "p2")
        clock.advance(6)
        urgent2 = flow_send(clock, "urgent", "u2")
        one.step()
        assert set(Attempt.objects.filter(work__in=[aged, urgent2]).values_list("work_id", flat=True)) == {
            aged.pk
        }
    finally:
        one.shutdown(grace=0)
    assert old.pk < urgent.pk


@pytest.mark.parametrize(
    ("declared", "problem"),
    [
        ({"concurrency": {"limit": 0}}, ("b.concurrency.limit", "at least 1")),
        ({"concurrency": {"limit": 2, "key": "{}"}}, ("b.concurrency.key", "bad key template")),
        ({"concurrency": {"limit": 2, "keys": "x"}}, ("b.concurrency.keys", "unknown key 'keys'")),
        ({"throttle": {"limit": 2}}, ("b.throttle.period", "required")),
        ({"throttle": {"limit": 2, "period": "soon"}}, ("b.throttle.period", "expected a duration")),
        ({"debounce": {"quiet": "30s", "max_wait": "10s"}}, ("b.debounce.max_wait", "at least quiet")),
        ({"batch": 3}, ("b.batch", "expected a mapping")),
        ({"priority": 1000}, ("b.priority", "from -100 to 100")),
    ],
)
def test_a_bad_flow_knob_is_refused_with_its_place(declared, problem):
    policy, problems = flow_parse(declared, "b")
    assert [(place, problem[1] in message) for place, message in problems] == [(problem[0], True)]


def test_durations_and_key_templates_read_as_the_configuration_writes_them():
    assert [duration_parse(v) for v in (10, "10s", "500ms", "5m", "1h")] == [10, 10, 0.5, 300, 3600]
    key = key_parse("chan:{data.channel}")
    assert key.render({"data": {"channel": "C1"}}) == "chan:C1"
    assert key.render({"data": {}}) == "chan:-"


def test_an_event_arriving_through_a_route_with_a_priority_raises_its_works(clock):
    doc = json.loads(flow_document())
    doc["scopes"][0]["routes"].append(
        {
            "slot": "page",
            "handler": "match",
            "params": {"type": "f.page", "keys": ["k:{data.key}"]},
            "binding": "plain",
            "policy": "queue",
            "priority": 20,
        }
    )
    apply(clock, json.dumps(doc))
    first = flow_send(clock, "plain", "q1")
    paged = flow_send(clock, "plain", "q2")
    accept(clock, "f.page", {"key": "q2"}, scope="f")
    route_all(clock)
    assert WorkInput.objects.filter(work=paged, priority=20).count() == 1
    one = runner(clock, slots=1)
    try:
        one.step()
        assert set(Attempt.objects.values_list("work_id", flat=True)) == {paged.pk}
    finally:
        one.shutdown(grace=0)
    assert first.pk < paged.pk
