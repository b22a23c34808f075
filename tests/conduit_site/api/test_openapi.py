"""What schemathesis with every check found, each pinned by a request of its
own: the views take what the OpenAPI document describes and refuse what it forbids, with 400 and
the documented error, storing nothing."""

from __future__ import annotations

import jsonschema_rs
import pytest

from causal.models import Event
from conduit_site.api.openapi import openapi_schema
from controls.models import BulkJob
from routing.access.services import api_token_create
from tests.routing.factories import DEFAULT_TEST_CONFIG, T0, apply_config, user_with_role
from tests.worklife.factories import WorkFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def auth():
    apply_config(DEFAULT_TEST_CONFIG)
    user = user_with_role("admin", username="root")
    return {"Authorization": f"Bearer {api_token_create(user=user, name='t', clock=lambda: T0).secret}"}


def post(client, url, body, auth):
    return client.post(url, data=body, content_type="application/json", headers=auth)


def document_allows(name: str, value) -> bool:
    """Whether the OpenAPI document's component schema ``name`` takes ``value``."""
    schema = {"$ref": f"#/components/schemas/{name}", "components": openapi_schema()["components"]}
    return jsonschema_rs.validator_for(schema).is_valid(value)


def test_a_null_ids_is_refused_not_read_as_absent(client, auth):
    body = {"action": "retry", "ids": None, "filter": {}}
    assert not document_allows("WorkBulkRequest", body)
    response = post(client, "/api/work/bulk", body, auth)
    assert response.status_code == 400
    assert (response.json()["error"], response.json()["field"]) == ("invalid_input", "ids")


def test_a_whole_number_written_with_a_point_is_an_integer(client, auth):
    work = WorkFactory(scope="acme")
    response = post(
        client, "/api/work/bulk", {"action": "cancel", "ids": [float(work.pk)], "count": 1.0}, auth
    )
    assert response.status_code == 202 and response.json()["total"] == 1
    assert BulkJob.objects.get(pk=response.json()["id"]).targets == [work.pk]
    event = {"specversion": "1.0", "id": "w1", "source": "t", "type": "t.x", "scope": "acme", "cx": 7.0}
    assert document_allows("CloudEventInput", {**event, "work_id": float(work.pk)})
    response = post(client, "/api/events", {**event, "work_id": float(work.pk)}, auth)
    assert response.status_code == 201, response.json()
    assert response.json()["conduit"]["work_id"] == work.pk and response.json()["event"]["cx"] == 7
    response = post(client, "/api/candidates/999/apply", {"expected_live": 1.0}, auth)
    assert response.status_code == 404  # past the check of expected_live: no such candidate


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"data": {"a": 1}, "data_base64": "AAAA"}, "data_base64"),
        ({"cx": 2**31}, "cx"),
        ({"subject": "a\x00b"}, "subject"),
    ],
)
def test_what_the_document_forbids_is_refused_and_nothing_stored(client, auth, body, field):
    event = {"specversion": "1.0", "id": "f1", "source": "t", "type": "t.x", "scope": "acme", **body}
    assert document_allows("CloudEventInput", {**event, "subject": "s", "data": None, "cx": 1})
    assert not document_allows("CloudEventInput", event)
    response = post(client, "/api/events", event, auth)
    assert response.status_code == 400 and response.json()["field"] == field
    assert not Event.objects.filter(envelope_id="f1").exists()


def test_a_null_expected_live_is_not_checked_as_the_document_says(client, auth):
    operation = openapi_schema()["paths"]["/api/candidates/{candidate_id}/apply"]["post"]
    schema = operation["requestBody"]["content"]["application/json"]["schema"]
    assert jsonschema_rs.validator_for(schema).is_valid({"expected_live": None})
    candidate = post(client, "/api/candidates", {"document": DEFAULT_TEST_CONFIG}, auth).json()
    response = post(client, f"/api/candidates/{candidate['id']}/apply", {"expected_live": None}, auth)
    assert response.status_code == 200, response.json()


@pytest.mark.parametrize("type_", ["\x00", " \x00 ", "note\x00", "\r\n"])
def test_operator_input_needs_a_type_with_no_nul_and_not_blank(type_):
    assert document_allows("OperatorInput", {"type": "operator.note"})
    assert not document_allows("OperatorInput", {"type": type_})


def test_data_with_a_nul_anywhere_is_refused_naming_its_place_as_the_document_describes(client, auth):
    # JsonValue is any JSON value (what client generators read); its description names what the
    # server refuses inside it, and the refusal names the place.
    assert "no NUL character" in openapi_schema()["components"]["schemas"]["JsonValue"]["description"]
    assert document_allows("OperatorInput", {"type": "note", "data": {"a": [{"b": "c"}]}})
    for data, place in (({"a": [{"b": "c\x00"}]}, "data.a[0].b"), ({"a": {"k\x00": 1}}, "data.a.k\x00")):
        event = {
            "specversion": "1.0",
            "id": "d1",
            "source": "t",
            "type": "t.x",
            "scope": "acme",
            "data": data,
        }
        response = post(client, "/api/events", event, auth)
        assert response.status_code == 400 and response.json()["field"] == place, response.json()
        assert response.json()["message"].startswith("NUL characters")


@pytest.mark.parametrize("url", ["/api/events?limit=5.0", "/api/work?limit=5.0", "/api/events?limit=5"])
def test_a_whole_number_query_parameter_written_with_a_point_is_an_integer(client, auth, url):
    response = client.get(url, headers=auth)
    assert response.status_code == 200, response.content


@pytest.mark.parametrize(
    "url", ["/api/events?limit=5.5", "/api/work?limit=1e3", "/api/events?since=-999999w"]
)
def test_a_query_parameter_that_is_not_a_whole_number_or_a_time_is_refused(client, auth, url):
    response = client.get(url, headers=auth)
    assert response.status_code == 400 and response.json()["error"] in ("invalid_filter", "invalid_input")


def test_a_replay_of_more_seqs_than_allowed_is_refused_repeats_counted(client, auth):
    from controls.replay import REPLAY_LIMIT

    response = post(client, "/api/events/replay", {"seqs": [7] * (REPLAY_LIMIT + 1)}, auth)
    assert response.status_code == 400 and response.json()["field"] == "seqs"
    assert not Event.objects.filter(envelope_id__startswith="replay/").exists()


@pytest.mark.parametrize("binding", ["\u00a0\f", " triage", "tri age", ""])
def test_create_and_rebind_take_a_binding_name_as_the_document_says(client, auth, binding):
    body = {"scope": "acme", "binding": binding, "input": {"type": "notes"}}
    response = post(client, "/api/work", body, auth)
    assert response.status_code == 400 and response.json()["field"] == "binding", response.content
    work = WorkFactory(scope="acme")
    rebind = post(client, f"/api/work/{work.pk}/rebind", {"binding": binding}, auth)
    assert rebind.status_code == 400 and rebind.json()["field"] == "binding", rebind.content
