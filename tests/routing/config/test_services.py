"""Applying and storing configuration documents: numbered generations, unnumbered candidates,
nothing stored after a refusal."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from routing.config.problems import ConfigInvalid
from routing.config.selectors import live_generation, load_configuration
from routing.config.services import config_apply, config_candidate
from routing.models import Generation, GenerationKind, Route, Scope
from tests.routing.config.configkit import BASE, DEMO
from tests.routing.factories import DEFAULT_TEST_CONFIG, apply_config

pytestmark = pytest.mark.django_db


def test_nothing_is_applied_after_a_valid_generation(clock):
    first = config_apply(document=BASE, clock=clock)
    with pytest.raises(ConfigInvalid):
        config_apply(document=BASE.replace("handler: match", "handler: nope"), clock=clock)
    assert Generation.objects.count() == 1
    assert Scope.objects.count() == 1
    assert live_generation() == first


def test_candidate_refused_stores_nothing(clock):
    with pytest.raises(ConfigInvalid):
        config_candidate(document=BASE.replace("policy: queue", "policy: x"), clock=clock)
    assert Generation.objects.count() == 0


def test_apply_numbers_generations_and_stores_the_document(clock):
    first = config_apply(document=BASE, clock=clock, created_by="alice")
    clock.advance(60)
    second = config_apply(document=DEFAULT_TEST_CONFIG, clock=clock)
    assert (first.number, second.number) == (1, 2)
    assert first.kind == GenerationKind.APPLIED and first.label == "1"
    assert first.document == BASE and len(first.digest) == 64 and first.created_by == "alice"
    assert second.created_at == clock()
    assert live_generation() == second
    scope = Scope.objects.get(generation=first, path="acme")
    assert sorted(scope.bindings.values_list("name", flat=True)) == ["inbox", "plain", "triage"]
    route = scope.routes.get()
    assert (route.position, route.slot, route.handler, route.binding, route.policy, route.start) == (
        0,
        "pull-requests",
        "match",
        "triage",
        "queue",
        True,
    )
    assert route.params == {"type": "github.pull_request.*", "keys": ["pr:{data.repository}#{data.number}"]}


def test_candidate_is_stored_unnumbered_and_never_live(clock):
    applied = config_apply(document=BASE, clock=clock)
    candidate = config_candidate(document=DEFAULT_TEST_CONFIG, clock=clock)
    assert candidate.kind == GenerationKind.CANDIDATE and candidate.number is None
    assert candidate.label == "candidate"
    assert live_generation() == applied
    assert config_apply(document=BASE, clock=clock).number == 2
    assert load_configuration(candidate).label == "candidate"


def test_yaml_dates_are_kept_as_written(clock):
    document = BASE.replace(
        "          keys:", "          where: [{field: data.day, equals: 2026-01-05}]\n          keys:"
    )
    generation = config_apply(document=document, clock=clock)
    params = Route.objects.get(scope__generation=generation).params
    assert params["where"] == [{"field": "data.day", "equals": "2026-01-05"}]


def test_demo_configuration_validates_and_applies(clock):
    generation = config_apply(document=DEMO.read_text(encoding="utf-8"), clock=clock)
    configuration = load_configuration(generation)
    assert set(configuration.scopes) == {"acme", "acme/web", "acme/ops"}
    web = configuration.scope("acme/web")
    # An override slot, in place.
    assert web.routes[1].slot == "pull-requests" and web.routes[1].scope == "acme/web"
    # A binding the child redefines, used by an inherited route (which falls back to queue).
    comments = web.route("pr-comments")
    assert comments.scope == "acme" and comments.start is False and comments.fallback == "queue"
    assert web.bindings["triage"].executor == "command" and web.bindings["triage"].redefines == "acme"
    # A drop route, and acme/ops keeps acme's routes before its own.
    ops = configuration.scope("acme/ops")
    assert [r.slot for r in ops.routes][-3:] == ["resolved", "alerts", "heartbeats"]
    assert ops.route("heartbeats").policy == "drop"


def test_default_test_config_applies(clock):
    generation = apply_config(clock=clock)
    candidate = apply_config(clock=clock, candidate=True)
    assert generation.number == 1 and candidate.number is None
    web = load_configuration(generation).scope("acme/web")
    assert [r.slot for r in web.routes] == ["prs", "chat", "stop", "notes", "noise", "deploys"]


@pytest.mark.django_db(transaction=True)
def test_concurrent_applies_get_distinct_consecutive_numbers(clock):
    numbers: list[int] = []
    errors: list[BaseException] = []

    def apply_one() -> None:
        try:
            numbers.append(config_apply(document=BASE, clock=clock).number)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=apply_one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert sorted(numbers) == [1, 2, 3, 4]
    assert Generation.objects.filter(kind=GenerationKind.APPLIED).count() == 4


def test_default_scope_is_stored_with_its_generation(clock):
    generation = config_apply(
        document=BASE.replace("version: 1\n", "version: 1\ndefault_scope: acme\n"), clock=clock
    )
    assert generation.default_scope == "acme"
    assert load_configuration(generation).default_scope == "acme"
    assert config_apply(document=BASE, clock=clock).default_scope == ""
