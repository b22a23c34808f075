"""The policy decision as the pure function it is (R10, R30): no database, no handlers.

Each test builds the effective scope, the routes' evaluation and the world by hand, so a change
to one rule of ``routing/engine/decide.py`` fails here (``make mutate`` runs these first).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from routing.config.effective import EffectiveBinding, EffectiveRoute, EffectiveScope
from routing.engine.decide import Effect, Reason, SubscriptionView, World, decide, is_addressed, replace
from routing.engine.evaluate import Evaluation, RouteVerdict, Verdict
from routing.errors import RouteError, RouteErrorCode
from routing.extension import EventSnapshot, RouteDecision
from tests.worklife.viewkit import attempt
from worklife.views import WaitView, WorkView

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
SCOPE = "acme"


def binding(name: str, *, controls=(), problem: str = "", executor: str = "python") -> EffectiveBinding:
    return EffectiveBinding(
        name=name,
        scope=SCOPE,
        executor=executor,
        settings={},
        controls=tuple(controls),
        capabilities=frozenset(controls),
        problem=problem,
    )


BINDINGS = {
    "triage": binding("triage", controls=("inject", "interrupt")),
    "plain": binding("plain", executor="command"),
    "broken": binding("broken", controls=("inject",), problem="executor 'python' is not registered"),
    "inbox": binding("inbox", executor=""),
}


def route(policy: str = "queue", binding: str = "triage", *, fallback: str = "", start: bool = True):
    return EffectiveRoute(
        slot="r",
        scope=SCOPE,
        handler="match",
        params={},
        binding=binding,
        policy=policy,
        fallback=fallback,
        start=start,
    )


def scope_with(*routes: EffectiveRoute, bindings=None) -> EffectiveScope:
    return EffectiveScope(
        path=SCOPE, routes=routes, bindings=dict(BINDINGS if bindings is None else bindings)
    )


def matched(chosen: EffectiveRoute, keys=("k:1",)) -> Evaluation:
    return Evaluation(
        (RouteVerdict(chosen.slot, chosen.scope, Verdict.MATCH, "matched"),),
        route=chosen,
        decision=RouteDecision(matched=True, reason="matched", keys=keys),
    )


def nothing_matched() -> Evaluation:
    return Evaluation((RouteVerdict("r", SCOPE, Verdict.SKIP, "not mine"),))


def event(*, seq: int = 10, source: str = "tests", type: str = "x.happened", work_id=None) -> EventSnapshot:
    return EventSnapshot(
        seq=seq,
        id=f"e{seq}",
        source=source,
        type=type,
        subject="",
        scope=SCOPE,
        time=NOW,
        data={},
        correlation=(),
        work_id=work_id,
        execution_id=None,
        causation_id=None,
        depth=0,
    )


def world_with(*works: WorkView, keys: dict[str, int] | None = None) -> World:
    world = World(now=NOW, works={work.id: work for work in works})
    for key, work_id in (keys or {}).items():
        world.owners[(SCOPE, key)] = work_id
    return world


def running_work(**fields) -> WorkView:
    running = attempt()
    return WorkView(
        **{
            "id": 7,
            "scope": SCOPE,
            "status": "running",
            "binding": "triage",
            "active_attempt": running,
            "latest_attempt": running,
            **fields,
        }
    )


# --- R10: a route whose binding or policy cannot run is a route failure -----------------------


PROBLEMS = [
    pytest.param(
        route("queue", "ghost"),
        RouteErrorCode.BINDING_INVALID,
        "binding 'ghost' is not in scope acme",
        id="binding-not-in-scope",
    ),
    pytest.param(
        route("queue", "broken"),
        RouteErrorCode.BINDING_INVALID,
        "binding broken: executor 'python'",
        id="binding-with-a-problem",
    ),
    pytest.param(
        route("inject", "plain"),
        RouteErrorCode.POLICY_INVALID,
        "binding plain cannot inject",
        id="inject-without-capability-or-fallback",
    ),
    pytest.param(
        route("interrupt", "plain"),
        RouteErrorCode.POLICY_INVALID,
        "binding plain cannot interrupt",
        id="interrupt-without-capability-or-fallback",
    ),
    pytest.param(
        route("steal", "triage"), RouteErrorCode.POLICY_INVALID, "unknown policy 'steal'", id="unknown-policy"
    ),
]


@pytest.mark.parametrize("chosen,code,message", PROBLEMS)
def test_r10_a_new_work_route_with_an_invalid_binding_or_policy_is_a_route_error(chosen, code, message):
    decision = decide(event=event(), evaluation=matched(chosen), scope=scope_with(chosen), world=world_with())
    assert decision.effect == Effect.ERROR and not decision.settles
    assert decision.error.code == code and decision.reason == code.value
    assert message in decision.error.message and decision.error.route == "r"
    assert (decision.work_id, decision.new_work, decision.binding) == (None, False, "")


@pytest.mark.parametrize("chosen,code,message", PROBLEMS)
def test_r10_input_for_an_existing_work_with_an_invalid_binding_or_policy_is_a_route_error(
    chosen, code, message
):
    work = running_work()
    decision = decide(
        event=event(),
        evaluation=matched(chosen),
        scope=scope_with(chosen),
        world=world_with(work, keys={"k:1": work.id}),
    )
    assert decision.effect == Effect.ERROR and decision.error.code == code
    assert message in decision.error.message
    assert decision.work_id == work.id and decision.intent_kind == ""


def test_r10_a_route_with_no_binding_problem_is_not_an_error():
    # The same routes, each made valid: a fallback, a capable binding, a queue policy.
    for chosen in (
        route("inject", "plain", fallback="queue"),
        route("interrupt", "plain", fallback="drop"),
        route("inject", "triage"),
        route("queue", "plain"),
        route("queue", "inbox"),
    ):
        decision = decide(
            event=event(), evaluation=matched(chosen), scope=scope_with(chosen), world=world_with()
        )
        assert (decision.effect, decision.error) == (Effect.START, None), chosen
        assert decision.binding == chosen.binding and decision.new_work


def test_r10_a_drop_route_needs_no_binding():
    chosen = route("drop", "ghost")
    decision = decide(event=event(), evaluation=matched(chosen), scope=scope_with(chosen), world=world_with())
    assert (decision.effect, decision.error) == (Effect.DROP, None)


def test_r10_a_route_that_does_not_start_work_still_has_its_binding_checked():
    chosen = route("queue", "ghost", start=False)
    decision = decide(event=event(), evaluation=matched(chosen), scope=scope_with(chosen), world=world_with())
    assert decision.error.code == RouteErrorCode.BINDING_INVALID
    valid = route("queue", "plain", start=False)
    decision = decide(event=event(), evaluation=matched(valid), scope=scope_with(valid), world=world_with())
    assert (decision.effect, decision.reason) == (Effect.UNMATCHED, Reason.NO_WORK)


ADDRESSED = {"source": "core.manual", "type": "operator.note"}


@pytest.mark.parametrize("field", ["queued_binding", "retry_binding"])
def test_r30_addressed_input_is_queued_on_the_binding_the_work_runs_on_next(field):
    # Its latest attempt ran on triage; its queued input or retry state is on plain.
    ready = running_work(status="ready", active_attempt=None, **{field: "plain"})
    decision = decide(
        event=event(work_id=ready.id, **ADDRESSED),
        evaluation=nothing_matched(),
        scope=scope_with(),
        world=world_with(ready),
    )
    assert (decision.effect, decision.reason, decision.binding) == (Effect.QUEUE, Reason.ADDRESSED, "plain")
    assert (decision.work_id, decision.input_kind) == (ready.id, "queue")


def test_r30_addressed_input_for_a_binding_the_scope_no_longer_has_is_unmatched():
    ready = running_work(status="ready", active_attempt=None, queued_binding="gone")
    decision = decide(
        event=event(work_id=ready.id, **ADDRESSED),
        evaluation=nothing_matched(),
        scope=scope_with(),
        world=world_with(ready),
    )
    assert (decision.effect, decision.work_id) == (Effect.UNMATCHED, ready.id)


def test_r30_addressed_input_for_a_waiting_work_is_context():
    waiting = running_work(status="waiting", active_attempt=None, retry_binding="plain")
    decision = decide(
        event=event(work_id=waiting.id, **ADDRESSED),
        evaluation=nothing_matched(),
        scope=scope_with(),
        world=world_with(waiting),
    )
    assert (decision.effect, decision.binding, decision.input_kind) == (Effect.QUEUE, "plain", "context")


@pytest.mark.parametrize(
    "fields",
    [
        {"retry_binding": "plain"},
        {"rebind_binding": "plain", "rebind_after_attempt": 1},
        {"latest_attempt": attempt(binding="plain")},
    ],
    ids=["retry-state", "rebind", "latest-attempt"],
)
def test_r30_later_addressed_input_in_a_window_is_queued_where_the_first_was(fields):
    """The window mirrors the whole Work an Event's input went to: addressed input after it in
    the same window is queued on the binding the Work runs on next (its retry state's, its
    rebind's, its latest attempt's) as the first was, not on the binding it started on."""
    waiting = running_work(status="waiting", active_attempt=None, **fields)
    world = world_with(waiting)
    for seq in (10, 11):
        addressed = event(seq=seq, work_id=waiting.id, **ADDRESSED)
        decision = decide(event=addressed, evaluation=nothing_matched(), scope=scope_with(), world=world)
        assert (decision.effect, decision.binding, decision.input_kind) == (Effect.QUEUE, "plain", "context")
        world.apply(addressed, decision)


# --- the router's fast copies and refusal lines ----------------------------------------------


def test_replace_copies_like_dataclasses_replace_and_leaves_the_original(monkeypatch):
    import dataclasses

    from routing.config.effective import EffectiveRoute as Route
    from routing.engine import decide as decide_module
    from routing.engine.decide import Decision, replace

    # Each class is met for the first time here, as in a process that just started.
    monkeypatch.setattr(decide_module, "_SHAPES", {})

    work = WorkView(id=7, scope=SCOPE, status="ready", binding="triage", max_input_seq=3)
    decision = Decision(Effect.QUEUE, "why", work_id=7, binding="triage", keys=("k",))
    for original, changes in (
        (work, {"max_input_seq": 9, "queued_binding": "plain"}),
        (decision, {"work_id": -1}),
        (decision, {"reason": Reason.CONTEXT, "input_kind": "context"}),
    ):
        copied = replace(original, **changes)
        assert copied == dataclasses.replace(original, **changes)
        assert type(copied) is type(original) and copied is not original
        assert all(getattr(copied, name) == value for name, value in changes.items())
    assert work.max_input_seq == 3 and decision.work_id == 7
    # A dataclass with a field __init__ does not take goes to dataclasses.replace (its
    # __post_init__ builds that field again).
    route = Route("s", SCOPE, "match", {}, "triage", "queue", "", True)
    moved = replace(route, binding="plain")
    assert moved.binding == "plain" and moved.info().binding == "plain"
    with pytest.raises((TypeError, KeyError)):
        replace(decision, no_such_field=1)
    # One field, or a keyword-only one: dataclasses.replace's way.
    one = dataclasses.make_dataclass("One", ["a"])(1)
    keyword = dataclasses.make_dataclass("Keyword", ["a", ("b", int, dataclasses.field(kw_only=True))])(
        1, b=2
    )
    assert replace(one, a=5) == dataclasses.replace(one, a=5)
    assert replace(keyword, a=5) == dataclasses.replace(keyword, a=5)


@pytest.mark.parametrize(
    "reason",
    [
        "type a.b does not match c.*",
        "",
        " lead",
        "trail ",
        "two  spaces",
        "line\nbreak",
        "tab\there",
        "nbsp\u00a0here",
        "é" * 125,
        "é" * 126,
        "x" * 500,
        "x" * 501,
        "😀" * 200,
    ],
)
def test_one_line_keeps_what_the_split_and_join_would_give(reason):
    from routing.extension import REFUSAL_MAX_BYTES, one_line

    line = " ".join(reason.split())
    expected = (
        line
        if len(line.encode()) <= REFUSAL_MAX_BYTES
        else line.encode()[:REFUSAL_MAX_BYTES].decode(errors="ignore")
    )
    assert one_line(reason) == expected


# --- R41, R42: waits at their boundaries --------------------------------------------------------


def waiting_work(*, timeout_at=None, blocked_reason: str = "", keys=None) -> WorkView:
    """Work 7 waiting on wait 5 ("review") for ``x.happened``, with ``keys`` when given."""
    match = {"type": "x.*", **({"keys": list(keys)} if keys else {})}
    wait = WaitView(id=5, name="review", match=match, timeout_at=timeout_at, blocked_reason=blocked_reason)
    return running_work(status="waiting", active_wait=wait)


def test_r41_a_wait_timing_out_exactly_as_the_event_arrives_has_timed_out_first():
    """An Event decided at the wait's very ``timeout_at`` finds the timeout won: the Work is
    ready again and the Event is its ordinary input, not the wait's winner."""
    chosen = route()
    decision = decide(
        event=event(),
        evaluation=matched(chosen),
        scope=scope_with(chosen),
        world=world_with(waiting_work(timeout_at=NOW), keys={"k:1": 7}),
    )
    # Ordinary queued input of a ready Work: not kept as a waiting Work's context.
    assert (decision.effect, decision.work_id, decision.reason, decision.input_kind) == (
        Effect.QUEUE,
        7,
        "matched",
        "queue",
    )
    assert decision.timed_out_wait is not None and decision.timed_out_wait.id == 5
    # A moment before its timeout the wait still decides: the Event wins it.
    later = decide(
        event=event(),
        evaluation=matched(chosen),
        scope=scope_with(chosen),
        world=world_with(waiting_work(timeout_at=NOW + timedelta(microseconds=1)), keys={"k:1": 7}),
    )
    assert (later.effect, later.timed_out_wait, later.input_kind, later.wake_wait.id) == (
        Effect.WAKE,
        None,
        "queue",
        5,
    )


def test_r41_an_event_winning_a_wait_says_so_and_attaches_the_keys_the_work_has_not_got():
    chosen = route()
    decision = decide(
        event=event(),
        evaluation=matched(chosen, keys=("k:1", "k:new")),
        scope=scope_with(chosen),
        world=world_with(waiting_work(), keys={"k:1": 7}),
    )
    assert (decision.effect, decision.reason, decision.work_id) == (Effect.WAKE, "wins wait review", 7)
    assert (decision.keys, decision.attach_keys) == (("k:1", "k:new"), ("k:new",))


def test_r41_a_wait_the_causal_limits_blocked_is_not_won_by_a_later_matching_event():
    """Its earlier winner's wake was refused by the causal limits: a new Event matching the
    blocked wait is kept as context, it does not take the win."""
    chosen = route()
    decision = decide(
        event=event(),
        evaluation=matched(chosen),
        scope=scope_with(chosen),
        world=world_with(waiting_work(blocked_reason="causal limits refuse the wake"), keys={"k:1": 7}),
    )
    assert (decision.effect, decision.reason, decision.wake_wait) == (Effect.QUEUE, Reason.CONTEXT, None)


def test_r41_a_wait_naming_keys_is_won_only_by_an_event_carrying_one_of_them():
    chosen = route()
    scope = scope_with(chosen)
    work = waiting_work(keys=["k:review"])
    other_key = decide(
        event=event(),
        evaluation=matched(chosen, keys=("k:1",)),
        scope=scope,
        world=world_with(work, keys={"k:1": 7}),
    )
    assert (other_key.effect, other_key.reason, other_key.input_kind) == (
        Effect.QUEUE,
        Reason.CONTEXT,
        "context",
    )
    its_key = decide(
        event=event(),
        evaluation=matched(chosen, keys=("k:1", "k:review")),
        scope=scope,
        world=world_with(work, keys={"k:1": 7}),
    )
    assert (its_key.effect, its_key.wake_wait.id) == (Effect.WAKE, 5)


def test_r35_a_queue_route_queues_input_for_a_running_attempt_whatever_its_capabilities():
    """Policy ``queue`` never asks the running attempt for a control: the input queues for the
    next attempt, with neither an intent nor a fallback."""
    chosen = route("queue")
    decision = decide(
        event=event(),
        evaluation=matched(chosen),
        scope=scope_with(chosen),
        world=world_with(running_work(), keys={"k:1": 7}),
    )
    assert (decision.effect, decision.work_id, decision.intent_kind) == (Effect.QUEUE, 7, "")
    assert decision.input_kind == "queue" and not decision.reason.startswith("fallback")
    assert (decision.route, decision.route_scope, decision.binding) == ("r", SCOPE, "triage")


def test_each_work_a_window_starts_has_a_temporary_id_of_its_own_that_later_input_finds():
    """Work started in a window has no id yet: each gets a negative one of its own, by which the
    window's later Events for its keys attach to it (and their reasons name its Event)."""
    chosen = route()
    scope = scope_with(chosen)
    world = world_with()
    started = []
    for seq, key in ((10, "k:a"), (11, "k:b")):
        decision = decide(
            event=event(seq=seq), evaluation=matched(chosen, keys=(key,)), scope=scope, world=world
        )
        world.apply(event(seq=seq), decision)
        started.append(decision)
    assert all(d.new_work and d.work_id < 0 for d in started)
    assert started[0].work_id != started[1].work_id
    later = decide(event=event(seq=12), evaluation=matched(chosen, keys=("k:b",)), scope=scope, world=world)
    assert (later.effect, later.work_id, later.new_work) == (Effect.QUEUE, started[1].work_id, False)


def test_r41_a_wait_naming_a_source_is_won_only_by_an_event_from_a_source_it_matches():
    chosen = route()
    scope = scope_with(chosen)
    wait = WaitView(
        id=5, name="review", match={"type": "x.*", "source": "https://github.com/*"}, timeout_at=None
    )
    work = running_work(status="waiting", active_wait=wait)
    elsewhere = decide(
        event=event(source="https://gitlab.com/acme"),
        evaluation=matched(chosen),
        scope=scope,
        world=world_with(work, keys={"k:1": 7}),
    )
    assert (elsewhere.effect, elsewhere.reason, elsewhere.input_kind) == (
        Effect.QUEUE,
        Reason.CONTEXT,
        "context",
    )
    github = decide(
        event=event(source="https://github.com/acme/web"),
        evaluation=matched(chosen),
        scope=scope,
        world=world_with(work, keys={"k:1": 7}),
    )
    assert (github.effect, github.wake_wait.id) == (Effect.WAKE, 5)


def subscribed(*, scope: str = SCOPE, blocked_reason: str = "") -> tuple[WorkView, SubscriptionView]:
    """Work 8, in scope ``other``, waiting on wait 6 with a dependency subscription on ``scope``."""
    wait = WaitView(id=6, name="deps", match={"type": "x.*"}, timeout_at=None, blocked_reason=blocked_reason)
    work = WorkView(id=8, scope="other", status="waiting", binding="triage", active_wait=wait)
    return work, SubscriptionView(
        id=1, work_id=8, work_scope="other", wait=wait, scope=scope, match={"type": "x.*"}
    )


@pytest.mark.parametrize(
    ("subscription", "wakes"),
    [
        pytest.param({}, True, id="its-scope"),
        pytest.param({"scope": "elsewhere"}, False, id="another-scope"),
        pytest.param({"blocked_reason": "causal limits refuse the wake"}, False, id="blocked"),
    ],
)
def test_r42_a_subscription_is_woken_only_by_its_own_scope_and_not_while_blocked(subscription, wakes):
    """A window holding Events of two scopes: one of scope ``acme`` wakes a subscription on
    ``acme`` only; a subscription whose wait the causal limits block is not woken either."""
    work, sub = subscribed(**subscription)
    chosen = route()
    world = world_with(work)
    world.subscriptions.append(sub)
    decision = decide(event=event(), evaluation=matched(chosen), scope=scope_with(chosen), world=world)
    assert decision.effect == Effect.START
    assert [s.work_id for s in decision.also_wakes] == ([8] if wakes else [])


def test_a_window_sees_its_earlier_decisions_the_woken_work_running_the_started_one_ready():
    """What a decision does is mirrored in the window's world for its later Events: a Work its
    Event woke runs (its wait over), the Work it started is ready on its route's binding with
    that Event as its input, named by it."""
    chosen = route()
    work, sub = subscribed()
    world = world_with(work)
    world.subscriptions.append(sub)
    first = event(seq=10)
    decision = decide(
        event=first, evaluation=matched(chosen, keys=("k:new",)), scope=scope_with(chosen), world=world
    )
    world.apply(first, decision)
    assert (world.works[8].status, world.works[8].active_wait) == ("running", None)
    started = world.works[decision.work_id]
    assert (started.status, started.binding, started.queued_binding, started.max_input_seq) == (
        "ready",
        "triage",
        "triage",
        10,
    )
    assert world.started == {decision.work_id: 10}


def test_a_window_sees_a_timed_out_wait_end_and_context_input_leave_the_queued_binding():
    """A Work whose wait timed out is ready again for the window's later Events; input for a
    running Work leaves it running, and input kept as context does not set the binding its
    queue runs on."""
    chosen = route()
    scope = scope_with(chosen)
    world = world_with(waiting_work(timeout_at=NOW), keys={"k:1": 7})
    timed_out = decide(event=event(seq=10), evaluation=matched(chosen), scope=scope, world=world)
    world.apply(event(seq=10), timed_out)
    assert (world.works[7].status, world.works[7].active_wait) == ("ready", None)
    world = world_with(running_work(), keys={"k:1": 7})
    queued = decide(event=event(seq=11), evaluation=matched(chosen), scope=scope, world=world)
    world.apply(event(seq=11), queued)
    assert world.works[7].status == "running"
    world = world_with(waiting_work(keys=["k:review"]), keys={"k:1": 7})
    context = decide(event=event(seq=12), evaluation=matched(chosen, keys=("k:1",)), scope=scope, world=world)
    assert context.input_kind == "context"
    world.apply(event(seq=12), context)
    assert (world.works[7].status, world.works[7].queued_binding) == ("waiting", "")


def test_r26_a_conflict_with_work_started_earlier_in_the_window_names_the_event_that_starts_it():
    """The Work an earlier Event of the same window starts has only a temporary id: the
    conflict's reason names it by that Event, never as "Work -1"."""
    chosen = route()
    scope = scope_with(chosen)
    world = world_with(running_work())
    starter = event(seq=5)
    started = decide(event=starter, evaluation=matched(chosen, keys=("k:new",)), scope=scope, world=world)
    assert started.effect == Effect.START and started.work_id < 0
    world.apply(starter, started)
    conflict = decide(
        event=event(seq=10, work_id=7), evaluation=matched(chosen, keys=("k:new",)), scope=scope, world=world
    )
    assert conflict.effect == Effect.CONFLICT
    assert conflict.reason == "conflicting targets: the Work Event #5 starts by key k:new, Work 7 by work_id"


# --- what each decision carries: its keys, its evaluation, the routes that declined ------------


def with_keys(keys=("k:1",), **fields) -> EventSnapshot:
    """An Event carrying explicit correlation keys."""
    return replace(event(**fields), correlation=tuple(keys))


@pytest.mark.parametrize(
    ("fields", "addressed"),
    [
        ({"source": "core.manual", "type": "operator.note", "work_id": 7}, True),
        ({"source": "tests", "type": "operator.note", "work_id": 7}, False),
        ({"source": "core.manual", "type": "core.manual.note", "work_id": 7}, False),
        ({"source": "core.manual", "type": "operator.note"}, False),
    ],
)
def test_r30_only_an_operator_event_naming_its_work_is_addressed(fields, addressed):
    assert is_addressed(event(**fields)) is addressed


def test_r30_addressed_input_carries_the_events_keys_and_its_evaluation():
    ready = running_work(status="ready", active_attempt=None, queued_binding="plain")
    evaluation = nothing_matched()
    decision = decide(
        event=with_keys(("k:new",), work_id=7, **ADDRESSED),
        evaluation=evaluation,
        scope=scope_with(),
        world=world_with(ready),
    )
    assert (decision.reason, decision.keys, decision.attach_keys) == (
        Reason.ADDRESSED,
        ("k:new",),
        ("k:new",),
    )
    assert decision.evaluation is evaluation


def test_r28_an_unmatched_event_carries_its_keys_the_routes_that_declined_and_its_evaluation():
    evaluation = nothing_matched()
    decision = decide(event=with_keys(), evaluation=evaluation, scope=scope_with(), world=world_with())
    assert (decision.effect, decision.reason, decision.keys) == (Effect.UNMATCHED, Reason.NO_MATCH, ("k:1",))
    assert decision.refusals == ({"route": "r", "reason": "not mine"},) and decision.evaluation is evaluation


def test_r26_a_conflict_carries_the_events_keys_and_its_evaluation():
    evaluation = nothing_matched()
    decision = decide(
        event=with_keys(work_id=99), evaluation=evaluation, scope=scope_with(), world=world_with()
    )
    assert (decision.effect, decision.keys) == (Effect.CONFLICT, ("k:1",))
    assert decision.evaluation is evaluation


@pytest.mark.parametrize(
    ("execution_id", "chosen_work", "why"),
    [
        (555, None, "execution_id 555 names no attempt"),
        (None, 99, "route chose Work 99, which does not exist"),
        (101, 8, "conflicting targets: Work 7 by execution_id 101, Work 8 by route"),
    ],
    ids=["unknown-attempt", "route-chose-no-work", "attempt-and-route-disagree"],
)
def test_r26_each_identity_conflict_says_which_target_and_carries_the_keys_and_evaluation(
    execution_id, chosen_work, why
):
    """An execution_id naming no attempt, a route choosing a Work that does not exist, and an
    attempt's Work and the route's choice disagreeing: each conflict names its targets the way it
    found them, with the Event's keys and evaluation kept for the record and the trace."""
    chosen = route()
    evaluation = Evaluation(
        (RouteVerdict(chosen.slot, chosen.scope, Verdict.MATCH, "matched"),),
        route=chosen,
        decision=RouteDecision(matched=True, reason="matched", keys=("k:1",), work_id=chosen_work),
    )
    world = world_with(running_work(), running_work(id=8))
    world.attempt_work[101] = 7
    snap = replace(event(), execution_id=execution_id)
    decision = decide(event=snap, evaluation=evaluation, scope=scope_with(chosen), world=world)
    assert (decision.effect, decision.reason, decision.keys) == (Effect.CONFLICT, why, ("k:1",))
    assert decision.evaluation is evaluation


@pytest.mark.parametrize(
    ("work", "why"),
    [
        (running_work(scope="other"), "Work 7 is in scope other, not acme"),
        (running_work(max_input_seq=20), "Work 7 already has later input #20"),
    ],
    ids=["another-scope", "later-input"],
)
def test_r26_a_conflict_with_the_work_found_says_why_and_carries_the_keys_and_evaluation(work, why):
    chosen = route()
    evaluation = matched(chosen)
    decision = decide(
        event=event(),
        evaluation=evaluation,
        scope=scope_with(chosen),
        world=world_with(work, keys={"k:1": 7}),
    )
    assert (decision.effect, decision.reason, decision.keys) == (Effect.CONFLICT, why, ("k:1",))
    assert decision.evaluation is evaluation


def test_r26_input_as_late_as_the_works_latest_is_no_conflict():
    """Only input later than the Event conflicts: the Work's latest input being this Event's
    own seq (its input kept from an earlier pass) is not later."""
    chosen = route()
    world = world_with(running_work(status="ready", active_attempt=None, max_input_seq=10), keys={"k:1": 7})
    decision = decide(event=event(seq=10), evaluation=matched(chosen), scope=scope_with(chosen), world=world)
    assert (decision.effect, decision.work_id) == (Effect.QUEUE, 7)


def test_r49_late_input_for_terminal_work_keeps_the_events_keys_on_its_record():
    chosen = route()
    world = world_with(running_work(status="completed", active_attempt=None), keys={"k:1": 7})
    decision = decide(event=event(), evaluation=matched(chosen), scope=scope_with(chosen), world=world)
    assert (decision.effect, decision.reason, decision.work_id, decision.keys) == (
        Effect.DROP,
        Reason.TERMINAL,
        7,
        ("k:1",),
    )


@pytest.mark.parametrize("existing", [True, False], ids=["existing-work", "new-work"])
def test_r28_a_route_failure_carries_the_failing_route_the_keys_and_the_routes_that_declined(existing):
    failed = RouteError(RouteErrorCode.HANDLER_FAILED, "boom", route="second")
    evaluation = Evaluation((RouteVerdict("r", SCOPE, Verdict.SKIP, "not mine"),), error=failed)
    world = world_with(running_work(), keys={"k:1": 7}) if existing else world_with()
    decision = decide(event=with_keys(), evaluation=evaluation, scope=scope_with(), world=world)
    assert (decision.effect, decision.reason, decision.route) == (Effect.ERROR, "handler_failed", "second")
    assert (decision.work_id, decision.keys, decision.error) == (7 if existing else None, ("k:1",), failed)
    assert decision.refusals == ({"route": "r", "reason": "not mine"},) and decision.evaluation is evaluation


def test_r42_a_subscription_wakes_only_the_wait_its_work_is_waiting_on_and_matches_with_its_own_match():
    chosen = route()
    work, sub = subscribed()
    cases = {
        "running": (replace(work, status="running"), sub),
        "no-wait": (replace(work, active_wait=None), sub),
        "another-wait": (replace(work, active_wait=replace(work.active_wait, id=99)), sub),
        "its-match-refuses": (work, replace(sub, match={"type": "y.*"})),
        "its-own-work": (work, replace(sub, work_id=7)),
    }
    for name, (waiting, subscription) in cases.items():
        world = world_with(waiting, running_work(), keys={"k:1": 7})
        world.subscriptions.append(subscription)
        decision = decide(event=event(), evaluation=matched(chosen), scope=scope_with(chosen), world=world)
        assert decision.also_wakes == (), name
    keyed = replace(sub, match={"type": "x.*", "keys": ["k:1"]})
    world = world_with(work)
    world.subscriptions.append(keyed)
    decision = decide(event=event(), evaluation=matched(chosen), scope=scope_with(chosen), world=world)
    assert [s.work_id for s in decision.also_wakes] == [8]


def test_r44_input_for_existing_work_carries_its_route_keys_and_evaluation_whatever_the_policy():
    world = world_with(running_work(status="ready", active_attempt=None), keys={"k:1": 7})
    dropping = route("drop")
    evaluation = matched(dropping)
    dropped = decide(event=event(), evaluation=evaluation, scope=scope_with(dropping), world=world)
    assert (dropped.effect, dropped.reason, dropped.work_id) == (Effect.DROP, "matched", 7)
    assert (dropped.route, dropped.route_scope, dropped.keys) == ("r", SCOPE, ("k:1",))
    assert dropped.evaluation is evaluation
    queueing = route("queue")
    evaluation = matched(queueing)
    queued = decide(event=event(), evaluation=evaluation, scope=scope_with(queueing), world=world)
    assert (queued.effect, queued.work_id, queued.new_work, queued.keys) == (Effect.QUEUE, 7, False, ("k:1",))
    assert queued.evaluation is evaluation
    broken = route("queue", "broken")
    failed = decide(event=event(), evaluation=matched(broken), scope=scope_with(broken), world=world)
    assert (failed.effect, failed.work_id, failed.keys) == (Effect.ERROR, 7, ("k:1",))
    unmatched = decide(event=with_keys(), evaluation=nothing_matched(), scope=scope_with(), world=world)
    assert (unmatched.effect, unmatched.work_id, unmatched.keys) == (Effect.UNMATCHED, 7, ("k:1",))


def test_r44_an_event_for_no_work_carries_its_routes_reason_keys_and_evaluation_whatever_the_policy():
    """As for existing Work: a drop, a route that starts no Work and a start each carry the
    matching route's reason, the keys, the routes that declined before it (where the record keeps
    them) and the evaluation a trace shows."""

    def evaluated(chosen: EffectiveRoute) -> Evaluation:
        return Evaluation(
            (
                RouteVerdict("q", SCOPE, Verdict.SKIP, "not mine"),
                RouteVerdict(chosen.slot, chosen.scope, Verdict.MATCH, "matched"),
            ),
            route=chosen,
            decision=RouteDecision(matched=True, reason="matched", keys=("k:1",)),
        )

    dropping = route("drop")
    evaluation = evaluated(dropping)
    dropped = decide(event=event(), evaluation=evaluation, scope=scope_with(dropping), world=world_with())
    assert (dropped.effect, dropped.reason, dropped.work_id, dropped.keys) == (
        Effect.DROP,
        "matched",
        None,
        ("k:1",),
    )
    assert (dropped.route, dropped.route_scope) == ("r", SCOPE) and dropped.evaluation is evaluation
    attaching = route("queue", start=False)
    evaluation = evaluated(attaching)
    unmatched = decide(event=event(), evaluation=evaluation, scope=scope_with(attaching), world=world_with())
    assert (unmatched.effect, unmatched.reason, unmatched.keys) == (
        Effect.UNMATCHED,
        Reason.NO_WORK,
        ("k:1",),
    )
    assert unmatched.refusals == ({"route": "q", "reason": "not mine"},)
    assert unmatched.evaluation is evaluation
    starting = route("queue")
    evaluation = evaluated(starting)
    started = decide(event=event(), evaluation=evaluation, scope=scope_with(starting), world=world_with())
    assert (started.effect, started.new_work, started.reason, started.keys) == (
        Effect.START,
        True,
        "matched",
        ("k:1",),
    )
    assert started.evaluation is evaluation


def test_r44_a_key_a_route_decides_twice_is_carried_and_attached_once():
    chosen = route()
    decision = decide(
        event=event(),
        evaluation=matched(chosen, keys=("k:1", "k:1")),
        scope=scope_with(chosen),
        world=world_with(),
    )
    assert (decision.keys, decision.attach_keys) == (("k:1",), ("k:1",))


# --- R11, R32, R34: input for a running attempt -------------------------------------------------------


@pytest.mark.parametrize("policy", ["inject", "interrupt"])
def test_r32_input_the_running_attempt_can_take_becomes_its_intent(policy):
    chosen = route(policy)
    work = running_work()
    evaluation = matched(chosen)
    decision = decide(
        event=with_keys(("k:new",)),
        evaluation=evaluation,
        scope=scope_with(chosen),
        world=world_with(work, keys={"k:1": 7}),
    )
    assert (decision.effect, decision.reason, decision.work_id, decision.binding) == (
        policy,
        "matched",
        7,
        "triage",
    )
    assert (decision.input_kind, decision.intent_kind, decision.intent_attempt) == (
        policy,
        policy,
        work.active_attempt,
    )
    assert (decision.attach_keys, decision.keys, decision.route) == (("k:new",), ("k:new", "k:1"), "r")
    assert decision.evaluation is evaluation


FALLBACKS = [
    pytest.param("queue", Effect.QUEUE, "fallback queue: ", id="queue"),
    pytest.param("drop", Effect.DROP, "fallback drop: ", id="drop"),
    pytest.param("", Effect.HELD, "held until the attempt ends: ", id="held"),
]


@pytest.mark.parametrize(("fallback", "effect", "prefix"), FALLBACKS)
@pytest.mark.parametrize(
    ("running", "why"),
    [
        pytest.param(
            attempt(binding="plain"), "attempt runs binding plain, route selects triage", id="binding"
        ),
        pytest.param(attempt(capabilities=()), "attempt's pinned capabilities lack inject", id="capability"),
    ],
)
def test_r11_input_the_running_attempt_cannot_take_follows_the_routes_fallback(
    fallback, effect, prefix, running, why
):
    chosen = route("inject", fallback=fallback)
    evaluation = matched(chosen)
    work = running_work(active_attempt=running, latest_attempt=running)
    decision = decide(
        event=with_keys(("k:new",)),
        evaluation=evaluation,
        scope=scope_with(chosen),
        world=world_with(work, keys={"k:1": 7}),
    )
    assert (decision.effect, decision.reason, decision.work_id) == (effect, prefix + why, 7)
    assert (decision.route, decision.keys, decision.intent_attempt) == ("r", ("k:new", "k:1"), None)
    assert decision.evaluation is evaluation
    if effect == Effect.HELD:
        assert (decision.binding, decision.input_kind, decision.attach_keys) == ("triage", "held", ("k:new",))
