"""Through the JSON API: store a candidate (problems with their lines), read
its diff and effective tree, trace against it, preview its impact, apply it (actor recorded) or
discard it."""

from __future__ import annotations

import pytest

from conduit_site.api.openapi import openapi_schema
from routing.acceptance.services import event_accept
from routing.access.services import api_token_create
from routing.config.selectors import live_generation
from routing.engine.options import RouterOptions
from routing.engine.router import build_router
from routing.models import Generation, GenerationKind
from tests.routing.factories import CHANGED, DEFAULT_TEST_CONFIG, T0, apply_config, user_with_role

pytestmark = pytest.mark.django_db


@pytest.fixture
def auth():
    user = user_with_role("admin", username="root")
    return {"Authorization": f"Bearer {api_token_create(user=user, name='t', clock=lambda: T0).secret}"}


def post(client, url, body, auth):
    return client.post(url, data=body, content_type="application/json", headers=auth)


def schema(name):
    return openapi_schema()["components"]["schemas"][name]


def test_api_stores_a_candidate_with_its_diff(client, auth):
    apply_config()

    response = post(client, "/api/candidates", {"document": CHANGED}, auth)

    assert response.status_code == 201, response.content
    body = response.json()
    candidate = Generation.objects.get(kind=GenerationKind.CANDIDATE)
    assert (body["id"], body["kind"], body["number"], body["created_by"]) == (
        candidate.pk,
        "candidate",
        None,
        "root",
    )
    assert set(schema("Generation")["required"]) <= set(body)
    acme = next(scope for scope in body["diff"]["scopes"] if scope["path"] == "acme")
    assert {(r["name"], r["change"]) for r in acme["routes"]} == {
        ("chat", "changed"),
        ("noise", "removed"),
        ("alerts", "added"),
    }


def test_api_refuses_an_invalid_document_with_every_problem_and_its_line(client, auth):
    apply_config()
    broken = DEFAULT_TEST_CONFIG.replace("binding: inbox", "binding: inbx")
    line = broken.splitlines().index("        binding: inbx") + 1

    response = post(client, "/api/candidates", {"document": broken}, auth)

    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "invalid_configuration" and body["field"] == "document"
    assert body["problems"] == [
        {
            "place": "scopes[0].routes[3].binding",
            "message": "unknown binding 'inbx' (bindings here: agent, inbox, shell)",
            "line": line,
        }
    ]
    assert not Generation.objects.filter(kind=GenerationKind.CANDIDATE).exists()


@pytest.mark.parametrize(
    ("body", "field"), [({"document": 3}, "document"), ({"document": "x", "note": "n"}, "note"), ([], None)]
)
def test_api_refuses_a_malformed_body(client, auth, body, field):
    response = post(client, "/api/candidates", body, auth)
    assert response.status_code == 400 and response.json()["field"] == field


def test_api_reads_a_candidates_document_diff_and_tree(client, auth):
    apply_config()
    candidate = apply_config(CHANGED, candidate=True)

    body = client.get(f"/api/candidates/{candidate.pk}", headers=auth).json()

    assert body["document"] == CHANGED
    assert body["diff"]["live"] == "1" and body["diff"]["unchanged"] is False
    web = next(scope for scope in body["tree"] if scope["path"] == "acme/web")
    prs = next(route for route in web["routes"] if route["slot"] == "prs")
    assert (prs["scope"], prs["overrides"], web["depth"]) == ("acme/web", "acme", 1)
    assert client.get("/api/candidates/999", headers=auth).status_code == 404


def test_api_traces_against_the_candidate_by_reference(client, auth):
    apply_config()
    candidate = apply_config(CHANGED, candidate=True)
    event = {"source": "mon", "type": "alert.fired", "scope": "acme", "data": {"id": "a1"}}

    live = post(client, "/api/trace", {"event": event}, auth).json()
    traced = post(
        client, "/api/trace", {"event": event, "generation": f"candidate:{candidate.pk}"}, auth
    ).json()

    assert (live["effect"], traced["effect"], traced["route"]) == ("unmatched", "start", "alerts")


def test_api_impact_preview_reports_the_changed_events_and_refuses_a_bad_count(client, auth, clock):
    apply_config()
    event_accept(
        payload={"specversion": "1.0", "id": "p1", "source": "mon", "type": "x.ping", "scope": "acme"},
        clock=clock,
    )
    router = build_router(clock=clock, options=RouterOptions(workers=1))
    router.route_pending()
    router.close()
    candidate = apply_config(CHANGED, candidate=True)

    response = client.get(f"/api/candidates/{candidate.pk}/impact?events=5", headers=auth)

    assert response.status_code == 200
    body = response.json()
    assert set(body) == set(schema("ImpactReport")["properties"])
    assert (body["examined"], body["changed"]) == (1, 1)
    group = body["groups"][0]
    assert (group["group"], group["count"]) == ("drop → unmatched", 1)
    assert (group["changes"][0]["live"]["route"], group["changes"][0]["candidate"]["effect"]) == (
        "noise",
        "unmatched",
    )
    for bad in ("0", "10001", "x", "-1"):
        refused = client.get(f"/api/candidates/{candidate.pk}/impact?events={bad}", headers=auth)
        assert refused.status_code == 400 and refused.json()["field"] == "events", bad


def test_api_applies_a_candidate_recording_the_tokens_user(client, auth):
    apply_config()
    candidate = apply_config(CHANGED, candidate=True)

    stale = post(client, f"/api/candidates/{candidate.pk}/apply", {"expected_live": 7}, auth)
    assert stale.status_code == 409 and stale.json()["error"] == "stale_candidate"

    response = post(client, f"/api/candidates/{candidate.pk}/apply", {"expected_live": 1}, auth)

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["kind"], body["number"], body["created_by"]) == ("applied", 2, "root")
    assert live_generation().document == CHANGED
    assert post(client, f"/api/candidates/{candidate.pk}/apply", {}, auth).status_code == 404


def test_api_discards_a_candidate(client, auth):
    apply_config()
    candidate = apply_config(CHANGED, candidate=True)
    response = client.post(f"/api/candidates/{candidate.pk}/discard", headers=auth)
    assert response.status_code == 200 and response.json() == {"discarded": candidate.pk}
    assert not Generation.objects.filter(pk=candidate.pk).exists()
    assert client.post(f"/api/candidates/{candidate.pk}/discard", headers=auth).status_code == 404


def test_api_a_control_character_is_a_problem_at_its_line_not_a_server_error(client, auth):
    # Found by schemathesis: PyYAML's reader refused the character before any problem was recorded.
    response = post(client, "/api/candidates", {"document": "version: 1\nscopes:\n  - path: a\u0087\n"}, auth)
    assert response.status_code == 400
    assert response.json()["problems"] == [
        {
            "place": "document",
            "message": "not valid YAML: unacceptable character #x0087 (line 3): special characters are not allowed",
            "line": 3,
        }
    ]
