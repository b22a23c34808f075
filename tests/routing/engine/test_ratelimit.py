"""A route's rate limit (routing.engine.ratelimit): the Events a route would take beyond its
limit within its period, by acceptance time, are dropped with the reason; the window slides; the
decisions do not depend on how the Events are cut into windows."""

from __future__ import annotations

import pytest

from causal.models import Event, RouteState
from routing.acceptance.services import events_accept
from routing.config.problems import ConfigInvalid
from routing.config.validate import parse_document
from routing.models import RateLimitTake, RouteRecord
from routing.records.explain import route_why
from routing.setup.trace import trace
from tests.routing.routerkit import SCRIPTED_ONLY, accept, apply, drain_loop, router, run_route_loops
from tests.support import child_env

DOCUMENT = """
version: 1
scopes:
  - path: acme
    bindings:
      inbox: {}
    routes:
      - slot: chat
        handler: match
        params: {type: "chat.*", keys: ["user:{data.user}"]}
        binding: inbox
        policy: queue
        rate_limit: {limit: 2, period: 1m, key: "{data.user}"}
      - slot: bulk
        handler: match
        params: {type: "bulk.*", keys: ["bulk:{data.n}"]}
        binding: inbox
        rate_limit: {limit: 3, period: 10s}
      - slot: free
        handler: match
        params: {type: "free.*"}
        binding: inbox
"""


def _decisions(seqs: list[int]) -> list[tuple[str, str]]:
    records = {r.event_id: r for r in RouteRecord.objects.filter(event_id__in=seqs)}
    return [(records[s].policy, records[s].reason) for s in seqs]


def _route(clock, *, limit: int | None = None) -> None:
    r = router(clock)
    try:
        for _ in range(100):
            if not r.route_pending(limit=limit):
                break
    finally:
        r.close()


@pytest.mark.django_db(transaction=True)
def test_a_route_over_its_rate_limit_drops_the_events_with_the_reason(clock):
    apply(clock, DOCUMENT)
    seqs = []
    for _ in range(5):
        seqs.append(accept(clock, "bulk.item", {"n": len(seqs)}).seq)
        clock.advance(1)
    _route(clock)
    decided = _decisions(seqs)
    assert [policy for policy, _ in decided] == ["start", "start", "start", "drop", "drop"]
    assert decided[3][1] == "rate limited: route 'bulk' in acme is over its rate limit 3 per 10 s"
    assert Event.objects.get(pk=seqs[4]).route_state == RouteState.ROUTED
    assert RouteRecord.objects.get(event_id=seqs[4]).work_id is None
    assert sorted(RateLimitTake.objects.values_list("event_seq", flat=True)) == seqs[:3]
    record = RouteRecord.objects.select_related("work").get(event_id=seqs[4])
    assert str(route_why(Event.objects.get(pk=seqs[4]), record)) == (
        "Dropped: route 'bulk' in acme is over its rate limit 3 per 10 s."
    )


@pytest.mark.django_db(transaction=True)
def test_a_rate_limit_with_a_key_counts_each_key_apart(clock):
    apply(clock, DOCUMENT)
    users = ["ann", "bob", "ann", "ann", "bob", "bob", "bob", "cy"]
    seqs = [accept(clock, "chat.message", {"user": user}).seq for user in users]
    _route(clock)
    decided = _decisions(seqs)
    assert [policy for policy, _ in decided] == [
        "start", "start", "queue", "drop", "queue", "drop", "drop", "start"
    ]  # fmt: skip
    assert decided[3][1] == "rate limited: route 'chat' in acme is over its rate limit 2 per 60 s (key ann)"
    assert decided[6][1].endswith("(key bob)")


@pytest.mark.django_db(transaction=True)
def test_the_rate_limit_window_slides_and_the_dropped_events_do_not_count(clock):
    apply(clock, DOCUMENT)
    seqs, last = [], 0.0
    for at in (0, 1, 2, 3, 6, 10.5, 11, 11.5, 12.5, 30):  # seconds; limit 3 per 10 s
        clock.advance(at - last)
        last = at
        seqs.append(accept(clock, "bulk.item", {"n": at}).seq)
    _route(clock)
    assert [policy for policy, _ in _decisions(seqs)] == [
        # 0, 1, 2 taken; 3, 6 over (three taken after -7 and -4); 10.5 (0 left the window
        # at 10): two taken within 10 s before it (1, 2), so taken; 11: 1 has left, (2, 10.5)
        # taken; 11.5: three (2, 10.5, 11); 12.5: 2 left the window: (10.5, 11), taken; 30.
        "start", "start", "start", "drop", "drop", "start", "start", "drop", "start", "start",
    ]  # fmt: skip


def _burst(clock) -> tuple[list[int], list[str]]:
    """Chat Events of three users over three minutes, some at the same moment; and what a
    sliding window of 2 per 60 s per user, over their acceptance times, decides for each."""
    import random

    rng = random.Random(7)
    seqs, expected, taken = [], [], []
    for _ in range(60):
        clock.advance(rng.choice((0, 0, 1, 5, 20)))
        user = rng.choice(("ann", "bob", "cy"))
        now = clock()
        seqs.append(accept(clock, "chat.message", {"user": user}).seq)
        within = [t for u, t in taken if u == user and (now - t).total_seconds() < 60]
        if len(within) >= 2:
            expected.append("drop")
        else:
            expected.append("take")
            taken.append((user, now))
    return seqs, expected


def _taken_or_dropped(seqs: list[int]) -> list[str]:
    return ["drop" if policy == "drop" else "take" for policy, _ in _decisions(seqs)]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("window", [1, 4, 500])
def test_a_rate_limit_decides_the_same_whatever_the_windows_the_events_are_routed_in(clock, window):
    apply(clock, DOCUMENT)
    seqs, expected = _burst(clock)  # accepted while no route loop ran
    assert "drop" in expected and expected.count("take") > 6
    _route(clock, limit=window)
    assert _taken_or_dropped(seqs) == expected


@pytest.mark.django_db(transaction=True)
def test_two_route_loops_taking_turns_decide_a_rate_limit_as_one_loop_does(clock):
    apply(clock, DOCUMENT)
    seqs, expected = _burst(clock)
    loops = [router(clock), router(clock)]
    loops[1].owner = "second-loop"
    try:
        for turn in range(200):
            if not any(loops[(turn + i) % 2].route_pending(limit=3, claim_ahead=False) for i in (0, 1)):
                break
    finally:
        for loop in loops:
            loop.close()
    assert _taken_or_dropped(seqs) == expected


# Only the built-in handler: the route loops run in processes of their own.
ACROSS_WORKS = """
version: 1
scopes:
  - path: acme
    bindings:
      inbox: {}
    routes:
      - slot: chat
        handler: match
        params: {type: "chat.*", keys: ["conv:{data.conv}"]}
        binding: inbox
        rate_limit: {limit: 3, period: 30s, key: "{data.user}"}
"""


@pytest.mark.django_db(transaction=True)
def test_three_route_loop_processes_decide_a_rate_limit_as_one_loop_would(clock):
    """A user's Events go to many conversations (many Works, routed side by side by the loops)
    and count in the user's one rate limit: each decision is the one routing them one by one,
    in acceptance order, makes."""
    import random

    apply(clock, ACROSS_WORKS)
    rng = random.Random(3)
    for batch in range(12):
        clock.advance(rng.choice((1, 4, 12)))
        payloads = [
            {
                "specversion": "1.0",
                "id": f"m{batch}-{i}",
                "source": "tests",
                "scope": "acme",
                "type": "chat.message",
                "data": {"user": rng.choice("abcd"), "conv": rng.randrange(40)},
            }
            for i in range(rng.randrange(5, 25))
        ]
        events_accept(payloads=payloads, clock=clock, may_address_work=True)
    expected, taken = {}, []
    for seq, at, data in Event.objects.order_by("seq").values_list("seq", "accepted_at", "data"):
        within = [t for user, t in taken if user == data["user"] and (at - t).total_seconds() < 30]
        expected[seq] = "drop" if len(within) >= 3 else "take"
        if expected[seq] == "take":
            taken.append((data["user"], at))
    assert 10 < list(expected.values()).count("drop") < len(expected) - 10
    run_route_loops(3, 7, child_env())
    drain_loop()
    assert _taken_or_dropped(list(expected)) == list(expected.values())
    assert RateLimitTake.objects.count() == list(expected.values()).count("take")


@pytest.mark.django_db(transaction=True)
def test_a_trace_says_the_rate_limit_would_drop_the_event(clock):
    apply(clock, DOCUMENT)
    for user in ("ann", "ann", "bob"):
        accept(clock, "chat.message", {"user": user})
    _route(clock)
    payload = {"id": "t1", "source": "tests", "type": "chat.message", "scope": "acme"}
    over = trace(payload={**payload, "data": {"user": "ann"}}, clock=clock)
    assert (over.effect, over.route, over.state) == ("drop", "chat", RouteState.ROUTED)
    assert over.reason == "rate limited: route 'chat' in acme is over its rate limit 2 per 60 s (key ann)"
    under = trace(payload={**payload, "data": {"user": "bob"}}, clock=clock)
    assert (under.effect, under.route) == ("queue", "chat")
    clock.advance(60)
    assert trace(payload={**payload, "data": {"user": "ann"}}, clock=clock).effect == "queue"


@pytest.mark.parametrize(
    ("declared", "place", "problem"),
    [
        ({"limit": 0, "period": "1m"}, "rate_limit.limit", "at least 1"),
        ({"limit": 3}, "rate_limit.period", "required"),
        ({"limit": 3, "period": "soon"}, "rate_limit.period", "expected a duration"),
        ({"limit": 3, "period": "1m", "key": "{data.user!r}"}, "rate_limit.key", "bad key template"),
        ({"limit": 3, "period": "1m", "per": "user"}, "rate_limit.per", "unknown key 'per'"),
        (30, "rate_limit", "expected a mapping"),
    ],
)
def test_a_bad_rate_limit_is_refused_with_its_place(declared, place, problem):
    document = DOCUMENT.replace("rate_limit: {limit: 3, period: 10s}", f"rate_limit: {declared!r}")
    with pytest.raises(ConfigInvalid) as refused:
        parse_document(document)
    found = [(p.place, p.message) for p in refused.value.problems]
    assert len(found) == 1 and found[0][0] == f"scopes[0].routes[1].{place}", found
    assert problem in found[0][1]


def test_a_route_rate_limit_is_read_as_a_throttle_is_written():
    route = parse_document(DOCUMENT).scopes[0].routes[0]
    assert route.rate_limit == {"limit": 2, "period": "1m", "key": "{data.user}"}


@pytest.mark.django_db(transaction=True)
def test_a_rate_limit_costs_a_window_two_statements_and_a_route_without_one_none(clock):
    """The window's counts in one statement and its takes in one insert, whatever its size; a
    configuration without a rate limit reads and writes nothing for them."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def statements(document: str, type_: str, n: int) -> list[str]:
        apply(clock, document)
        for i in range(n):
            accept(clock, type_, {"n": i, "user": f"u{i % 3}"})
        with CaptureQueriesContext(connection) as captured:
            _route(clock)
        return [q["sql"] for q in captured]

    free = statements(DOCUMENT, "free.item", 10)
    assert not [sql for sql in free if "ratelimittake" in sql.lower()]
    few, many = statements(DOCUMENT, "chat.message", 5), statements(DOCUMENT, "chat.message", 40)
    assert len([sql for sql in few if "ratelimittake" in sql.lower()]) == 2
    assert len([sql for sql in many if "ratelimittake" in sql.lower()]) == 2


@pytest.mark.django_db(transaction=True)
def test_events_a_paused_route_held_are_judged_by_their_acceptance_times_on_resume(clock):
    from routing.holds import route_held_release
    from worklife.models import PauseKind
    from worklife.pauses import PauseTarget, pause_create, pause_end

    apply(clock, DOCUMENT)
    route = PauseTarget(PauseKind.ROUTE, "acme", "bulk")
    pause_create(target=route, paused_by="alice", reason="", until=None, clock=clock)
    seqs = []
    for n in range(5):  # 4 s apart: never 3 within 10 s
        seqs.append(accept(clock, "bulk.item", {"n": n}).seq)
        clock.advance(4)
    _route(clock)
    assert not RouteRecord.objects.filter(event_id__in=seqs).exists()
    assert not RateLimitTake.objects.exists()  # held, not taken
    pause_end(target=route, ended_by="alice", clock=clock)
    route_held_release(scope="acme", slot="bulk")
    _route(clock)  # all at once, a minute later: judged as they were accepted
    assert [policy for policy, _ in _decisions(seqs)] == ["start"] * 5


BULK_AT = (0, 1, 2, 3, 6, 10.5, 11, 11.5, 12.5, 30)  # seconds; the limit: 3 per 10 s
BULK_DROPPED = (3, 6, 11.5)  # as routing drops them (the sliding-window test above)
UNLIMITED = DOCUMENT.replace("        rate_limit: {limit: 3, period: 10s}\n", "")


def _bulk(clock, live: str) -> dict[float, int]:
    """The bulk Events accepted at :data:`BULK_AT` and routed by ``live``: their seqs by time."""
    apply(clock, live)
    seqs, last = {}, 0.0
    for at in BULK_AT:
        clock.advance(at - last)
        last = at
        seqs[at] = accept(clock, "bulk.item", {"n": at}).seq
    _route(clock)
    clock.advance(3600)  # an hour later: now, no limit counts anything
    return seqs


def _preview(clock, document: str, *, exhaustive: bool = False) -> dict[int, tuple]:
    from routing.setup.impact import impact_preview
    from tests.routing.factories import apply_config

    report = impact_preview(
        candidate=apply_config(document, candidate=True), clock=clock, exhaustive=exhaustive
    )
    return {
        change.seq: (
            change.group,
            change.live.effect,
            change.candidate.effect,
            change.candidate.result.reason,
        )
        for _, changes in report.groups
        for change in changes
    }


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("exhaustive", [False, True], ids=["quick", "exhaustive"])
def test_an_impact_preview_replays_a_rate_limit_only_the_candidate_declares(clock, exhaustive):
    seqs = _bulk(clock, UNLIMITED)
    assert not RateLimitTake.objects.exists()  # live counts nothing for the limit

    changes = _preview(clock, DOCUMENT, exhaustive=exhaustive)

    # Each Event judged at its acceptance time among the candidate's own takes before it: the
    # Events routing would drop, not every Event of the last 10 s before now (none) nor every
    # Event the live routing took within 10 s before it (3, 6, 11, 11.5 and 12.5).
    assert sorted(changes) == [seqs[at] for at in BULK_DROPPED]
    # Live, each would join the Work its earlier self started (its key is taken).
    group, live, candidate, reason = changes[seqs[11.5]]
    assert (live, candidate) == ("queue", "drop") and group == "queue → drop"
    assert reason == "rate limited: route 'bulk' in acme is over its rate limit 3 per 10 s"


@pytest.mark.django_db(transaction=True)
def test_an_impact_preview_of_a_removed_rate_limit_shows_the_events_it_dropped(clock):
    seqs = _bulk(clock, DOCUMENT)
    dropped = sorted(
        RouteRecord.objects.filter(event_id__in=seqs.values(), policy="drop").values_list("event", flat=True)
    )
    assert dropped == [seqs[at] for at in BULK_DROPPED]

    changes = _preview(clock, UNLIMITED)

    assert sorted(changes) == dropped
    assert {(live, candidate) for _, live, candidate, _ in changes.values()} == {("drop", "start")}


@pytest.mark.django_db(transaction=True)
def test_an_impact_preview_of_an_unchanged_rate_limit_shows_no_change_to_its_events(clock):
    _bulk(clock, DOCUMENT)
    # Another route of the scope changes: the bulk Events are traced, both replays alike.
    assert _preview(clock, DOCUMENT.replace('type: "free.*"', 'type: "gratis.*"')) == {}


@pytest.mark.django_db(transaction=True)
def test_a_trace_against_a_candidate_counts_what_routing_took_through_a_route_it_limits(clock):
    from routing.setup.trace import trace_candidate, trace_event
    from tests.routing.factories import apply_config

    apply(clock, UNLIMITED.replace('        rate_limit: {limit: 2, period: 1m, key: "{data.user}"}\n', ""))
    for user in ("ann", "ann", "bob"):
        accept(clock, "chat.message", {"user": user})
    for n in range(3):
        accept(clock, "bulk.item", {"n": n})
    _route(clock)
    assert not RateLimitTake.objects.exists()  # live limits nothing
    candidate = apply_config(DOCUMENT, candidate=True)
    payload = {"id": "t1", "source": "tests", "scope": "acme"}

    def traced(type: str, data: dict):
        return trace_candidate(
            candidate=candidate, payload={**payload, "type": type, "data": data}, clock=clock
        )

    over = traced("chat.message", {"user": "ann"})
    assert (over.effect, over.route) == ("drop", "chat")
    assert over.reason == "rate limited: route 'chat' in acme is over its rate limit 2 per 60 s (key ann)"
    assert traced("chat.message", {"user": "bob"}).effect == "queue"
    assert (
        traced("bulk.item", {"n": 9}).reason
        == "rate limited: route 'bulk' in acme is over its rate limit 3 per 10 s"
    )
    # An accepted Event not routed yet, traced against the candidate, counts the same way.
    waiting = accept(clock, "bulk.item", {"n": 10})
    as_candidate = trace_event(seq=waiting.seq, clock=clock, generation=f"candidate:{candidate.pk}")
    assert (as_candidate.effect, as_candidate.route) == ("drop", "bulk")
    assert trace_event(seq=waiting.seq, clock=clock).effect == "start"  # live limits nothing
    clock.advance(10)
    assert traced("bulk.item", {"n": 9}).effect == "start"
    assert traced("chat.message", {"user": "ann"}).effect == "drop"
    clock.advance(50)
    assert traced("chat.message", {"user": "ann"}).effect == "queue"


@pytest.mark.django_db(transaction=True)
def test_config_preview_prints_why_the_candidate_s_rate_limit_would_drop_an_event(clock):
    import io

    from django.core.management import call_command

    from tests.routing.factories import apply_config

    seqs = _bulk(clock, UNLIMITED)
    candidate = apply_config(DOCUMENT, candidate=True)
    out = io.StringIO()
    call_command("config", "preview", str(candidate.pk), stdout=out)
    assert "queue → drop: 3" in out.getvalue()
    work = RouteRecord.objects.get(event_id=seqs[11.5]).work_id
    assert (
        f"  #{seqs[11.5]} bulk.item in acme: queue by bulk on inbox (Work {work})  |  drop by bulk (Work {work}): "
        "rate limited: route 'bulk' in acme is over its rate limit 3 per 10 s"
    ) in out.getvalue()


# The scripted route alone, limited to one take a minute.
FAILING_FIRST = SCRIPTED_ONLY + "        rate_limit: {limit: 1, period: 1m}\n"


@pytest.mark.usefixtures("test_handlers")
@pytest.mark.django_db(transaction=True)
def test_an_event_backing_off_does_not_hold_back_the_rate_limit_and_counts_once_taken(clock):
    """An Event whose rate-limited route fails is not counted while it backs off: a later Event
    of the same limit is judged without it (and takes the one slot); once routing takes the
    earlier one, it is judged at its own acceptance time against the Events taken before it
    (docs/flow-control.md, failures and retries)."""
    from tests.routing import sample_handlers

    apply(clock, FAILING_FIRST)
    first = accept(clock, "x", {"keys": ["k1"]}, id="first")
    clock.advance(1)
    second = accept(clock, "x", {"keys": ["k2"]})
    clock.advance(1)
    third = accept(clock, "x", {"keys": ["k3"]})
    sample_handlers.BROKEN.add("first")
    try:
        _route(clock)
    finally:
        sample_handlers.BROKEN.discard("first")
    assert Event.objects.get(pk=first.seq).route_state == RouteState.UNROUTED
    limited = "rate limited: route 'scripted' in acme is over its rate limit 1 per 60 s"
    assert _decisions([second.seq, third.seq]) == [("start", "scripted"), ("drop", limited)]
    clock.advance(600)  # past the backoff
    _route(clock)
    assert _decisions([first.seq]) == [("start", "scripted")]
    assert sorted(RateLimitTake.objects.values_list("event_seq", flat=True)) == [first.seq, second.seq]
