"""Validating a configuration document: each problem refused with its place and line, nothing
stored (R2, R3, R34)."""

from __future__ import annotations

from textwrap import dedent, indent

import pytest

from routing.config.problems import ConfigInvalid
from routing.config.selectors import load_configuration
from routing.config.services import config_apply
from routing.models import Binding, Generation, Route, Scope
from tests.routing.config.configkit import BASE


def scopes(text: str) -> str:
    """More scopes for the document's list, written flush left in the test."""
    return indent(dedent(text), "  ")


def refused(clock, document: str, place: str, fragment: str):
    """Apply ``document``, expect ConfigInvalid with a problem at ``place`` whose message
    holds ``fragment``, and check that no Generation was stored."""
    before = [model.objects.count() for model in (Generation, Scope, Binding, Route)]
    with pytest.raises(ConfigInvalid) as caught:
        config_apply(document=document, clock=clock)
    problems = caught.value.problems
    assert any(p.place == place and fragment in p.message for p in problems), [str(p) for p in problems]
    assert [model.objects.count() for model in (Generation, Scope, Binding, Route)] == before
    return problems


pytestmark = pytest.mark.django_db


def test_r10_unknown_handler(clock):
    document = BASE.replace("handler: match", "handler: matcher")
    problems = refused(clock, document, "scopes[0].routes[0].handler", "unknown handler 'matcher'")
    assert "registered: match" in problems[0].message


def test_r3_unknown_binding(clock):
    document = BASE + scopes(
        """\
          - path: acme/web
            routes:
              - slot: pull-requests
                handler: match
                params: {type: "github.pull_request.opened"}
                binding: triag
                policy: queue
        """
    )
    problems = refused(clock, document, "scopes[1].routes[0].binding", "unknown binding 'triag'")
    assert str(problems[0]).startswith("scopes[1].routes[0].binding: unknown binding 'triag'")


def test_r34_bad_policy(clock):
    document = BASE.replace("policy: queue", "policy: enqueue")
    refused(clock, document, "scopes[0].routes[0].policy", "unknown policy 'enqueue'")


def test_r34_bad_fallback(clock):
    document = BASE.replace("policy: queue", "policy: inject\n        fallback: retry")
    refused(clock, document, "scopes[0].routes[0].fallback", "unknown fallback 'retry'")


def test_r3_duplicate_slot(clock):
    document = BASE + (
        "      - slot: pull-requests\n        handler: match\n        params: {type: x}\n        policy: drop\n"
    )
    refused(clock, document, "scopes[0].routes[1].slot", "duplicate slot 'pull-requests'")


def test_r2_control_the_executor_cannot_perform(clock, settings):
    settings.CONDUIT_EXECUTORS = {
        **settings.CONDUIT_EXECUTORS,
        "instant": "tests.worklife.ext_executors:Instant",
    }
    document = BASE.replace("executor: command", "executor: instant").replace(
        'settings: {argv: ["./bin/triage"]}', "controls: [inject]"
    )
    refused(
        clock,
        document,
        "scopes[0].bindings.plain.controls",
        "executor 'instant' (tests.worklife.ext_executors.Instant) does not implement inject",
    )


def test_r2_flag_only_claim_is_refused(clock, settings):
    settings.CONDUIT_EXECUTORS = {
        **settings.CONDUIT_EXECUTORS,
        "flagged": "tests.worklife.ext_executors:FlagOnly",
    }
    document = BASE.replace("executor: command", "executor: flagged").replace(
        'settings: {argv: ["./bin/triage"]}', "controls: [interrupt]"
    )
    refused(clock, document, "scopes[0].bindings.plain.controls", "does not implement interrupt")


def test_r2_inherited_control_method_is_accepted(clock, settings):
    settings.CONDUIT_EXECUTORS = {
        **settings.CONDUIT_EXECUTORS,
        "subclassed": "tests.worklife.ext_executors.InheritsPython",
    }
    generation = config_apply(document=BASE.replace("executor: python", "executor: subclassed"), clock=clock)
    binding = load_configuration(generation).scope("acme").bindings["triage"]
    assert binding.capabilities == {"inject", "interrupt"}


def test_r2_queue_only_binding_cannot_claim_controls(clock):
    document = BASE.replace("inbox: {}", "inbox: {controls: [inject]}")
    refused(
        clock, document, "scopes[0].bindings.inbox.controls", "queue-only binding (no executor) cannot claim"
    )


def test_r2_unknown_executor(clock):
    document = BASE.replace("executor: command", "executor: shell")
    refused(clock, document, "scopes[0].bindings.plain.executor", "unknown executor 'shell'")


def test_r2_bad_executor_settings(clock):
    document = BASE.replace('target: "demo.agents:triage"', 'target: "demo.agents.triage"')
    refused(clock, document, "scopes[0].bindings.triage.settings.target", "not a 'package.module:function'")


def test_r34_control_policy_without_support_needs_fallback(clock):
    document = BASE.replace(
        "binding: triage\n        policy: queue", "binding: plain\n        policy: interrupt"
    )
    problems = refused(clock, document, "scopes[0].routes[0].binding", "binding 'plain' (declared in 'acme')")
    assert "needs an explicit fallback" in problems[0].message
    # With a fallback the same route is accepted.
    config_apply(
        document=document.replace("policy: interrupt", "policy: interrupt\n        fallback: queue"),
        clock=clock,
    )


def test_r34_unclaimed_control_needs_fallback(clock):
    document = BASE.replace("controls: [inject, interrupt]", "controls: [inject]").replace(
        "policy: queue", "policy: interrupt"
    )
    refused(clock, document, "scopes[0].routes[0].binding", "does not claim interrupt")


def test_r34_inherited_route_is_checked_in_every_inheriting_scope(clock):
    document = BASE.replace("policy: queue", "policy: inject") + scopes(
        """\
          - path: acme/web
            bindings:
              triage: {executor: command, settings: {argv: ["./bin/triage"]}}
        """
    )
    problems = refused(
        clock, document, "scopes[0].routes[0].binding", "in scope 'acme/web', which inherits this route"
    )
    assert "binding 'triage' (declared in 'acme/web')" in problems[0].message


def test_r34_overridden_route_is_not_checked_in_the_overriding_scope(clock):
    document = BASE.replace("policy: queue", "policy: inject") + scopes(
        """\
          - path: acme/web
            bindings:
              triage: {executor: command, settings: {argv: ["./bin/triage"]}}
            routes:
              - slot: pull-requests
                handler: match
                params: {type: "github.pull_request.*"}
                binding: triage
                policy: queue
        """
    )
    assert config_apply(document=document, clock=clock).number == 1


def test_r34_binding_policy_needs_a_binding(clock):
    document = BASE.replace("        binding: triage\n", "")
    refused(clock, document, "scopes[0].routes[0].binding", "policy 'queue' needs a binding")


def test_r34_drop_needs_no_binding(clock):
    document = BASE.replace("        binding: triage\n        policy: queue", "        policy: drop")
    generation = config_apply(document=document, clock=clock)
    route = load_configuration(generation).scope("acme").routes[0]
    assert (route.policy, route.binding) == ("drop", "")


@pytest.mark.parametrize(
    ("old", "new", "place"),
    [
        ("version: 1\n", "version: 1\nlabels: {}\n", "labels"),
        ("  - path: acme\n", "  - path: acme\n    owner: ops\n", "scopes[0].owner"),
        (
            "        executor: python\n",
            "        executor: python\n        retries: 3\n",
            "scopes[0].bindings.triage.retries",
        ),
        (
            "        policy: queue\n",
            "        policy: queue\n        weight: 1\n",
            "scopes[0].routes[0].weight",
        ),
        ("          keys:", "          colour: red\n          keys:", "scopes[0].routes[0].params.colour"),
    ],
)
def test_unknown_keys_are_refused(clock, old, new, place):
    refused(clock, BASE.replace(old, new, 1), place, "unknown key")


@pytest.mark.parametrize(
    ("old", "new", "place", "fragment"),
    [
        ("version: 1", "version: '1'", "version", "unsupported version"),
        ("scopes:\n", "scopes: {}\nx:\n", "scopes", "expected a list of scopes, got a mapping"),
        ("  - path: acme\n", "  - path: [acme]\n", "scopes[0].path", "expected a string, got a list"),
        ("    bindings:\n", "    bindings: [triage]\n    old:\n", "scopes[0].bindings", "got a list"),
        (
            "      inbox: {}\n",
            "      inbox: 3\n",
            "scopes[0].bindings.inbox",
            "expected a binding (a mapping)",
        ),
        (
            "controls: [inject, interrupt]",
            "controls: inject",
            "scopes[0].bindings.triage.controls",
            "expected a list",
        ),
        (
            'settings: {argv: ["./bin/triage"]}',
            'settings: "./bin/triage"',
            "scopes[0].bindings.plain.settings",
            "expected a mapping",
        ),
        (
            "        policy: queue\n",
            "        policy: queue\n        start: maybe\n",
            "scopes[0].routes[0].start",
            "expected true or false",
        ),
        (
            "        policy: queue\n",
            "        policy: [queue]\n",
            "scopes[0].routes[0].policy",
            "expected a string",
        ),
        ('          type: "github.pull_request.*"\n', "", "scopes[0].routes[0].params.type", "required"),
    ],
)
def test_wrong_types_are_refused(clock, old, new, place, fragment):
    document = BASE.replace(old, new, 1)
    assert document != BASE
    refused(clock, document, place, fragment)


def test_routes_must_be_a_list(clock):
    refused(
        clock,
        BASE.replace("    routes:\n", "    routes: {}\n    x:\n"),
        "scopes[0].routes",
        "expected a list of routes",
    )


def test_route_params_must_be_a_mapping(clock):
    document = BASE.replace("        params:\n", "        params: [1]\n        x:\n")
    refused(clock, document, "scopes[0].routes[0].params", "expected a mapping")


@pytest.mark.parametrize("path", ["acme//web", "/acme", "acme/", "ac me", "acme/../x", "", "a" * 256])
def test_bad_scope_path(clock, path):
    document = BASE.replace("path: acme", f"path: '{path}'")
    refused(clock, document, "scopes[0].path", "bad scope path" if path else "bad scope path")


def test_child_scope_needs_its_parent_in_the_document(clock):
    document = BASE + "  - path: acme/web/app\n"
    refused(
        clock, document, "scopes[1].path", "needs its parent scope 'acme/web' declared in the same document"
    )


def test_child_scope_may_come_before_its_parent(clock):
    document = "version: 1\nscopes:\n  - path: acme/web\n" + BASE.split("scopes:\n", 1)[1]
    assert config_apply(document=document, clock=clock).number == 1


def test_duplicate_scope(clock):
    refused(clock, BASE + "  - path: acme\n", "scopes[1].path", "duplicate scope 'acme'")


def test_invalid_regex_in_matches(clock):
    document = BASE.replace(
        "          keys:", "          where: [{field: data.title, matches: '(WIP'}]\n          keys:"
    )
    refused(
        clock, document, "scopes[0].routes[0].params.where[0].matches", "invalid regular expression '(WIP'"
    )


def test_a_pattern_re2_cannot_take_is_refused_at_validation_with_its_place(clock):
    """matches runs on RE2 (linear time): a backreference or lookaround is refused, not applied."""
    document = BASE.replace(
        "          keys:", "          where: [{field: data.title, matches: '(WIP)-\\1'}]\n          keys:"
    )
    problems = refused(
        clock,
        document,
        "scopes[0].routes[0].params.where[0].matches",
        "regular expression '(WIP)-\\\\1' is not supported by RE2, the linear-time engine",
    )
    assert problems[0].line == ROUTE_TYPE_LINE + 1


def test_bad_key_template(clock):
    document = BASE.replace("pr:{data.repository}#{data.number}", "pr:{data.repository#{data.number}")
    refused(clock, document, "scopes[0].routes[0].params.keys[0]", "bad key template")


def test_key_template_field_must_be_a_known_root(clock):
    document = BASE.replace("{data.number}", "{payload.number}")
    refused(clock, document, "scopes[0].routes[0].params.keys[0]", "must start with one of")


def test_duplicate_yaml_key(clock):
    document = BASE.replace("      inbox: {}\n", "      inbox: {}\n      triage: {}\n")
    problems = refused(
        clock, document, "scopes[0].bindings.triage", "duplicate key 'triage' (first on line 5)"
    )
    assert problems[0].line == 13


def test_not_yaml(clock):
    problems = refused(clock, "version: 1\nscopes: [\n", "document", "not valid YAML")
    assert problems[0].line is not None


def test_version_is_required(clock):
    refused(clock, BASE.replace("version: 1\n", ""), "version", "required")


def test_version_must_be_supported(clock):
    refused(clock, BASE.replace("version: 1", "version: 2"), "version", "unsupported version 2")


def test_empty_document(clock):
    refused(clock, "# nothing here\n", "document", "the document is empty")


def test_document_must_be_a_mapping(clock):
    refused(clock, "- acme\n", "document", "expected the document (a mapping), got a list")


def test_yaml_alias_bomb_is_refused(clock):
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 8):
        previous = chr(ord("a") + level - 1)
        name = chr(ord("a") + level)
        lines.append(
            f"{name}: &{name} [*{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}]"
        )
    refused(clock, "\n".join(lines) + "\n", "document", "too many YAML nodes")


def test_unsupported_yaml_value_is_refused(clock):
    document = BASE.replace(
        'settings: {target: "demo.agents:triage"}', "settings: {target: !!binary aGVsbG8=}"
    )
    refused(clock, document, "scopes[0].bindings.triage.settings.target", "unsupported YAML value")


ROUTE_TYPE_LINE = BASE.splitlines().index('          type: "github.pull_request.*"') + 1


@pytest.mark.parametrize(
    ("written", "fragment"),
    [
        (r'"\ud800"', "invalid Unicode (a lone surrogate at character 0)"),
        (r'"github.\udfff.*"', "invalid Unicode (a lone surrogate at character 7)"),
        (r'"github\0*"', "NUL characters"),
    ],
)
def test_a_lone_surrogate_is_refused_at_validation_with_its_place(clock, written, fragment):
    """What acceptance refuses in an Event (lone surrogates, NUL) is refused in a document too:
    applied, it would dead-letter every Event of the scope with handler_panic."""
    document = BASE.replace('type: "github.pull_request.*"', f"type: {written}")
    problems = refused(clock, document, "scopes[0].routes[0].params.type", fragment)
    assert [(p.place, p.line) for p in problems] == [("scopes[0].routes[0].params.type", ROUTE_TYPE_LINE)]
    # Every problem can be printed and stored as UTF-8 (the CLI and pages show them).
    assert all(str(p).encode("utf-8") for p in problems)


@pytest.mark.parametrize(
    ("old", "new", "place"),
    [
        (
            '"demo.agents:triage"}',
            '"demo.agents:\\ud83d"}',
            "scopes[0].bindings.triage.settings.target",
        ),
        (
            '          keys: ["pr:',
            '          where: [{field: data.action, in: [opened, "\\udc00"]}]\n          keys: ["pr:',
            "scopes[0].routes[0].params.where[0].in[1]",
        ),
        (
            '          keys: ["pr:',
            '          "x\\ud800": 1\n          keys: ["pr:',
            "scopes[0].routes[0].params",
        ),
    ],
)
def test_a_lone_surrogate_anywhere_in_the_document_is_refused_with_its_place(clock, old, new, place):
    document = BASE.replace(old, new, 1)
    assert document != BASE
    problems = refused(clock, document, place, "a lone surrogate")
    assert all(p.line is not None and str(p).encode("utf-8") for p in problems)


def test_a_raw_lone_surrogate_in_the_text_is_refused_with_its_line(clock):
    document = BASE + "# a comment with \ud800 in it\n"
    problems = refused(clock, document, "document", "a lone surrogate on line")
    assert problems[0].line == len(BASE.splitlines()) + 1


@pytest.mark.parametrize(
    ("old", "new", "place", "tag"),
    [
        # The tag on a mapping or a sequence used to be ignored silently.
        (
            '"demo.agents:triage"}',
            '"demo.agents:triage", extra: !!python/object/apply:os.system {args: [echo]}}',
            "scopes[0].bindings.triage.settings.extra",
            "!!python/object/apply:os.system",
        ),
        (
            'settings: {argv: ["./bin/triage"]}',
            'settings: {argv: !!python/object/apply:os.system ["./bin/triage"]}',
            "scopes[0].bindings.plain.settings.argv",
            "!!python/object/apply:os.system",
        ),
        ("    routes:\n", "    routes: !!python/object:list\n", "scopes[0].routes", "!!python/object:list"),
        ("inbox: {}", "inbox: !!set {a, b}", "scopes[0].bindings.inbox", "!!set"),
        ("inbox: {}", "inbox: !!omap [{a: 1}]", "scopes[0].bindings.inbox", "!!omap"),
        ("inbox: {}", "inbox: !!pairs [{a: 1}]", "scopes[0].bindings.inbox", "!!pairs"),
        ("policy: queue", "policy: !custom queue", "scopes[0].routes[0].policy", "!custom"),
        (
            "policy: queue",
            "policy: !<tag:example.com,2026:x> queue",
            "scopes[0].routes[0].policy",
            "tag:example.com,2026:x",
        ),
        (
            "version: 1",
            "--- !!python/object:conduit.Config\nversion: 1",
            "document",
            "!!python/object:conduit.Config",
        ),
        # A tagged key, and a tag hidden in what a << merge key brings in.
        ("      inbox: {}", "      !custom inbox: {}", "scopes[0].bindings", "!custom"),
        (
            "inbox: {}",
            "inbox: {<<: !!python/object:x {executor: python}}",
            "scopes[0].bindings.inbox",
            "!!python/object:x",
        ),
    ],
)
def test_yaml_tags_outside_the_core_schema_are_refused_with_their_line(clock, old, new, place, tag):
    document = BASE.replace(old, new, 1)
    assert document != BASE
    problems = refused(clock, document, place, f"the tag {tag!r} is not in the core schema")
    changed = next(
        i for i, (a, b) in enumerate(zip(document.splitlines(), BASE.splitlines(), strict=False), 1) if a != b
    )
    assert [p.line for p in problems if p.place == place] == [changed]


def test_core_schema_tags_anchors_and_merges_are_still_accepted(clock):
    document = BASE.replace(
        'settings: {argv: ["./bin/triage"]}', 'settings: &argv {argv: !!seq ["./bin/triage"]}'
    )
    document = document.replace(
        "inbox: {}", "inbox: !!map {}\n      again: {executor: !!str command, settings: {<<: *argv}}"
    )
    document = document.replace("policy: queue", "policy: ! queue\n        start: !!bool true")
    generation = config_apply(document=document, clock=clock)
    bindings = {
        b.name: (b.executor, b.settings) for b in Binding.objects.filter(scope__generation=generation)
    }
    assert bindings["again"] == ("command", {"argv": ["./bin/triage"]})
    assert bindings["inbox"] == ("", {})
    assert Route.objects.get(scope__generation=generation).policy == "queue"


def test_bad_names_are_refused(clock):
    refused(
        clock,
        BASE.replace("slot: pull-requests", "slot: 'pull requests'"),
        "scopes[0].routes[0].slot",
        "bad slot",
    )
    refused(clock, BASE.replace("inbox: {}", "'in box': {}"), "scopes[0].bindings.in box", "bad binding name")


def test_user_handler_checks_its_own_params(clock, settings):
    settings.CONDUIT_ROUTE_HANDLERS = {
        **settings.CONDUIT_ROUTE_HANDLERS,
        "always": "tests.routing.ext_handlers:Always",
    }
    document = BASE.replace(
        "handler: match\n        params:\n", "handler: always\n        params:\n          x: 1\n"
    )
    refused(clock, document, "scopes[0].routes[0].params.type", "unknown key 'type'")


def test_all_problems_are_reported_in_document_order_with_lines(clock):
    document = BASE.replace("policy: queue", "policy: enqueue").replace(
        "executor: command", "executor: shell"
    )
    document = document.replace("version: 1\n", "version: 1\nlabels: x\n")
    problems = refused(clock, document, "labels", "unknown key")
    assert [(p.place, p.line) for p in problems] == [
        ("labels", 2),
        ("scopes[0].bindings.plain.executor", 11),
        ("scopes[0].routes[0].policy", 21),
    ]


def test_default_scope_must_name_a_declared_scope(clock):
    document = BASE.replace("version: 1\n", "version: 1\ndefault_scope: acme/web\n")
    refused(clock, document, "default_scope", "unknown scope 'acme/web'")
    refused(
        clock, BASE.replace("version: 1\n", "version: 1\ndefault_scope: [acme]\n"), "default_scope", "string"
    )
