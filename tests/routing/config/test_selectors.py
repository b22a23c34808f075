"""Reading stored configurations: a generation by reference, and the effective configuration of
each scope with inheritance and overrides (R3)."""

from __future__ import annotations

import pytest

from routing.config.problems import GenerationNotFound
from routing.config.selectors import find_generation, load_configuration
from routing.config.services import config_apply, config_candidate
from routing.extension import RouteInfo
from tests.routing.config.configkit import BASE

pytestmark = pytest.mark.django_db


def test_find_generation_by_reference(clock):
    with pytest.raises(GenerationNotFound, match="no configuration has been applied"):
        find_generation()
    applied = config_apply(document=BASE, clock=clock)
    candidate = config_candidate(document=BASE, clock=clock)
    assert find_generation() == applied
    assert find_generation("1") == applied
    assert find_generation(f"candidate:{candidate.pk}") == candidate
    with pytest.raises(GenerationNotFound, match="no applied generation 9"):
        find_generation("9")
    with pytest.raises(GenerationNotFound, match="no candidate"):
        find_generation(f"candidate:{applied.pk}")
    with pytest.raises(GenerationNotFound, match="not a generation number"):
        find_generation("latest")


THREE_LEVELS = """\
version: 1
scopes:
  - path: acme
    bindings:
      triage: {executor: python, settings: {target: "demo.agents:triage"}, controls: [inject]}
      inbox: {}
    routes:
      - {slot: a, handler: match, params: {type: "a.*"}, binding: triage, policy: inject, fallback: queue}
      - {slot: b, handler: match, params: {type: "b.*"}, binding: triage, policy: queue}
      - {slot: c, handler: match, params: {type: "c.*"}, binding: triage, policy: queue}
  - path: acme/web
    bindings:
      triage: {executor: command, settings: {argv: [web-triage]}}
    routes:
      - {slot: b, handler: match, params: {type: "b.web"}, binding: inbox, policy: queue}
      - {slot: d, handler: match, params: {type: "d.*"}, policy: drop}
  - path: acme/web/app
    routes:
      - {slot: d, handler: match, params: {type: "d.app"}, binding: triage, policy: queue, start: false}
      - {slot: a, handler: match, params: {type: "a.app"}, binding: triage, policy: queue}
      - {slot: e, handler: match, params: {type: "e.*"}, binding: inbox, policy: queue}
  - path: acme/ops
"""


def test_r3_routes_resolve_root_to_leaf_with_overrides_in_place(clock):
    configuration = load_configuration(config_apply(document=THREE_LEVELS, clock=clock))
    assert [(r.slot, r.scope) for r in configuration.scope("acme").routes] == [
        ("a", "acme"),
        ("b", "acme"),
        ("c", "acme"),
    ]
    assert [(r.slot, r.scope, r.overrides) for r in configuration.scope("acme/web").routes] == [
        ("a", "acme", ""),
        ("b", "acme/web", "acme"),
        ("c", "acme", ""),
        ("d", "acme/web", ""),
    ]
    app = configuration.scope("acme/web/app")
    assert [(r.slot, r.scope, r.overrides) for r in app.routes] == [
        ("a", "acme/web/app", "acme"),
        ("b", "acme/web", "acme"),
        ("c", "acme", ""),
        ("d", "acme/web/app", "acme/web"),
        ("e", "acme/web/app", ""),
    ]
    assert app.route("d").start is False and app.route("d").params["type"] == "d.app"
    # A scope that declares nothing inherits everything.
    assert configuration.scope("acme/ops").routes == configuration.scope("acme").routes


def test_r3_redefined_binding_is_used_by_inherited_routes(clock):
    configuration = load_configuration(config_apply(document=THREE_LEVELS, clock=clock))
    acme, web, app = (configuration.scope(p) for p in ("acme", "acme/web", "acme/web/app"))
    assert acme.bindings["triage"].executor == "python"
    assert acme.bindings["triage"].capabilities == {"inject"}
    # Route "c" is declared in acme; in acme/web it runs on acme/web's triage.
    route_c = web.route("c")
    assert route_c.scope == "acme"
    binding = web.bindings[route_c.binding]
    assert (binding.scope, binding.executor, binding.capabilities, binding.redefines) == (
        "acme/web",
        "command",
        frozenset(),
        "acme",
    )
    # Three levels deep: acme/web/app sees acme/web's triage and acme's inbox.
    assert app.bindings["triage"].scope == "acme/web"
    assert app.bindings["inbox"].scope == "acme"
    assert set(app.bindings) == {"triage", "inbox"}
    assert configuration.scope("acme/ops").bindings["triage"].scope == "acme"


def test_r3_route_info_is_what_handlers_receive(clock):
    configuration = load_configuration(config_apply(document=THREE_LEVELS, clock=clock))
    route = configuration.scope("acme/web").route("a")
    info = route.info()
    assert isinstance(info, RouteInfo)
    assert info == RouteInfo(
        slot="a",
        scope="acme",
        params=route.params,
        binding="triage",
        policy="inject",
        fallback="queue",
        start=True,
        handler="match",
    )
    assert route.info() is info


def test_r3_load_configuration_takes_three_queries(clock, django_assert_num_queries):
    generation = config_apply(document=THREE_LEVELS, clock=clock)
    with django_assert_num_queries(3):
        configuration = load_configuration(generation)
    assert configuration.label == "1" and configuration.generation_id == generation.pk
    many = "version: 1\nscopes:\n  - path: root\n" + "".join(
        f"  - path: root/s{n}\n    bindings: {{b{n}: {{}}}}\n    routes: [{{slot: r{n}, handler: match, "
        f"params: {{type: t{n}}}, binding: b{n}}}]\n"
        for n in range(20)
    )
    generation = config_apply(document=many, clock=clock)
    with django_assert_num_queries(3):
        configuration = load_configuration(generation)
    assert len(configuration.scopes) == 21


def test_r3_unknown_scope_is_none(clock):
    configuration = load_configuration(config_apply(document=BASE, clock=clock))
    assert configuration.scope("acme/nope") is None


def test_r36_binding_whose_executor_was_unregistered_reports_a_problem(clock, settings):
    generation = config_apply(document=BASE, clock=clock)
    settings.CONDUIT_EXECUTORS = {"command": "worklife.executors.CommandExecutor"}
    binding = load_configuration(generation).scope("acme").bindings["triage"]
    assert binding.capabilities == frozenset()
    assert binding.problem == "executor 'python' is not registered"
    assert load_configuration(generation).scope("acme").bindings["plain"].problem == ""
