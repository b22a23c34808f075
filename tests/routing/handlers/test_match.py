"""The built-in ``match`` handler and the handler registry (R10, R28, R40, R45)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from routing.extension import EventSnapshot, Invalid, RouteInfo, freeze
from routing.handlers.match import Match, MatchParamsError, compile_params, compiled
from routing.handlers.registry import HandlerMissing, find_handler_class, handler_class
from routing.handlers.samples import glob_example
from tests.routing.ext_handlers import Always

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def snap(type="github.pull_request.opened", data=None, **fields) -> EventSnapshot:
    values = {
        "seq": 1,
        "id": "e1",
        "source": "github.com/acme",
        "type": type,
        "subject": "",
        "scope": "acme",
        "time": T0,
        "data": freeze(data if data is not None else {}),
        "correlation": (),
        "work_id": None,
        "execution_id": None,
        "causation_id": None,
        "depth": 0,
    }
    values.update(fields)
    return EventSnapshot(**values)


def route(params, slot="prs", scope="acme") -> RouteInfo:
    return RouteInfo(
        slot=slot,
        scope=scope,
        params=freeze(params),
        binding="triage",
        policy="queue",
        fallback="",
        handler="match",
    )


def decide(params, event):
    return Match().match(event, route(params))


PR = {"repository": "acme/web", "number": 12, "action": "opened", "draft": False}


# --- globs ------------------------------------------------------------------------------------


def test_r40_type_glob_skip_names_type_and_glob():
    decision = decide({"type": "github.pull_request.*"}, snap(type="github.issue"))
    assert not decision.matched
    assert decision.reason == "type github.issue does not match github.pull_request.*"


def test_the_same_refusal_is_one_shared_decision_and_verdict():
    """Refusals and verdicts are frozen records, built once per distinct
    reason and shared; each Event still gets its own reason, and each route its own verdict."""
    from routing.config.effective import EffectiveRoute, EffectiveScope
    from routing.engine.evaluate import Verdict, evaluate

    params = {"type": "github.pull_request.*"}
    first, second = (
        decide(params, snap(type="github.issue")),
        decide(params, snap(type="github.issue", seq=2)),
    )
    other = decide(params, snap(type="github.push"))
    assert first is second and first.reason == "type github.issue does not match github.pull_request.*"
    assert other.reason == "type github.push does not match github.pull_request.*"

    def effective(slot):
        return EffectiveRoute(
            slot=slot,
            scope="acme",
            handler="match",
            params=freeze(params),
            binding="",
            policy="drop",
            fallback="",
            start=False,
        )

    scope = EffectiveScope(path="acme", routes=(effective("a"), effective("b")), bindings={})
    handlers = {"match": Match()}
    one = evaluate(snap(type="github.issue"), scope, handlers, None, []).verdicts
    two = evaluate(snap(type="github.issue", seq=2), scope, handlers, None, []).verdicts
    assert [(v.route, v.verdict, v.reason) for v in one] == [
        ("a", Verdict.SKIP, "type github.issue does not match github.pull_request.*"),
        ("b", Verdict.SKIP, "type github.issue does not match github.pull_request.*"),
    ]
    assert all(a is b for a, b in zip(one, two, strict=True))
    pushed = evaluate(snap(type="github.push"), scope, handlers, None, []).verdicts
    assert [v.reason for v in pushed] == ["type github.push does not match github.pull_request.*"] * 2


def test_r40_type_glob_matches_whole_value_case_sensitively():
    params = {"type": "github.pull_request.*"}
    assert decide(params, snap(type="github.pull_request.opened")).matched
    assert not decide(params, snap(type="x.github.pull_request.opened")).matched
    assert not decide(params, snap(type="GitHub.pull_request.opened")).matched
    assert decide({"type": "ops.?"}, snap(type="ops.a")).matched


def test_r40_source_and_subject_globs():
    params = {"type": "*", "source": "github*", "subject": "repo/*"}
    assert decide(params, snap(subject="repo/web")).matched
    assert decide(params, snap(source="gitlab")).reason == "source gitlab does not match github*"
    assert decide(params, snap(subject="")).reason == "subject '' does not match repo/*"


# --- where predicates ---------------------------------------------------------------------------


def test_r40_in_predicate_reason_lists_the_values():
    params = {"type": "*", "where": [{"field": "data.action", "in": ["opened", "synchronize"]}]}
    assert decide(params, snap(data={**PR, "action": "synchronize"})).matched
    decision = decide(params, snap(data={**PR, "action": "closed"}))
    assert not decision.matched
    assert decision.reason == "data.action is 'closed', not one of [opened, synchronize]"


def test_r40_equals_is_strict_about_booleans():
    params = {"type": "*", "where": [{"field": "data.draft", "equals": False}]}
    assert decide(params, snap(data={"draft": False})).matched
    assert decide(params, snap(data={"draft": 0})).reason == "data.draft is 0, not false"
    assert decide(params, snap(data={"draft": True})).reason == "data.draft is true, not false"
    assert decide(params, snap(data={})).reason == "data.draft is missing, expected false"


def test_r40_equals_compares_numbers_and_lists_as_json():
    assert decide({"type": "*", "where": [{"field": "data.n", "equals": 2}]}, snap(data={"n": 2.0})).matched
    params = {"type": "*", "where": [{"field": "data.tags", "equals": ["a", "b"]}]}
    assert decide(params, snap(data={"tags": ["a", "b"]})).matched
    assert not decide(params, snap(data={"tags": ["b", "a"]})).matched


def test_r40_exists_true_and_false():
    present = {"type": "*", "where": [{"field": "data.pull_request", "exists": True}]}
    absent = {"type": "*", "where": [{"field": "data.bot_id", "exists": False}]}
    assert decide(present, snap(data={"pull_request": {"url": "u"}})).matched
    assert decide(present, snap(data={})).reason == "data.pull_request is missing"
    assert decide(absent, snap(data={})).matched
    assert (
        decide(absent, snap(data={"bot_id": "B1"})).reason == "data.bot_id is present ('B1'), expected absent"
    )
    # A null value is present.
    assert decide(present, snap(data={"pull_request": None})).matched


def test_r40_matches_searches_strings_only():
    params = {"type": "*", "where": [{"field": "data.title", "matches": "^WIP\\b"}]}
    assert decide(params, snap(data={"title": "WIP: refactor"})).matched
    assert decide(params, snap(data={"title": "Refactor"})).reason == (
        "data.title is 'Refactor', which does not match /^WIP\\b/"
    )
    assert (
        decide(params, snap(data={"title": 3})).reason == "data.title is 3, not a string matching /^WIP\\b/"
    )
    assert decide(params, snap(data={})).reason == "data.title is missing, expected to match /^WIP\\b/"


def test_r40_nested_paths_list_indexes_and_envelope_fields():
    params = {
        "type": "*",
        "where": [
            {"field": "data.pull_request.head.ref", "equals": "main"},
            {"field": "data.labels.1", "equals": "bug"},
            {"field": "scope", "equals": "acme"},
            {"field": "id", "matches": "^e"},
        ],
    }
    data = {"pull_request": {"head": {"ref": "main"}}, "labels": ["ui", "bug"]}
    assert decide(params, snap(data=data)).matched
    decision = decide(params, snap(data={**data, "labels": ["ui"]}))
    assert decision.reason == "data.labels.1 is missing, expected 'bug'"
    decision = decide(params, snap(data={"pull_request": "not a mapping", "labels": ["ui", "bug"]}))
    assert decision.reason == "data.pull_request.head.ref is missing, expected 'main'"


def test_r40_first_failing_condition_is_the_reason():
    params = {
        "type": "github.*",
        "where": [
            {"field": "data.action", "in": ["opened"]},
            {"field": "data.draft", "equals": False},
        ],
    }
    decision = decide(params, snap(data={"action": "opened", "draft": True}))
    assert decision.reason == "data.draft is true, not false"
    decision = decide(params, snap(type="slack.message", data={"action": "closed"}))
    assert decision.reason == "type slack.message does not match github.*"


def test_r40_type_globs_match_as_fnmatch_does_with_or_without_the_pattern():
    """Globs that are a prefix and a '*' or plain text are answered without their pattern:
    every glob gives fnmatch's answer (case-sensitive, '*' crossing dots and newlines), and
    the refusal's reason is the same."""
    import fnmatch

    globs = ["*", "deploy.*", "deploy.", "ops.heartbeat", "a*b", "ops.?", "[ab].x", "x**", "é.*"]
    values = [
        "",
        "deploy",
        "deploy.",
        "deploy.x",
        "xdeploy.x",
        "deploy.x\ny",
        "Deploy.x",
        "ops.heartbeat",
        "ops.heartbeats",
        "ops.h",
        "a.x",
        "ab",
        "x",
        "xyz",
        "é.1",
        "\n",
    ]
    for glob in globs:
        for value in values:
            decision = decide({"type": glob}, snap(type=value))
            assert decision.matched is fnmatch.fnmatchcase(value, glob), (glob, value)
            if not decision.matched:
                assert decision.reason == f"type {value or "''"} does not match {glob}"


def test_r40_key_rendering_of_floats_and_str_values_by_exact_type():
    params = {"type": "*", "keys": ["k:{data.f}:{data.s}:{data.i}:{data.b}"]}
    decision = decide(params, snap(data={"f": 1.5, "s": "x", "i": -3, "b": False}))
    assert decision.keys == ("k:1.5:x:-3:false",)


def test_r40_long_values_are_shortened_in_reasons():
    params = {"type": "*", "where": [{"field": "data.body", "equals": "x"}]}
    reason = decide(params, snap(data={"body": "y" * 1000})).reason
    assert len(reason) < 150 and reason.endswith("…', not 'x'")


# --- keys -----------------------------------------------------------------------------------------


def test_r40_match_attaches_rendered_keys():
    params = {
        "type": "github.pull_request.*",
        "keys": ["pr:{data.repository}#{data.number}", "repo:{source}"],
    }
    decision = decide(params, snap(data=PR))
    assert decision.matched
    assert decision.keys == ("pr:acme/web#12", "repo:github.com/acme")
    assert decision.reason == "type github.pull_request.opened matches github.pull_request.*"


def test_r40_key_with_missing_field_skips_naming_the_field():
    params = {"type": "*", "keys": ["pr:{data.repository}#{data.number}"]}
    decision = decide(params, snap(data={"repository": "acme/web"}))
    assert not decision.matched
    assert decision.reason == "key pr:{data.repository}#{data.number} needs data.number, which is missing"
    decision = decide(params, snap(data={"repository": "acme/web", "number": None}))
    assert decision.reason == "key pr:{data.repository}#{data.number} needs data.number, which is null"
    decision = decide(params, snap(data={"repository": {"name": "web"}, "number": 1}))
    assert decision.reason.endswith('needs data.repository, which is {"name":"web"}, not a scalar')


def test_a_key_template_rendering_from_an_absent_subject_or_an_empty_field_declines_with_no_key():
    params = {"type": "*", "keys": ["audit:{subject}"]}
    decision = decide(params, snap(subject=""))
    assert not decision.matched and decision.keys == ()
    assert decision.reason == "key audit:{subject} needs subject, which is empty"
    decision = decide({"type": "*", "keys": ["b:{data.branch}"]}, snap(data={"branch": ""}))
    assert decision.reason == "key b:{data.branch} needs data.branch, which is empty"
    assert decide(params, snap(subject="pr-7")).keys == ("audit:pr-7",)


def test_r40_key_rendering_of_scalars_and_literal_braces():
    params = {"type": "*", "keys": ["{{literal}}:{data.flag}:{data.n}:{subject}"]}
    decision = decide(params, snap(subject="s", data={"flag": True, "n": 7}))
    assert decision.keys == ("{literal}:true:7:s",)


def test_r10_key_longer_than_storage_is_invalid_input():
    params = {"type": "*", "keys": ["k:{data.text}"]}
    with pytest.raises(Invalid, match="renders to 602 characters"):
        decide(params, snap(data={"text": "x" * 600}))


# --- params validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "place", "fragment"),
    [
        ({"type": "*", "colour": "red"}, "colour", "unknown key 'colour'"),
        ({}, "type", "required"),
        ({"type": ""}, "type", "non-empty glob"),
        ({"type": "*", "source": 3}, "source", "non-empty glob"),
        ({"type": "*", "where": {"field": "data.a"}}, "where", "expected a list"),
        ({"type": "*", "where": ["data.a"]}, "where[0]", "expected a mapping"),
        ({"type": "*", "where": [{"field": "data.a"}]}, "where[0]", "exactly one of"),
        ({"type": "*", "where": [{"field": "data.a", "equals": 1, "in": [1]}]}, "where[0]", "exactly one of"),
        ({"type": "*", "where": [{"field": "payload.a", "equals": 1}]}, "where[0].field", "must start with"),
        ({"type": "*", "where": [{"field": "type.x", "equals": 1}]}, "where[0].field", "only data"),
        ({"type": "*", "where": [{"field": "data..a", "equals": 1}]}, "where[0].field", "malformed segment"),
        ({"type": "*", "where": [{"field": "data.a", "in": []}]}, "where[0].in", "non-empty list"),
        ({"type": "*", "where": [{"field": "data.a", "exists": "yes"}]}, "where[0].exists", "true or false"),
        (
            {"type": "*", "where": [{"field": "data.a", "matches": "(unclosed"}]},
            "where[0].matches",
            "invalid regular",
        ),
        ({"type": "*", "where": [{"field": "data.a", "equal": 1}]}, "where[0].equal", "unknown key"),
        ({"type": "*", "keys": "pr:{data.n}"}, "keys", "expected a list"),
        ({"type": "*", "keys": ["pr:{data.n"]}, "keys[0]", "bad key template"),
        ({"type": "*", "keys": ["pr:{}"]}, "keys[0]", "empty {}"),
        ({"type": "*", "keys": ["pr:{data.n!r}"]}, "keys[0]", "no '!' or ':'"),
        ({"type": "*", "keys": ["pr:{payload.n}"]}, "keys[0]", "must start with"),
    ],
)
def test_r40_invalid_params_name_the_place(params, place, fragment):
    problems = list(Match.validate_params(params))
    assert any(p == place and fragment in message for p, message in problems), problems
    with pytest.raises(MatchParamsError):
        compile_params(params)


# --- matches runs on RE2, a linear-time engine --------------------------------------------------------

CATASTROPHIC = "^(a+)+$"  # exponential on a backtracking engine against 'aaaa…b'


@pytest.mark.parametrize(
    "pattern",
    [
        r"(a)\1",  # a backreference
        r"foo(?=bar)",  # lookahead
        r"(?<!x)y",  # lookbehind
        r"(?P<n>a)(?P=n)",  # a named backreference
        r"end\Z",  # Python's end of string; RE2 writes \z
    ],
)
def test_patterns_re2_cannot_take_are_refused_with_the_place(pattern):
    params = {
        "type": "*",
        "where": [{"field": "data.a", "equals": 1}, {"field": "data.t", "matches": pattern}],
    }
    problems = list(Match.validate_params(params))
    assert [p for p, _ in problems] == ["where[1].matches"], problems
    assert "not supported by RE2, the linear-time engine" in problems[0][1]
    assert repr(pattern) in problems[0][1]


def test_a_nested_quantifier_cannot_backtrack_catastrophically():
    """^(a+)+$ against 'aaaa…b' answers (a skip), and the all-'a' value matches."""
    params = {"type": "*", "where": [{"field": "data.t", "matches": CATASTROPHIC}]}
    hostile = "a" * 100_000 + "b"
    decision = decide(params, snap(data={"t": hostile}))
    assert not decision.matched
    assert decision.reason.startswith("data.t is 'aaaa") and decision.reason.endswith(
        f"which does not match /{CATASTROPHIC}/"
    )
    assert decide(params, snap(data={"t": "a" * 100_000})).matched


@pytest.mark.django_db
def test_a_catastrophic_pattern_is_decided_within_the_route_deadline_and_no_thread_is_left_busy(clock):
    """Through routing: each Event is decided (the hostile one skipped with the pattern's refusal,
    the all-'a' one matched) before the route deadline, so no handler call is abandoned: no thread is left burning a
    core on a pattern. On a backtracking engine this Event was a handler_timeout and the
    abandoned thread ran for ever."""
    from routing.acceptance.services import event_accept
    from routing.config.services import config_apply
    from routing.engine.options import RouterOptions
    from routing.engine.router import build_router
    from routing.models import RouteRecord

    config_apply(
        clock=clock,
        document=f"""
version: 1
scopes:
  - path: acme
    bindings:
      inbox: {{}}
    routes:
      - slot: wip
        handler: match
        params:
          type: "note.*"
          where: [{{field: data.title, matches: "{CATASTROPHIC}"}}]
        binding: inbox
""",
    )
    payloads = [
        {"id": "hostile", "data": {"title": "a" * 50_000 + "b"}},
        {"id": "wip", "data": {"title": "a" * 50_000}},
    ]
    events = [
        event_accept(
            payload={"specversion": "1.0", "source": "tests", "type": "note.created", "scope": "acme", **p},
            clock=clock,
        ).event
        for p in payloads
    ]
    router = build_router(clock=clock, options=RouterOptions(route_timeout=2.0))
    try:
        outcomes = [router.route(event.seq) for event in events]
        assert (router.pool.abandoned, router.pool.abandoned_total) == (0, 0)
    finally:
        router.close()
    assert [o.error for o in outcomes] == [None, None]
    records = {r.event.envelope_id: r for r in RouteRecord.objects.select_related("event")}
    assert (records["hostile"].policy, records["hostile"].route) == ("unmatched", "")
    [refusal] = records["hostile"].refusals
    assert refusal["route"] == "wip" and refusal["reason"].endswith(f"which does not match /{CATASTROPHIC}/")
    assert (records["wip"].disposition, records["wip"].route) == ("routed", "wip")


def test_r40_valid_params_have_no_problems():
    assert list(Match.validate_params({"type": "a.*", "where": [{"field": "data.a", "equals": 1}]})) == []


def test_r40_match_with_params_that_do_not_compile_raises():
    with pytest.raises(MatchParamsError, match="type: required"):
        decide({}, snap())


# --- compile once, no side effects -----------------------------------------------------------------


def test_r40_params_are_compiled_once():
    params = freeze({"type": "a.*", "where": [{"field": "data.x", "matches": "y"}]})
    assert compiled(params) is compiled(
        freeze({"type": "a.*", "where": [{"field": "data.x", "matches": "y"}]})
    )
    handler = Match()
    info = route({"type": "a.*"})
    first = handler._compiled(info.params)
    assert handler._compiled(info.params) is first


def test_r40_match_has_no_side_effects():
    handler = Match()
    params = {
        "type": "*",
        "where": [{"field": "data.action", "in": ["opened"]}],
        "keys": ["pr:{data.number}"],
    }
    info = route(params)
    data = {"action": "opened", "number": 1, "nested": {"a": [1, 2]}}
    event = snap(data=data)
    first = handler.match(event, info)
    for _ in range(3):
        assert handler.match(event, info) == first
    assert event.data == freeze(data)
    assert info.params == freeze(params)


def test_r40_match_is_fast_enough_for_the_router():
    handler = Match()
    info = route(
        {
            "type": "github.pull_request.*",
            "source": "github*",
            "where": [
                {"field": "data.action", "in": ["opened", "synchronize"]},
                {"field": "data.draft", "equals": False},
            ],
            "keys": ["pr:{data.repository}#{data.number}"],
        }
    )
    events = [snap(data={**PR, "number": n}) for n in range(100)]
    started = time.perf_counter()
    for _ in range(200):
        for event in events:
            handler.match(event, info)
    elapsed = time.perf_counter() - started
    # 20,000 calls; the router benchmark needs ~20,000/s. Generous for a shared machine.
    assert elapsed < 2.0, f"20,000 matches took {elapsed:.2f}s"


# --- samples (R45) ---------------------------------------------------------------------------------


def test_r45_sample_is_built_from_params_and_clock(clock):
    params = {
        "type": "github.pull_request.*",
        "source": "github*",
        "where": [
            {"field": "data.action", "in": ["opened", "synchronize"]},
            {"field": "data.draft", "equals": False},
            {"field": "data.pull_request.url", "exists": True},
            {"field": "data.bot", "exists": False},
        ],
        "keys": ["pr:{data.repository}#{data.number}"],
    }
    info = route(params)
    samples = Match().samples("acme/web", info, clock)
    assert len(samples) == 1
    sample = samples[0]
    assert sample.name == "prs"
    event = sample.event
    assert event["type"] == "github.pull_request.sample"
    assert event["source"] == "githubsample"
    assert event["scope"] == "acme/web"
    assert event["time"] == clock().isoformat()
    assert event["data"]["action"] == "opened"
    assert event["data"]["draft"] is False
    assert event["data"]["pull_request"] == {"url": "sample"}
    assert "bot" not in event["data"]
    # The sample matches its own route.
    as_snapshot = snap(
        type=event["type"],
        source=event["source"],
        subject=event["subject"],
        id=event["id"],
        data=event["data"],
    )
    decision = Match().match(as_snapshot, info)
    assert decision.matched, decision.reason
    assert decision.keys == ("pr:sample#sample",)


def test_r45_sample_time_follows_the_given_clock(clock):
    info = route({"type": "slack.message"})
    clock.advance(3600)
    assert Match().samples("acme", info, clock)[0].event["time"] == "2026-01-05T13:00:00+00:00"


def test_r45_glob_example():
    assert glob_example("github.pull_request.*") == "github.pull_request.sample"
    assert glob_example("ops.?") == "ops.x"
    assert glob_example("a[bc]d") == "abd"
    assert glob_example("a[!x]d") == "a0d"


# --- the registry (R10) -----------------------------------------------------------------------------

TEST_HANDLERS = {
    "match": "routing.handlers.Match",
    "always": "tests.routing.ext_handlers:Always",
    "dotted": "tests.routing.ext_handlers.Always",
    "gone": "tests.routing.removed_extension:Handler",
    "odd": "tests.routing.ext_handlers:NoMatchMethod",
    "instance": "tests.routing.ext_handlers:not_a_class",
}


def test_r10_registry_loads_handlers_from_settings(settings):
    settings.CONDUIT_ROUTE_HANDLERS = TEST_HANDLERS
    assert handler_class("match") is Match
    assert handler_class("always") is Always
    assert handler_class("dotted") is Always
    assert isinstance(handler_class("always")(), Always)


def test_r10_unregistered_handler_is_missing(settings):
    settings.CONDUIT_ROUTE_HANDLERS = TEST_HANDLERS
    assert find_handler_class("mine") is None
    with pytest.raises(HandlerMissing, match="handler 'mine' is not registered"):
        handler_class("mine")


def test_r10_removed_extension_is_missing(settings):
    settings.CONDUIT_ROUTE_HANDLERS = TEST_HANDLERS
    assert find_handler_class("gone") is None
    with pytest.raises(HandlerMissing, match="cannot be loaded"):
        handler_class("gone")


def test_r10_registration_that_is_not_a_handler_class_is_missing(settings):
    settings.CONDUIT_ROUTE_HANDLERS = TEST_HANDLERS
    assert find_handler_class("odd") is None
    assert find_handler_class("instance") is None
    with pytest.raises(HandlerMissing, match="not a class with a match method"):
        handler_class("odd")


def test_r10_removing_a_handler_from_settings_removes_it(settings):
    settings.CONDUIT_ROUTE_HANDLERS = {"always": "tests.routing.ext_handlers:Always"}
    assert find_handler_class("always") is Always
    assert find_handler_class("match") is None
