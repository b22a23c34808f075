"""The setup session's domain: a candidate's diff against live per scope, its
effective route tree, applying it (actor recorded) and discarding it (D5, D8, R3)."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from routing.config.problems import ConfigInvalid
from routing.config.selectors import live_generation, load_configuration
from routing.models import Generation, GenerationKind, Route, Scope
from routing.setup.candidates import (
    CandidateNotFound,
    CandidateStale,
    Change,
    candidate_apply,
    candidate_diff,
    candidate_discard,
    effective_tree,
)
from tests.routing.factories import CHANGED, DEFAULT_TEST_CONFIG, T0, apply_config

pytestmark = pytest.mark.django_db


def by_name(items):
    return {item.name: item for item in items}


def test_diff_per_scope_lists_routes_added_removed_changed_and_bindings_changed():
    apply_config()
    candidate = apply_config(CHANGED, candidate=True)

    diff = candidate_diff(candidate)

    scopes = {scope.path: scope for scope in diff.scopes}
    assert diff.live == "1" and diff.candidate == "candidate"
    acme = scopes["acme"]
    assert acme.change == Change.CHANGED
    routes = by_name(acme.routes)
    assert routes["chat"].change == Change.CHANGED and routes["chat"].fields == ("policy", "fallback")
    assert routes["chat"].live["policy"] == "inject" and routes["chat"].candidate["policy"] == "queue"
    assert routes["noise"].change == Change.REMOVED and routes["noise"].candidate is None
    assert routes["alerts"].change == Change.ADDED and routes["alerts"].live is None
    assert set(routes) == {"chat", "noise", "alerts"}  # prs, stop, notes are alike
    bindings = by_name(acme.bindings)
    assert set(bindings) == {"inbox"}
    assert bindings["inbox"].change == Change.CHANGED and "executor" in bindings["inbox"].fields
    # acme/web inherits acme's changes (its effective routes) and changes deploys itself.
    web = by_name(scopes["acme/web"].routes)
    assert web["deploys"].fields == ("binding",)
    assert web["chat"].change == Change.CHANGED and web["noise"].change == Change.REMOVED
    as_json = diff.as_dict()
    assert as_json["unchanged"] is False and as_json["scopes"][0]["path"] == "acme"


def test_diff_of_an_identical_candidate_is_empty_and_a_new_scope_is_added():
    apply_config()
    same = apply_config(candidate=True)
    assert candidate_diff(same).changed == ()

    extra = DEFAULT_TEST_CONFIG + "  - path: acme/ops\n"
    diff = candidate_diff(apply_config(extra, candidate=True))
    assert [(s.path, s.change) for s in diff.changed] == [("acme/ops", Change.ADDED)]
    # An added scope's inherited routes are all "added" there.
    assert {item.change for item in diff.changed[0].routes} == {Change.ADDED}


def test_diff_before_any_apply_is_everything_added():
    candidate = apply_config(candidate=True)
    diff = candidate_diff(candidate)
    assert diff.live == "" and {s.change for s in diff.scopes} == {Change.ADDED}


def test_effective_tree_names_each_slots_scope_and_what_it_overrides():
    candidate = apply_config(candidate=True)

    tree = effective_tree(load_configuration(candidate))

    assert [(scope["path"], scope["depth"]) for scope in tree] == [("acme", 0), ("acme/web", 1)]
    web = {route["slot"]: route for route in tree[1]["routes"]}
    assert (web["prs"]["scope"], web["prs"]["overrides"]) == ("acme/web", "acme")
    assert (web["chat"]["scope"], web["chat"]["overrides"]) == ("acme", "")
    assert (web["deploys"]["scope"], web["deploys"]["overrides"]) == ("acme/web", "")
    assert [r["slot"] for r in tree[1]["routes"]] == ["prs", "chat", "stop", "notes", "noise", "deploys"]
    assert tree[1]["bindings"]["agent"]["redefines"] == "acme"


def test_apply_makes_the_candidate_the_next_generation_records_the_actor_and_removes_it():
    apply_config()
    candidate = apply_config(CHANGED, candidate=True)

    generation = candidate_apply(candidate_id=candidate.pk, clock=lambda: T0, applied_by="alice")

    assert live_generation() == generation
    assert (generation.number, generation.created_by) == (2, "alice")
    assert generation.note == f"from candidate {candidate.pk}"
    assert generation.document == CHANGED
    assert not Generation.objects.filter(pk=candidate.pk).exists()
    assert Route.objects.filter(scope__generation=generation, slot="alerts").exists()


def test_apply_refuses_a_stale_diff_and_stores_nothing():
    apply_config()
    candidate = apply_config(CHANGED, candidate=True)
    apply_config()  # generation 2 lands meanwhile

    with pytest.raises(CandidateStale, match="generation 2 now, not 1"):
        candidate_apply(candidate_id=candidate.pk, clock=lambda: T0, applied_by="alice", expected_live=1)

    assert live_generation().number == 2
    assert Generation.objects.filter(pk=candidate.pk, kind=GenerationKind.CANDIDATE).exists()


def test_apply_refuses_a_document_no_longer_valid(settings):
    apply_config()
    candidate = apply_config(CHANGED, candidate=True)
    settings.CONDUIT_EXECUTORS = {"python": "worklife.executors.PythonExecutor"}  # command unregistered

    with pytest.raises(ConfigInvalid):
        candidate_apply(candidate_id=candidate.pk, clock=lambda: T0, applied_by="alice")

    assert live_generation().number == 1
    assert Generation.objects.filter(pk=candidate.pk).exists()


def test_discard_removes_the_candidate_with_its_scopes_and_only_candidates():
    live = apply_config()
    candidate = apply_config(candidate=True)

    candidate_discard(candidate_id=candidate.pk)

    assert not Generation.objects.filter(pk=candidate.pk).exists()
    assert not Scope.objects.filter(generation_id=candidate.pk).exists()
    with pytest.raises(CandidateNotFound):
        candidate_discard(candidate_id=candidate.pk)
    with pytest.raises(CandidateNotFound):
        candidate_discard(candidate_id=live.pk)  # an applied generation is not a candidate
    with pytest.raises(CandidateNotFound):
        candidate_apply(candidate_id=live.pk, clock=lambda: T0, applied_by="x")


# --- CLI ------------------------------------------------------------------------------------------


def test_cli_config_diff_prints_changes_per_scope_and_json():
    apply_config()
    candidate = apply_config(CHANGED, candidate=True)

    out = io.StringIO()
    call_command("config", "diff", str(candidate.pk), stdout=out)
    text = out.getvalue()
    assert "candidate against generation 1" in text
    assert "scope acme: changed" in text
    assert "  route chat: changed (policy, fallback)" in text
    assert '    - {"fallback": "queue", "policy": "inject"}' in text
    assert "  route noise: removed" in text and "  route alerts: added" in text
    assert "  binding inbox: changed (executor, settings)" in text

    out = io.StringIO()
    call_command("config", "diff", str(candidate.pk), "--json", stdout=out)
    assert json.loads(out.getvalue())["scopes"][0]["path"] == "acme"


def test_cli_config_diff_of_an_unknown_candidate_fails():
    apply_config()
    with pytest.raises(CommandError, match="there is no candidate 99"):
        call_command("config", "diff", "99", stdout=io.StringIO())
