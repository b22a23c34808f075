"""POST /api/events, GET /api/events/<seq> and the OpenAPI schema."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest
from cloudevents.core.bindings import http as ce_http
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent
from cloudevents.v1 import http as ce_legacy
from cloudevents.v1.conversion import to_binary as legacy_to_binary
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import URLPattern, URLResolver, resolve, reverse

from causal.models import Event
from conduit_site.api import hooks
from conduit_site.api import urls as urls_api
from conduit_site.api.openapi import openapi_schema
from routing.models import ApiToken
from routing.serializers import event_json
from tests.causal.factories import EventFactory
from tests.conduit_site.eventkit import events_command, get_route
from tests.routing.factories import (
    DEFAULT_TEST_CONFIG,
    READER_PERMISSIONS,
    ScopeFactory,
    UserFactory,
    api_token_with_secret,
    apply_config,
)
from tests.routing.routedkit import REFUSALS
from tests.routing.routerkit import cloud_event

EVENTS_URL = "/api/events"


@pytest.fixture
def auth():
    """The Authorization header of a fresh token (its user is ``alice``, who may also name a
    Work: ``worklife.send_input``)."""
    _, secret = api_token_with_secret(
        user__username="alice", user__permissions=(*READER_PERMISSIONS, "worklife.send_input")
    )
    return {"Authorization": f"Bearer {secret}"}


def post(client, body, auth, content_type="application/cloudevents+json"):
    data = body if isinstance(body, bytes | str) else json.dumps(body)
    return client.post(EVENTS_URL, data=data, content_type=content_type, headers=auth)


def assert_refused(response, status, field):
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert body["field"] == field, body
    assert body["message"]
    assert Event.objects.count() == 0
    return body


# --- acceptance ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_api_accept_new_event_is_201_with_the_event(client, auth, acme):
    response = post(client, cloud_event(correlation=["pr:acme#7"], work_id=3), auth)
    assert response.status_code == 201, response.content
    body = response.json()
    event = Event.objects.get()
    cloudevent, conduit = body["event"], body["conduit"]
    assert conduit["seq"] == event.seq
    assert response["Location"] == f"/api/events/{event.seq}"
    assert (cloudevent["id"], cloudevent["source"], cloudevent["type"], cloudevent["scope"]) == (
        "evt-1",
        "github/acme",
        "github.pull_request.opened",
        "acme",
    )
    assert conduit["correlation"] == ["pr:acme#7"]
    assert conduit["work_id"] == 3
    assert conduit["accepted_by"] == "alice"
    assert conduit["route_state"] == "unrouted"
    assert conduit["accepted_at"].endswith("Z")


@pytest.mark.django_db
def test_api_accept_duplicate_is_200_with_the_first_event(client, auth, acme):
    first = post(client, cloud_event(), auth)
    # The same body again, however it is written (key order, whitespace, a null attribute).
    again = post(client, json.dumps(dict(reversed(cloud_event(subject=None).items())), indent=2), auth)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["conduit"]["seq"] == first.json()["conduit"]["seq"]
    assert again.json()["event"]["data"] == {"number": 7}
    assert Event.objects.count() == 1


@pytest.mark.django_db
def test_the_same_id_with_another_body_is_409_with_both_digests(client, auth, acme):
    first = post(client, cloud_event(), auth)
    again = post(client, cloud_event(data={"changed": True}), auth)
    assert (first.status_code, again.status_code) == (201, 409)
    body = again.json()
    assert (body["error"], body["field"], body["seq"]) == (
        "conflicting_duplicate",
        "id",
        first.json()["conduit"]["seq"],
    )
    accepted, offered = body["digests"]["accepted"], body["digests"]["offered"]
    assert accepted.startswith("sha256:") and offered.startswith("sha256:") and accepted != offered
    assert accepted in body["message"] and offered in body["message"]
    assert Event.objects.get().data == {"number": 7}
    # The same body still answers 200, and the digests are stable.
    assert post(client, cloud_event(), auth).status_code == 200
    assert post(client, cloud_event(data={"changed": True}), auth).json()["digests"] == body["digests"]


@pytest.mark.django_db
def test_a_batch_with_a_conflicting_duplicate_is_409_and_stores_nothing(client, auth, acme):
    post(client, cloud_event(), auth)
    batch = [cloud_event(id="new"), cloud_event(type="github.pull_request.closed")]
    response = post(client, batch, auth)
    assert response.status_code == 409
    body = response.json()
    assert body["error"] == "conflicting_duplicate" and [e["index"] for e in body["errors"]] == [1]
    assert Event.objects.count() == 1
    inside = post(client, [cloud_event(id="twin"), cloud_event(id="twin", data={"other": 1})], auth)
    assert inside.status_code == 409 and inside.json()["errors"][0]["index"] == 1
    assert Event.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize("content_type", ["application/cloudevents+json", "application/json; charset=utf-8"])
def test_api_accept_structured_mode_cloudevent_as_is(client, auth, acme, content_type):
    structured = {
        "specversion": "1.0",
        "type": "com.github.pull_request.opened",
        "source": "https://github.com/cloudevents/spec/pull",
        "subject": "123",
        "id": "A234-1234-1234",
        "time": "2018-04-05T17:31:00Z",
        "comexampleextension1": "value",
        "comexampleothervalue": 5,
        "datacontenttype": "text/xml",
        "data": '<much wow="xml"/>',
        "scope": "acme",
    }
    response = post(client, structured, auth, content_type=content_type)
    assert response.status_code == 201, response.content
    # What comes back is the CloudEvent that was sent, extensions flat beside the attributes.
    assert response.json()["event"] == structured
    event = Event.objects.get()
    assert event.extensions == {"comexampleextension1": "value", "comexampleothervalue": 5}
    assert event.data == '<much wow="xml"/>'


@pytest.mark.django_db
def test_api_accept_invalid_json_is_400(client, auth, acme):
    body = assert_refused(post(client, b'{"specversion": "1.0",', auth), 400, None)
    assert body["error"] == "invalid_event"
    assert "invalid JSON" in body["message"]


@pytest.mark.django_db
def test_api_accept_missing_field_is_400_naming_it(client, auth, acme):
    body = assert_refused(post(client, cloud_event(source=...), auth), 400, "source")
    assert body == {"error": "invalid_event", "field": "source", "message": "source is required"}


@pytest.mark.django_db
def test_api_accept_mistyped_field_is_400_naming_it(client, auth, acme):
    assert_refused(post(client, cloud_event(work_id="12"), auth), 400, "work_id")


@pytest.mark.django_db
def test_api_accept_bad_time_is_400_naming_it(client, auth, acme):
    body = assert_refused(post(client, cloud_event(time="5 January 2026"), auth), 400, "time")
    assert "RFC 3339" in body["message"]


@pytest.mark.django_db
def test_api_accept_bad_extension_name_is_400_naming_it(client, auth, acme):
    assert_refused(post(client, cloud_event(myExt="x"), auth), 400, "myExt")


@pytest.mark.django_db
def test_api_accept_unknown_scope_is_400(client, auth, acme):
    body = assert_refused(post(client, cloud_event(scope="acme/unknown"), auth), 400, "scope")
    assert "acme/unknown" in body["message"]


@pytest.mark.django_db
def test_api_accept_without_live_generation_every_scope_is_unknown(client, auth):
    # A candidate generation is not live, whatever scopes it holds.
    ScopeFactory(path="acme", generation__kind="candidate", generation__number=None)
    assert_refused(post(client, cloud_event(), auth), 400, "scope")


@pytest.mark.django_db
def test_r51_api_refuses_core_type_from_external_caller(client, auth, acme):
    assert_refused(post(client, cloud_event(type="core.manual.skip_event"), auth), 400, "type")


@pytest.mark.django_db
def test_r51_api_refuses_core_manual_source_from_external_caller(client, auth, acme):
    assert_refused(post(client, cloud_event(source="core.manual", work_id=1), auth), 400, "source")


@pytest.mark.django_db
def test_api_accept_body_over_the_limit_is_413_before_parsing(client, auth, acme, settings):
    settings.CONDUIT_MAX_EVENT_BYTES = 2048
    # Not even JSON: the size is checked on the raw body first.
    body = assert_refused(post(client, b"{" + b" " * 2048, auth), 413, None)
    assert body["error"] == "event_too_large"
    assert "2048" in body["message"]


@pytest.mark.django_db
def test_api_accept_body_over_djangos_upload_limit_is_413(client, auth, acme, settings):
    settings.CONDUIT_MAX_EVENT_BYTES = 10_000
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100
    body = assert_refused(post(client, cloud_event(data="x" * 200), auth), 413, None)
    assert "DATA_UPLOAD_MAX_MEMORY_SIZE" in body["message"]


@pytest.mark.django_db
def test_api_accept_body_at_the_limit_is_accepted(client, auth, acme, settings):
    event = cloud_event(data={"pad": ""})
    size = len(json.dumps(event).encode())
    settings.CONDUIT_MAX_EVENT_BYTES = size + 100
    event["data"]["pad"] = "x" * 100
    assert len(json.dumps(event).encode()) == settings.CONDUIT_MAX_EVENT_BYTES
    assert post(client, event, auth).status_code == 201


@pytest.mark.django_db
def test_api_accept_non_json_media_type_is_415(client, auth, acme):
    response = post(client, json.dumps(cloud_event()), auth, content_type="text/plain")
    assert response.status_code == 415
    assert response.json()["error"] == "unsupported_media_type"
    assert Event.objects.count() == 0


@pytest.mark.django_db
def test_api_accept_empty_body_is_400(client, auth, acme):
    assert_refused(post(client, b"", auth), 400, None)


@pytest.mark.django_db
def test_api_accept_batch_is_all_or_nothing(client, auth, acme):
    batch = [
        cloud_event(id="a"),
        cloud_event(id="b", correlation="not-a-list"),
        cloud_event(id="c", scope="x"),
    ]
    response = post(client, batch, auth, content_type="application/cloudevents-batch+json")
    body = assert_refused(response, 400, "correlation")
    assert body["index"] == 1
    assert [(e["index"], e["field"]) for e in body["errors"]] == [(1, "correlation")]
    batch[1] = cloud_event(id="b")
    body = assert_refused(post(client, batch, auth), 400, "scope")
    assert body["index"] == 2


@pytest.mark.django_db
def test_api_accept_batch_reports_each_event(client, auth, acme):
    post(client, cloud_event(id="a"), auth)
    response = post(client, [cloud_event(id="a"), cloud_event(id="b")], auth)
    assert response.status_code == 201
    results = response.json()["results"]
    assert [(r["created"], r["event"]["id"]) for r in results] == [(False, "a"), (True, "b")]
    assert [r["conduit"]["seq"] for r in results] == list(Event.objects.values_list("seq", flat=True))
    again = post(client, [cloud_event(id="a"), cloud_event(id="b")], auth)
    assert again.status_code == 200
    assert Event.objects.count() == 2


@pytest.mark.django_db
def test_api_is_csrf_exempt_it_uses_tokens(auth, acme):
    client = Client(enforce_csrf_checks=True)
    assert post(client, cloud_event(), auth).status_code == 201


@pytest.mark.django_db
def test_api_wrong_method_is_405_with_allow(client, auth):
    response = client.put(EVENTS_URL, headers=auth)
    assert response.status_code == 405
    assert response["Allow"] == "GET, POST, OPTIONS"
    assert response.json()["error"] == "method_not_allowed"
    assert client.delete("/api/events/1", headers=auth).status_code == 405


# --- event detail ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_api_event_detail_returns_envelope_targets_ancestry_and_state(client, auth):
    root = EventFactory()
    parent = EventFactory(parent=root, root=root, depth=1)
    event = EventFactory(
        parent=parent,
        root=root,
        depth=2,
        correlation=["k:1"],
        work_id=5,
        execution_id=6,
        extensions={"traceparent": "00-1"},
        unrouted_reason="retrying after handler_failed",
    )
    response = client.get(f"/api/events/{event.seq}", headers=auth)
    assert response.status_code == 200
    cloudevent, body = response.json()["event"], response.json()["conduit"]
    assert body["seq"] == event.seq
    assert (body["parent_seq"], body["root_seq"], body["depth"]) == (parent.seq, root.seq, 2)
    assert (body["correlation"], body["work_id"], body["execution_id"]) == (["k:1"], 5, 6)
    assert cloudevent["traceparent"] == "00-1"
    assert body["route_state"] == "unrouted"
    assert body["unrouted_reason"] == "retrying after handler_failed"
    assert body["accepted_at"] == "2026-01-05T12:00:00Z"
    root_body = client.get(f"/api/events/{root.seq}", headers=auth).json()["conduit"]
    assert (root_body["parent_seq"], root_body["root_seq"], root_body["depth"]) == (None, root.seq, 0)


@pytest.mark.django_db
def test_api_event_detail_unknown_seq_is_404_json(client, auth):
    response = client.get("/api/events/999999", headers=auth)
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


@pytest.mark.django_db
def test_api_event_detail_query_count_is_fixed(client, auth, django_assert_max_num_queries):
    event = EventFactory(parent=EventFactory())
    # Token lookup (joined with its user), last-used update, the permission check (the user's
    # and its groups' permissions: 2), the Event.
    with django_assert_max_num_queries(5):
        assert client.get(f"/api/events/{event.seq}", headers=auth).status_code == 200


# --- OpenAPI ---------------------------------------------------------------------------------


def api_routes(patterns=None, prefix="/api/"):
    """Every (path template, view) of conduit_site.api.urls, walking included URLconfs."""
    for pattern in patterns if patterns is not None else urls_api.urlpatterns:
        route = str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            yield from api_routes(pattern.url_patterns, prefix + route)
        elif isinstance(pattern, URLPattern):
            template = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", prefix + route)
            yield template, pattern.callback


def test_api_every_route_and_method_is_in_the_openapi_schema():
    from conduit_site.api.openapi import openapi_schema

    schema = openapi_schema()
    routes = list(api_routes())
    assert routes, "conduit_site.api.urls has no routes"
    for template, view in routes:
        assert template in schema["paths"], f"{template} is missing from conduit_site/api/openapi/"
        methods = getattr(view, "api_methods", None)
        assert methods, f"{template}: the view is not an api_view"
        for method in methods:
            assert method.lower() in schema["paths"][template], f"{method} {template} is not in the schema"
    # The receivers' route, outside /api/ (a signature, no token), is described too.
    hook = resolve("/hooks/github")
    assert (hook.url_name, hook.func) == ("hook", hooks.receive)
    assert set(schema["paths"]["/hooks/{name}"]) == {method.lower() for method in hooks.receive.api_methods}
    assert set(schema["paths"]) == {template for template, _ in routes} | {"/hooks/{name}"}, (
        "the schema lists routes that do not exist"
    )


def test_api_openapi_schema_references_resolve():
    from conduit_site.api.openapi import openapi_schema

    schema = openapi_schema()
    refs = re.findall(r'"\$ref": "#/components/(\w+)/(\w+)"', json.dumps(schema))
    assert refs
    for section, name in refs:
        assert name in schema["components"][section], f"#/components/{section}/{name} does not exist"


@pytest.mark.django_db
def test_api_every_non_public_route_requires_a_token(client):
    for template, view in api_routes():
        url = re.sub(r"\{\w+\}", "1", template)
        for method in view.api_methods:
            response = client.generic(method, url)
            if view.api_public or method in view.api_public_methods:
                assert response.status_code == 200, url
            else:
                assert response.status_code == 401, f"{method} {url}"
                assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.django_db
def test_api_openapi_json_is_served(client):
    response = client.get(reverse("api-openapi"))
    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"] == "3.1.0"
    assert schema["servers"] == [{"url": "http://testserver"}]
    assert "/api/events" in schema["paths"]


# --- deep JSON is refused before it is parsed -------------------------------------------------


def nested_event_text(levels: int, **overrides) -> str:
    """A CloudEvent as JSON text whose document nests ``levels`` arrays and objects (the
    envelope is the first level, ``data`` the second)."""
    marker = '"__DATA__"'
    text = json.dumps(cloud_event(data="__DATA__", **overrides)).replace(marker, "@")
    data = '{"a":' * (levels - 1) + "1" + "}" * (levels - 1)
    return text.replace("@", data)


@pytest.mark.django_db
@pytest.mark.parametrize("levels", [65, 1_000, 5_000, 10_000])
def test_a_deeply_nested_event_is_refused_and_nothing_stored(client, auth, acme, levels):
    body = assert_refused(post(client, nested_event_text(levels), auth), 400, None)
    assert body["error"] == "invalid_event"
    assert "more than 64 levels deep" in body["message"] and "CONDUIT_MAX_JSON_DEPTH" in body["message"]


@pytest.mark.django_db
def test_an_event_at_the_depth_limit_is_accepted(client, auth, acme):
    response = post(client, nested_event_text(64), auth)
    assert response.status_code == 201, response.content


@pytest.mark.django_db
def test_a_deep_batch_is_refused_and_nothing_stored(client, auth, acme):
    batch = "[" + json.dumps(cloud_event(id="ok")) + "," + nested_event_text(64, id="deep") + "]"
    body = assert_refused(post(client, batch, auth), 400, None)
    assert "64 levels" in body["message"]


@pytest.mark.django_db
def test_the_depth_limit_is_a_setting(client, auth, acme, settings):
    settings.CONDUIT_MAX_JSON_DEPTH = 3
    assert post(client, nested_event_text(3), auth).status_code == 201
    response = post(client, nested_event_text(4, id="evt-2"), auth)
    assert response.status_code == 400 and "more than 3 levels deep" in response.json()["message"]
    assert Event.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize("levels", [65, 5_000, 10_000])
def test_a_deeply_nested_trace_is_400_not_500(client, auth, acme, levels):
    event = nested_event_text(levels - 1)
    response = client.post(
        "/api/trace", '{"event": ' + event + "}", content_type="application/json", headers=auth
    )
    assert response.status_code == 400, response.content
    assert "64 levels" in response.json()["message"]


@pytest.mark.django_db
def test_an_object_with_a_duplicate_key_is_400_and_nothing_stored(client, auth, acme):
    text = json.dumps(cloud_event()).replace('"data": {"number": 7}', '"data": {"number": 7, "number": 8}')
    body = assert_refused(post(client, text, auth), 400, None)
    assert "invalid JSON" in body["message"] and "'number' twice" in body["message"]
    top = '{"id": "a", ' + json.dumps(cloud_event())[1:]
    assert "'id' twice" in assert_refused(post(client, top, auth), 400, None)["message"]


# --- identities the system writes cannot be forged --------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"id": "reroute/evt-1"}, "id"),
        ({"id": "timer/3"}, "id"),
        ({"id": "wait-woken/3"}, "id"),
        ({"id": "work-created/3/abc"}, "id"),
        ({"id": "emit/3/abc"}, "id"),
        ({"source": "conduit.work/3"}, "source"),
        ({"source": "core.timer"}, "source"),
    ],
)
def test_an_api_token_cannot_forge_an_identity_the_system_writes(client, auth, acme, overrides, field):
    body = assert_refused(post(client, cloud_event(**overrides), auth), 400, field)
    assert "reserved" in body["message"]


@pytest.mark.django_db
def test_a_forged_reroute_copy_cannot_block_the_real_one(client, auth, acme, clock):
    from controls import events as controls
    from routing.acceptance.services import event_accept

    original = event_accept(payload=cloud_event(id="bad"), clock=clock).event
    Event.objects.filter(pk=original.pk).update(route_state="failed")
    # The attacker's copy is refused, nothing stored; the operator's reroute then makes the real one.
    forged = post(client, cloud_event(id="reroute/bad"), auth)
    assert forged.status_code == 400 and forged.json()["field"] == "id"
    result = controls.event_reroute(seq=original.seq, user="carol", clock=clock)
    copy = Event.objects.get(seq=result.copy_seq)
    assert (copy.envelope_id, copy.source, copy.accepted_by) == ("reroute/bad", "github/acme", "carol")


# --- cost of one acceptance -------------------------------------------------------------------


@pytest.mark.django_db
def test_an_acceptance_runs_a_fixed_handful_of_queries(client, auth, acme):
    """Token, its user, permissions (one UNION query), live scope, deduplication, the INSERT,
    and the transaction's two ends; PostgreSQL adds the acceptance lock and the race's savepoint.
    Token, user, permissions, scope and deduplication are raw statements written once (their
    ORM building and compiling cost more than running them)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    assert post(client, cloud_event(id="warm"), auth).status_code == 201  # records the token's use
    with CaptureQueriesContext(connection) as queries:
        response = post(client, cloud_event(id="evt-2", correlation=[]), auth)
    assert response.status_code == 201, response.content
    statements = [query["sql"] for query in queries.captured_queries]
    assert sum("auth_permission" in sql for sql in statements) == 1, statements
    assert sum(sql.startswith('INSERT INTO "causal_event"') for sql in statements) == 1, statements
    assert len(statements) == (8 if connection.vendor == "sqlite" else 11), statements


@pytest.mark.django_db
def test_the_accepted_event_is_stored_as_the_orm_would_store_it(clock, acme):
    """The acceptance INSERT is a statement written once from the model (not the ORM's save):
    every field reads back as stored, and equals the instance acceptance returned."""
    from routing.acceptance.services import event_accept

    offered = cloud_event(
        id="every-field",
        subject="pr/7",
        time="2026-11-30T10:00:00Z",
        datacontenttype="application/json",
        data={"number": 7, "labels": ["a", "b"], "nested": {"x": None, "y": 1.5}},
        correlation=["pr:7", "repo:acme"],
        priority=3,
        urgent=True,
    )
    accepted = event_accept(payload=offered, clock=clock, accepted_by="alice", may_address_work=True)
    assert accepted.created
    stored = Event.objects.get(seq=accepted.event.seq)
    for field in Event._meta.concrete_fields:
        assert getattr(stored, field.attname) == getattr(accepted.event, field.attname), field.name
    assert stored.data == offered["data"] and stored.extensions == {"priority": 3, "urgent": True}
    assert stored.correlation == ["pr:7", "repo:acme"] and stored.subject == "pr/7"
    assert stored.time.isoformat() == "2026-11-30T10:00:00+00:00"
    assert (stored.accepted_at, stored.accepted_by, stored.route_state) == (clock(), "alice", "unrouted")
    assert not accepted.event._state.adding
    assert sorted(stored.keys.values_list("key", flat=True)) == ["pr:7", "repo:acme"]
    again = event_accept(payload=offered, clock=clock, accepted_by="alice", may_address_work=True)
    assert (again.created, again.event.seq) == (False, stored.seq)


@pytest.mark.django_db
def test_a_batch_is_stored_in_order_as_the_orm_would_store_it(clock, acme):
    """A batch's multi-row INSERT: the seqs follow the batch's order, each Event reads back
    as the instance acceptance returned, repeats come back as the Event they repeat."""
    from routing.acceptance.services import event_accept, events_accept

    earlier = event_accept(payload=cloud_event(id="earlier"), clock=clock).event
    batch = [
        cloud_event(id=f"b{i}", subject=f"s{i}", data={"i": i}, correlation=[f"pr:{i}"], rank=i)
        for i in range(3)
    ]
    batch.insert(1, cloud_event(id="earlier"))
    batch.append(cloud_event(id="b0", subject="s0", data={"i": 0}, correlation=["pr:0"], rank=0))
    results = events_accept(payloads=batch, clock=clock, accepted_by="alice", may_address_work=True)
    assert [r.created for r in results] == [True, False, True, True, False]
    made = [r.event for r in results if r.created]
    assert [e.envelope_id for e in made] == ["b0", "b1", "b2"]
    assert [e.seq for e in made] == sorted(e.seq for e in made) and made[0].seq > earlier.seq
    assert results[1].event.seq == earlier.seq and results[4].event.seq == made[0].seq
    for event in made:
        stored = Event.objects.get(seq=event.seq)
        for field in Event._meta.concrete_fields:
            assert getattr(stored, field.attname) == getattr(event, field.attname), field.name
        assert list(stored.keys.values_list("key", flat=True)) == event.correlation
    assert Event.objects.get(envelope_id="b2").extensions == {"rank": 2}


# --- naming a Work needs the send permission -----------------------------------------------------


def bearer(**token) -> dict[str, str]:
    _, secret = api_token_with_secret(**token)
    return {"Authorization": f"Bearer {secret}"}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("target", "field"), [({"work_id": 3}, "work_id"), ({"execution_id": 4}, "execution_id")]
)
def test_an_accept_only_sender_naming_a_work_is_refused_403_and_nothing_stored(client, acme, target, field):
    from tests.routing.factories import user_with_role

    operator = user_with_role("operator", username="ops")  # may send input itself…
    refused = [
        bearer(user__username="webhook"),  # accept (and read) only
        bearer(user=operator, scopes=["accept"]),  # …but its token is narrowed to accept
    ]
    for headers in refused:
        body = assert_refused(post(client, cloud_event(**target), headers), 403, field)
        assert body["error"] == "forbidden" and body["permission"] == "worklife.send_input"
        assert f"addressing a Work by {field} needs the permission worklife.send_input" in body["message"]
        # A batch is refused whole, naming the Event at fault.
        batch = [cloud_event(id="plain"), cloud_event(id="addressed", **target)]
        body = assert_refused(post(client, batch, headers, "application/cloudevents-batch+json"), 403, field)
        assert body["index"] == 1
    # Without a Work named, the same senders are accepted; with send, naming one is too.
    assert post(client, cloud_event(id="plain"), refused[1]).status_code == 201
    allowed = bearer(user=operator, scopes=["accept", "send"])
    assert post(client, cloud_event(id="named", **target), allowed).status_code == 201


# --- choosing correlation keys needs the send permission too -------------------------------------


@pytest.mark.django_db
def test_an_accept_only_sender_choosing_correlation_keys_is_refused_403_and_nothing_stored(client, acme):
    """A key the sender chooses would steer its Event into the Work owning that key, whatever its
    route's own key template says: an accept-only sender may not choose one."""
    from tests.routing.factories import user_with_role
    from tests.worklife.factories import CorrelationKeyFactory

    owner = CorrelationKeyFactory(key="thread:b1").work  # the chat route's keys are thread:{data.thread}
    steering = cloud_event(id="steer", type="chat.message", data={"thread": "zz"}, correlation=["thread:b1"])
    operator = user_with_role("operator", username="ops")
    refused = [
        bearer(user__username="webhook"),  # accept (and read) only
        bearer(user=operator, scopes=["accept"]),  # an operator's token narrowed to accept
    ]
    for headers in refused:
        body = assert_refused(post(client, steering, headers), 403, "correlation")
        assert body["error"] == "forbidden" and body["permission"] == "worklife.send_input"
        assert "choosing correlation keys needs the permission worklife.send_input" in body["message"]
        assert "nothing was accepted" in body["message"]
        batch = [cloud_event(id="plain"), steering]
        body = assert_refused(
            post(client, batch, headers, "application/cloudevents-batch+json"), 403, "correlation"
        )
        assert body["index"] == 1
    # An empty list chooses no key; without keys the route's own key template decides.
    plain = cloud_event(id="plain", type="chat.message", data={"thread": "zz"}, correlation=[])
    assert post(client, plain, refused[0]).status_code == 201
    from causal.clock import system_clock
    from tests.routing.routerkit import drain, router

    r = router(system_clock)
    try:
        drain(r)
    finally:
        r.close()
    record = Event.objects.get(envelope_id="plain").route_record
    assert record.keys == ["thread:zz"] and record.work_id != owner.pk


@pytest.mark.django_db
def test_a_sender_that_may_send_input_chooses_correlation_keys(client, acme):
    from tests.routing.factories import user_with_role

    operator = user_with_role("operator", username="ops")
    for index, scopes in enumerate([["accept", "send"], None]):
        headers = bearer(user=operator, scopes=scopes) if scopes else bearer(user=operator)
        response = post(client, cloud_event(id=f"keyed-{index}", correlation=["thread:b1"]), headers)
        assert response.status_code == 201, response.content
        assert response.json()["conduit"]["correlation"] == ["thread:b1"]


# The CloudEvents HTTP binding at ``/api/events`` (binary,
# structured with ``data_base64``, batch, the webhook validation handshake), the default scope,
# and CloudEvents out (``GET /api/events/{seq}``, ``GET /api/events``), with the official Python
# SDK (``cloudevents``) on the other side: what it sends is accepted, what comes back it reads
# back equal. ``-k binary`` selects the binary-mode tests.
EVENTS_URL = "/api/events"
T = datetime(2026, 1, 5, 12, 30, 15, 250000, tzinfo=UTC)


def sdk_event(data=None, **attributes) -> CloudEvent:
    """A CloudEvent as a sender builds it with the SDK (scope acme, one extension)."""
    base = {
        "type": "github.pull_request.opened",
        "source": "https://github.com/acme/web",
        "id": "delivery-1",
        "time": T,
        "subject": "pull/42",
        "scope": "acme",
        "comexampletrace": "abc",
    }
    base.update(attributes)
    return CloudEvent({name: value for name, value in base.items() if value is not ...}, data)


def send(client, message: ce_http.HTTPMessage, auth):
    """POST an SDK message as it is: its headers (``ce-*``, Content-Type) and its body."""
    headers = {name: value for name, value in message.headers.items() if name.lower() != "content-type"}
    content_type = message.headers.get("content-type", "")
    return client.generic(
        "POST", EVENTS_URL, data=message.body, content_type=content_type, headers={**auth, **headers}
    )


def binary(client, auth, body: bytes = b"", content_type: str = "application/json", **headers):
    """A binary-mode POST: ``ce_id="x"`` is the header ``ce-id: x``."""
    ce = {name.replace("_", "-"): value for name, value in headers.items()}
    return client.generic("POST", EVENTS_URL, data=body, content_type=content_type, headers={**auth, **ce})


CE_HEADERS = {
    "ce_specversion": "1.0",
    "ce_id": "b-1",
    "ce_source": "tests/binary",
    "ce_type": "github.pull_request.opened",
    "ce_scope": "acme",
}


def read_back(client, auth, seq: int) -> CloudEvent:
    """The Event ``seq`` as the SDK reads ``GET /api/events/{seq}?format=cloudevent``."""
    response = client.get(f"{EVENTS_URL}/{seq}", {"format": "cloudevent"}, headers=auth)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/cloudevents+json"
    message = ce_http.HTTPMessage(headers={"content-type": response["Content-Type"]}, body=response.content)
    return ce_http.from_structured(message, JSONFormat(), CloudEvent)


def assert_same(received: CloudEvent, sent: CloudEvent) -> None:
    assert received.get_attributes() == sent.get_attributes()
    assert received.get_data() == sent.get_data()


def seq_of(response) -> int:
    assert response.status_code in (200, 201), response.content
    return response.json()["conduit"]["seq"]


# --- binary mode ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_binary_sdk_event_is_accepted_and_read_back_equal(client, auth, acme):
    sent = sdk_event({"action": "opened", "number": 42, "repository": {"full_name": "acme/web"}})
    response = send(client, ce_http.to_binary(sent, JSONFormat()), auth)
    assert response.status_code == 201, response.content
    event = Event.objects.get()
    assert (event.envelope_id, event.scope, event.subject) == ("delivery-1", "acme", "pull/42")
    assert event.data == {"action": "opened", "number": 42, "repository": {"full_name": "acme/web"}}
    assert event.extensions == {"comexampletrace": "abc"}
    assert_same(read_back(client, auth, event.seq), sent)


@pytest.mark.django_db
def test_binary_from_the_legacy_sdk_api_is_accepted_too(client, auth, acme):
    # Its time is kept as a string: times come out in UTC with a "Z", as it is written here.
    attributes = {"type": "chat.message", "source": "slack/T1", "id": "Ev1", "scope": "acme"}
    sent = ce_legacy.CloudEvent({**attributes, "time": "2026-01-05T12:30:15.250000Z"}, {"text": "hi"})
    headers, body = legacy_to_binary(sent)
    content_type = headers.pop("content-type", "application/json")
    response = client.generic(
        "POST", EVENTS_URL, data=body, content_type=content_type, headers={**auth, **headers}
    )
    assert response.status_code == 201, response.content
    got = client.get(f"{EVENTS_URL}/{seq_of(response)}", {"format": "cloudevent"}, headers=auth)
    received = ce_legacy.from_http(dict(got.items()), got.content)
    # The binding maps the request's Content-Type to datacontenttype: it comes back as sent.
    assert received == ce_legacy.CloudEvent(
        {**attributes, "time": "2026-01-05T12:30:15.250000Z", "datacontenttype": content_type}, {"text": "hi"}
    )


@pytest.mark.django_db
def test_binary_text_data_is_kept_as_text_with_its_content_type(client, auth, acme):
    sent = sdk_event("<much wow='xml'/>", datacontenttype="text/xml")
    seq = seq_of(send(client, ce_http.to_binary(sent, JSONFormat()), auth))
    event = Event.objects.get(seq=seq)
    assert (event.data, event.binary_data, event.datacontenttype) == ("<much wow='xml'/>", False, "text/xml")
    assert_same(read_back(client, auth, seq), sent)


@pytest.mark.django_db
def test_binary_data_that_is_not_utf8_is_kept_as_base64(client, auth, acme):
    png = b"\x89PNG\r\n\x1a\n\x00\xff\xfe"
    sent = sdk_event(png, datacontenttype="image/png")
    seq = seq_of(send(client, ce_http.to_binary(sent, JSONFormat()), auth))
    event = Event.objects.get(seq=seq)
    assert (event.data, event.binary_data) == ("iVBORw0KGgoA//4=", True)
    body = client.get(f"{EVENTS_URL}/{seq}", headers=auth).json()["event"]
    assert body["data_base64"] == "iVBORw0KGgoA//4=" and "data" not in body
    assert_same(read_back(client, auth, seq), sent)


@pytest.mark.django_db
def test_binary_utf8_text_holding_nul_is_kept_as_base64(client, auth, acme):
    seq = seq_of(binary(client, auth, b"a\x00b", content_type="application/octet-stream", **CE_HEADERS))
    assert Event.objects.get(seq=seq).data == "YQBi"


@pytest.mark.django_db
def test_binary_header_values_are_percent_decoded(client, auth, acme):
    response = binary(client, auth, b"{}", **CE_HEADERS, ce_subject="caf%C3%A9%20%22x%22%25")
    event = Event.objects.get(seq=seq_of(response))
    assert event.subject == 'café "x"%'
    # UTF-8 sent without percent-encoding (against the binding, but common) is read as UTF-8.
    raw = "résumé".encode().decode("latin-1")
    event = Event.objects.get(
        seq=seq_of(binary(client, auth, b"{}", **{**CE_HEADERS, "ce_id": "b-2"}, ce_subject=raw))
    )
    assert event.subject == "résumé"


@pytest.mark.django_db
def test_binary_without_content_type_is_json_data_and_empty_body_is_no_data(client, auth, acme):
    seq = seq_of(binary(client, auth, b"", content_type="", **CE_HEADERS))
    event = Event.objects.get(seq=seq)
    assert (event.data, event.datacontenttype) == (None, "application/json")
    assert "data" not in client.get(f"{EVENTS_URL}/{seq}", headers=auth).json()["event"]


@pytest.mark.django_db
def test_binary_content_type_parameters_are_kept_in_datacontenttype(client, auth, acme):
    seq = seq_of(
        binary(client, auth, b'{"a": 1}', content_type="application/json; charset=utf-8", **CE_HEADERS)
    )
    event = Event.objects.get(seq=seq)
    assert (event.data, event.datacontenttype) == ({"a": 1}, "application/json; charset=utf-8")


@pytest.mark.django_db
def test_binary_duplicate_is_200_and_conflict_is_409(client, auth, acme):
    first = binary(client, auth, b'{"n": 1}', **CE_HEADERS)
    again = binary(client, auth, b'{"n":1}', **CE_HEADERS)
    conflict = binary(client, auth, b'{"n": 2}', **CE_HEADERS)
    assert (first.status_code, again.status_code, conflict.status_code) == (201, 200, 409)
    # The same Event sent in structured mode is the same Event.
    structured = {
        "specversion": "1.0",
        "id": "b-1",
        "source": "tests/binary",
        "type": "github.pull_request.opened",
    }
    structured |= {"scope": "acme", "data": {"n": 1}}
    same = client.post(EVENTS_URL, structured, content_type="application/cloudevents+json", headers=auth)
    assert same.status_code == 200
    assert Event.objects.count() == 1


def nested(levels: int) -> bytes:
    """JSON text nesting ``levels`` objects."""
    return ('{"a":' * levels + "1" + "}" * levels).encode()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("headers", "body", "content_type", "status", "field"),
    [
        ({"ce_specversion": ...}, b"{}", "application/json", 400, "specversion"),
        ({"ce_specversion": "0.3"}, b"{}", "application/json", 400, "specversion"),
        ({"ce_id": ...}, b"{}", "application/json", 400, "id"),
        ({"ce_id": "x" * 513}, b"{}", "application/json", 400, "id"),
        ({"ce_id": "reroute/7"}, b"{}", "application/json", 400, "id"),
        ({"ce_type": "core.manual.skip_event"}, b"{}", "application/json", 400, "type"),
        ({"ce_source": "core.manual"}, b"{}", "application/json", 400, "source"),
        ({"ce_source": "conduit.work/1"}, b"{}", "application/json", 400, "source"),
        ({"ce_subject": "a%00b"}, b"{}", "application/json", 400, "subject"),
        ({"ce_time": "5 January 2026"}, b"{}", "application/json", 400, "time"),
        ({"ce_time": "2026-01-05T12:00:00"}, b"{}", "application/json", 400, "time"),
        ({"ce_my_ext": "x"}, b"{}", "application/json", 400, "my-ext"),
        ({"ce_traceparent": "a%00"}, b"{}", "application/json", 400, "traceparent"),
        ({"ce_scope": "acme/unknown"}, b"{}", "application/json", 400, "scope"),
        ({"ce_scope": ...}, b"{}", "application/json", 400, "scope"),
        ({"ce_data": "x"}, b"{}", "application/json", 400, "data"),
        ({"ce_datacontenttype": "text/plain"}, b"{}", "application/json", 400, "datacontenttype"),
        ({}, b'{"a": ', "application/json", 400, "data"),
        ({}, b'{"a": 1, "a": 2}', "application/json", 400, "data"),
        ({}, b'{"a": NaN}', "application/vnd.github+json", 400, "data"),
        ({}, b'{"text": "a\\u0000b"}', "application/json", 400, "data.text"),
        ({}, b"\xff\xfe", "application/json", 400, "data"),
        ({}, nested(64), "application/json", 400, "data"),
        ({}, b"x" * 4097, "text/plain", 413, None),
        ({}, b"\xff" * 3500, "application/octet-stream", 413, None),
    ],
)
def test_binary_mode_gets_every_check_structured_mode_gets(
    client, auth, acme, settings, headers, body, content_type, status, field
):
    settings.CONDUIT_MAX_EVENT_BYTES = 4096
    wanted = {name: value for name, value in {**CE_HEADERS, **headers}.items() if value is not ...}
    response = binary(client, auth, body, content_type=content_type, **wanted)
    assert response.status_code == status, response.content
    assert response.json()["field"] == field, response.json()
    assert Event.objects.count() == 0


@pytest.mark.django_db
def test_binary_json_data_is_as_deep_as_structured_data_may_be(client, auth, acme):
    # The Event is the first level: its data may nest one level less than the limit (64).
    assert binary(client, auth, nested(63), **CE_HEADERS).status_code == 201
    structured = {**{k[3:]: v for k, v in CE_HEADERS.items()}, "id": "s-1", "data": "@"}
    text = json.dumps(structured).replace('"@"', nested(63).decode())
    response = client.post(EVENTS_URL, text, content_type="application/cloudevents+json", headers=auth)
    assert response.status_code == 201
    text = json.dumps({**structured, "id": "s-2"}).replace('"@"', nested(64).decode())
    assert (
        client.post(EVENTS_URL, text, content_type="application/cloudevents+json", headers=auth).status_code
        == 400
    )


@pytest.mark.django_db
def test_binary_data_counts_in_its_structured_size(client, auth, acme, settings):
    # Binary data is stored as base64: its Event is a third larger than its body.
    settings.CONDUIT_MAX_EVENT_BYTES = 4096
    response = binary(client, auth, b"\xff" * 3400, content_type="application/octet-stream", **CE_HEADERS)
    assert response.status_code == 413 and response.json()["error"] == "event_too_large"
    assert (
        binary(
            client, auth, b"\xff" * 2000, content_type="application/octet-stream", **CE_HEADERS
        ).status_code
        == 201
    )


@pytest.mark.django_db
def test_structured_mode_ignores_ce_headers(client, auth, acme):
    structured = {
        "specversion": "1.0",
        "id": "s-1",
        "source": "tests",
        "type": "chat.message",
        "scope": "acme",
    }
    response = client.post(
        EVENTS_URL,
        structured,
        content_type="application/cloudevents+json",
        headers={**auth, "ce-id": "other", "ce-scope": "acme/web"},
    )
    event = Event.objects.get(seq=seq_of(response))
    assert (event.envelope_id, event.scope) == ("s-1", "acme")


@pytest.mark.django_db
def test_a_body_that_is_not_json_without_ce_headers_is_415_naming_binary_mode(client, auth, acme):
    response = client.post(EVENTS_URL, "hello", content_type="text/plain", headers=auth)
    assert response.status_code == 415
    assert "ce-* headers" in response.json()["message"]
    assert Event.objects.count() == 0


# --- data_base64 and batch --------------------------------------------------------------------


@pytest.mark.django_db
def test_structured_data_base64_from_the_sdk_round_trips(client, auth, acme):
    sent = sdk_event(b"\x00\x01\xfe\xff", datacontenttype="application/octet-stream")
    message = ce_http.to_structured(sent, JSONFormat())
    assert b'"data_base64"' in message.body
    seq = seq_of(send(client, message, auth))
    assert Event.objects.get(seq=seq).binary_data is True
    assert_same(read_back(client, auth, seq), sent)


@pytest.mark.django_db
def test_batch_from_the_sdk_round_trips(client, auth, acme):
    sent = [
        sdk_event({"n": 1}, id="batch-1"),
        sdk_event("plain text", id="batch-2", datacontenttype="text/plain"),
        sdk_event(b"\xff\x00", id="batch-3", datacontenttype="application/octet-stream", subject=...),
    ]
    body = b"[" + b",".join(JSONFormat().write(event) for event in sent) + b"]"
    response = client.post(EVENTS_URL, body, content_type="application/cloudevents-batch+json", headers=auth)
    assert response.status_code == 201, response.content
    seqs = [result["conduit"]["seq"] for result in response.json()["results"]]
    for seq, event in zip(seqs, sent, strict=True):
        assert_same(read_back(client, auth, seq), event)
    # The list reads back as a CloudEvents batch too.
    listed = client.get(EVENTS_URL, {"format": "cloudevent", "oldest": "true"}, headers=auth)
    assert listed["Content-Type"] == "application/cloudevents-batch+json"
    received = [JSONFormat().read(CloudEvent, json.dumps(item)) for item in listed.json()]
    for got, event in zip(received, sent, strict=True):
        assert_same(got, event)


@pytest.mark.django_db
def test_batch_media_type_holds_an_array(client, auth, acme):
    one = {"specversion": "1.0", "id": "s-1", "source": "tests", "type": "chat.message", "scope": "acme"}
    response = client.post(EVENTS_URL, one, content_type="application/cloudevents-batch+json", headers=auth)
    assert response.status_code == 400 and "JSON array" in response.json()["message"]
    assert Event.objects.count() == 0


# --- the webhook validation handshake ----------------------------------------------------------


@pytest.mark.django_db
def test_webhook_validation_answers_the_origin_and_rate_without_a_token(client, settings):
    response = client.options(EVENTS_URL, headers={"WebHook-Request-Origin": "eventemitter.example.com"})
    assert response.status_code == 200
    assert response["WebHook-Allowed-Origin"] == "eventemitter.example.com"
    # The rate is acceptance's limit, requests a minute.
    assert response["WebHook-Allowed-Rate"] == str(settings.CONDUIT_ACCEPT_RATE_PER_MINUTE) == "6000"
    assert "POST" in [method.strip() for method in response["Allow"].split(",")]
    rated = client.options(
        EVENTS_URL, headers={"WebHook-Request-Origin": "a.example", "WebHook-Request-Rate": "120"}
    )
    assert rated.status_code == 200 and rated["WebHook-Allowed-Rate"] == "6000"
    settings.CONDUIT_ACCEPT_RATE_PER_MINUTE = 0
    unlimited = client.options(EVENTS_URL, headers={"WebHook-Request-Origin": "a.example"})
    assert unlimited["WebHook-Allowed-Rate"] == "*"


@pytest.mark.django_db
def test_a_plain_options_answers_allow_only(client):
    response = client.options(EVENTS_URL)
    assert response.status_code == 200
    assert response["Allow"] == "GET, POST, OPTIONS"
    assert not response.has_header("WebHook-Allowed-Origin")


@pytest.mark.django_db
def test_webhook_validation_refuses_an_origin_that_is_no_host_name(client):
    response = client.options(EVENTS_URL, headers={"WebHook-Request-Origin": "two words"})
    assert response.status_code == 400
    assert response.json()["field"] == "WebHook-Request-Origin"


# --- the default scope -------------------------------------------------------------------------


def without_scope(**overrides):
    event = {"specversion": "1.0", "id": "d-1", "source": "tests", "type": "chat.message", "data": {}}
    return {**event, **overrides}


def post_structured(client, body, auth):
    return client.post(EVENTS_URL, body, content_type="application/cloudevents+json", headers=auth)


DEFAULTED_CONFIG = DEFAULT_TEST_CONFIG.replace("version: 1\n", "version: 1\ndefault_scope: acme\n", 1)


@pytest.mark.django_db
def test_an_event_without_scope_and_without_default_is_400_saying_how_to_set_one(client, auth, acme):
    response = post_structured(client, without_scope(), auth)
    assert response.status_code == 400
    body = response.json()
    assert body["field"] == "scope"
    assert "--default-scope" in body["message"] and "default_scope:" in body["message"]
    assert Event.objects.count() == 0


@pytest.mark.django_db
def test_the_tokens_default_scope_is_taken(client, acme):
    _, secret = api_token_with_secret(default_scope="acme/web")
    auth = {"Authorization": f"Bearer {secret}"}
    event = Event.objects.get(seq=seq_of(post_structured(client, without_scope(), auth)))
    assert event.scope == "acme/web"
    headers = {k: v for k, v in CE_HEADERS.items() if k != "ce_scope"}
    event = Event.objects.get(seq=seq_of(binary(client, auth, b"{}", **headers)))
    assert event.scope == "acme/web"
    response = client.post(
        EVENTS_URL,
        [without_scope(id="d-2"), without_scope(id="d-3", scope="acme")],
        content_type="application/json",
        headers=auth,
    )
    assert [r["event"]["scope"] for r in response.json()["results"]] == ["acme/web", "acme"]


@pytest.mark.django_db
def test_the_configurations_default_scope_is_taken_after_the_tokens(client, auth):
    apply_config(DEFAULTED_CONFIG)
    assert Event.objects.get(seq=seq_of(post_structured(client, without_scope(), auth))).scope == "acme"
    _, secret = api_token_with_secret(default_scope="acme/web")
    token = {"Authorization": f"Bearer {secret}"}
    assert (
        Event.objects.get(seq=seq_of(post_structured(client, without_scope(id="d-2"), token))).scope
        == "acme/web"
    )
    own = post_structured(client, without_scope(id="d-3", scope="acme"), token)
    assert Event.objects.get(seq=seq_of(own)).scope == "acme"


@pytest.mark.django_db
def test_a_token_default_not_in_the_live_configuration_is_refused_as_an_unknown_scope(client, acme):
    _, secret = api_token_with_secret(default_scope="gone")
    response = post_structured(client, without_scope(), {"Authorization": f"Bearer {secret}"})
    assert response.status_code == 400 and "unknown scope 'gone'" in response.json()["message"]


@pytest.mark.django_db
def test_trace_takes_the_same_default_scope(client):
    apply_config(DEFAULTED_CONFIG)
    _, secret = api_token_with_secret(default_scope="acme/web", user__is_superuser=True)
    event = {"source": "tests", "type": "chat.message", "data": {"thread": "t"}}
    traced = client.post(
        "/api/trace",
        {"event": event},
        content_type="application/json",
        headers={"Authorization": f"Bearer {secret}"},
    )
    assert traced.status_code == 200, traced.content
    assert traced.json()["scope"] == "acme/web"


@pytest.mark.django_db
def test_trace_explains_an_event_the_token_could_not_send(client, acme):
    """A trace explains routing, not access: a token that may read Events but not send input
    traces an Event naming a Work, which acceptance refuses from the same token (403)."""
    headers = bearer(user__username="webhook")  # accept and read only
    addressed = {"source": "tests", "type": "x.note", "scope": "acme", "work_id": 3}
    assert post(client, cloud_event(work_id=3), headers).status_code == 403
    traced = client.post("/api/trace", {"event": addressed}, content_type="application/json", headers=headers)
    assert traced.status_code == 200, traced.content
    body = traced.json()
    assert body["effect"] == "conflict" and "work_id 3 names no Work" in body["unrouted_reason"]
    assert not Event.objects.exists()


@pytest.mark.django_db
def test_api_token_create_takes_a_default_scope(acme, capsys):
    from tests.routing.factories import UserFactory

    UserFactory(username="sender")
    call_command("api_token", "create", "sender", "--default-scope", "acme/web")
    assert ApiToken.objects.get(user__username="sender").default_scope == "acme/web"
    call_command("api_token", "list", "--user", "sender")
    assert "default scope acme/web" in capsys.readouterr().out
    with pytest.raises(CommandError, match="default_scope"):
        call_command("api_token", "create", "sender", "--default-scope", "acme//web")


# --- CloudEvents out ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_event_comes_out_as_a_cloudevent_with_conduits_fields_beside_it(client, auth, acme):
    structured = {
        "specversion": "1.0",
        "id": "o-1",
        "source": "tests",
        "type": "chat.message",
        "scope": "acme",
        "correlation": ["thread:1"],
        "work_id": 9,
        "traceparent": "00-abc",
        "data": {"text": "hi"},
    }
    seq = seq_of(post_structured(client, structured, auth))
    body = client.get(f"{EVENTS_URL}/{seq}", headers=auth).json()
    assert set(body) == {"event", "conduit"}
    assert body["event"] == {
        "specversion": "1.0",
        "id": "o-1",
        "source": "tests",
        "type": "chat.message",
        "scope": "acme",
        "traceparent": "00-abc",
        "data": {"text": "hi"},
    }
    assert (body["conduit"]["seq"], body["conduit"]["correlation"], body["conduit"]["work_id"]) == (
        seq,
        ["thread:1"],
        9,
    )
    bare = client.get(f"{EVENTS_URL}/{seq}", {"format": "cloudevent"}, headers=auth)
    assert json.loads(bare.content) == body["event"]


@pytest.mark.django_db
def test_every_attribute_name_out_is_lower_case_alphanumeric(client, auth, acme):
    seq = seq_of(
        post_structured(client, {**without_scope(scope="acme", work_id=3, execution_id=4), "zz9": True}, auth)
    )
    cloudevent = client.get(f"{EVENTS_URL}/{seq}", headers=auth).json()["event"]
    assert all(re.fullmatch(r"[a-z0-9]+", name) for name in cloudevent if name != "data"), cloudevent
    # The SDK validates extension names when it builds the event: it reads it without complaint.
    received = read_back(client, auth, seq)
    assert received.get_extension("zz9") is True and received.get_extension("scope") == "acme"


@pytest.mark.django_db
def test_an_unknown_event_format_is_refused_naming_the_field(client, auth, acme):
    seq = seq_of(post_structured(client, without_scope(scope="acme"), auth))
    response = client.get(f"{EVENTS_URL}/{seq}", {"format": "xml"}, headers=auth)
    assert response.status_code == 400 and response.json()["field"] == "format"


def cli_listed(*args: str) -> list[int]:
    from io import StringIO

    out = StringIO()
    call_command("events", "list", "--json", *args, stdout=out)
    return [item["conduit"]["seq"] for item in json.loads(out.getvalue())["events"]]


def api_listed(client, auth, **params) -> list[int]:
    response = client.get(EVENTS_URL, params, headers=auth)
    assert response.status_code == 200, response.content
    return [item["conduit"]["seq"] for item in response.json()["events"]]


@pytest.mark.django_db
def test_events_list_filters_as_the_cli_lists(client, auth, acme):
    for number, (kind, scope) in enumerate(
        [("github.pull_request.opened", "acme"), ("chat.message", "acme/web"), ("github.push", "acme")] * 2
    ):
        post_structured(
            client, without_scope(id=f"l-{number}", type=kind, scope=scope, subject=f"s{number}"), auth
        )
    cases = [
        ({}, []),
        ({"type": "github.*"}, ["--type", "github.*"]),
        ({"scope": "acme"}, ["--scope", "acme"]),
        ({"scope": "acme", "subtree": "true"}, ["--scope", "acme", "--subtree"]),
        ({"state": "unrouted", "oldest": "true"}, ["--state", "unrouted", "--oldest"]),
        ({"query": "s3"}, ["--query", "s3"]),
        ({"limit": "2"}, ["--limit", "2"]),
        (
            {"since": "2000-01-01T00:00:00Z", "until": "2100-01-01"},
            ["--since", "2000-01-01T00:00:00Z", "--until", "2100-01-01"],
        ),
    ]
    for params, args in cases:
        assert api_listed(client, auth, **params) == cli_listed(*args), params
    everything = api_listed(client, auth)
    assert len(everything) == 6 and everything == sorted(everything, reverse=True)


@pytest.mark.django_db
def test_events_list_pages_by_keyset(client, auth, acme):
    seqs = [seq_of(post_structured(client, without_scope(id=f"p-{n}", scope="acme"), auth)) for n in range(5)]
    first = client.get(EVENTS_URL, {"limit": "2"}, headers=auth).json()
    assert [item["conduit"]["seq"] for item in first["events"]] == seqs[::-1][:2]
    assert first["events"][0]["route"]["state"] == "unrouted"
    second = client.get(EVENTS_URL, {"limit": "2", "after": first["next_after"]}, headers=auth).json()
    assert [item["conduit"]["seq"] for item in second["events"]] == seqs[::-1][2:4]
    bare = client.get(EVENTS_URL, {"limit": "2", "format": "cloudevent", "oldest": "true"}, headers=auth)
    assert [item["id"] for item in bare.json()] == ["p-0", "p-1"]
    assert bare["Conduit-Next-After"] == str(seqs[1])


@pytest.mark.django_db
def test_events_list_query_count_does_not_grow_with_history(
    client, auth, acme, django_assert_max_num_queries
):
    for n in range(30):
        post_structured(client, without_scope(id=f"q-{n}", scope="acme"), auth)
    # Token, last use, permissions (2), the page's seqs, its rows, their routes' failures.
    with django_assert_max_num_queries(8):
        assert len(api_listed(client, auth, limit="25")) == 25


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"after": "abc"}, "after"),
        ({"work": "-1"}, "work"),
        ({"state": "lost"}, "state"),
        ({"since": "last week"}, "since"),
        ({"since": "2026-01-02", "until": "2026-01-01"}, "until"),
        ({"subtree": "maybe"}, "subtree"),
        ({"subtree": "true"}, "subtree"),
        ({"scope": "x" * 256}, "scope"),
        ({"query": "a\x00"}, "query"),
        ({"format": "yaml"}, "format"),
    ],
)
def test_events_list_refuses_bad_filters_naming_them(client, auth, params, field):
    response = client.get(EVENTS_URL, params, headers=auth)
    assert response.status_code == 400, response.content
    assert response.json()["field"] == field


@pytest.mark.django_db
def test_events_list_needs_view_event(client, acme):
    _, secret = api_token_with_secret(scopes=["accept"])
    response = client.get(EVENTS_URL, headers={"Authorization": f"Bearer {secret}"})
    assert response.status_code == 403
    assert client.get(EVENTS_URL).status_code == 401


# --- the route of an Event (R29) ------------------------------------------------------------------
@pytest.fixture
def handlers(test_handlers):
    """The test handlers registered (tests/conftest.py), for the tests here that route."""


@pytest.mark.django_db
@pytest.mark.usefixtures("handlers")
def test_r29_api_route_of_a_started_event_is_its_route_record(client, reader_auth, history, clock):
    response = get_route(client, reader_auth, history.started.seq)
    assert response.status_code == 200
    assert response.json() == {
        "event": history.started.seq,
        "state": "routed",
        "work": history.work_id,
        "route": "pr",
        "binding": "triage",
        "generation": "1",
        "policy": "start",
        "reason": "type github.pull_request.opened matches github.pull_request.*",
        "disposition": "routed",
        "refusals": [],
        "error": "",
        "attempts": 0,
        "decided_at": "2026-01-05T12:00:00Z",
    }


@pytest.mark.django_db
@pytest.mark.usefixtures("handlers")
def test_r28_r29_api_route_of_an_unmatched_event_lists_refusals_in_route_order(client, reader_auth, history):
    body = get_route(client, reader_auth, history.unmatched.seq).json()
    assert (body["state"], body["policy"], body["reason"], body["work"]) == (
        "routed",
        "unmatched",
        "no_match",
        None,
    )
    assert body["refusals"] == REFUSALS


@pytest.mark.django_db
@pytest.mark.usefixtures("handlers")
def test_r16_r29_api_route_of_a_failed_event_has_its_error_and_attempts(client, reader_auth, history):
    body = get_route(client, reader_auth, history.failed.seq).json()
    assert body["state"] == "failed" and body["disposition"] == "failed"
    assert (body["policy"], body["reason"], body["route"]) == ("failed", "handler_invalid", "scripted")
    assert body["error"] == "route scripted: payload has no author"
    assert body["attempts"] == 1


@pytest.mark.django_db
@pytest.mark.usefixtures("handlers")
def test_r13_r29_api_route_of_an_unrouted_event_has_reason_retry_and_failure(client, reader_auth, history):
    body = get_route(client, reader_auth, history.failing.seq).json()
    assert body == {
        "event": history.failing.seq,
        "state": "unrouted",
        "reason": "handler_failed (failure 1): route scripted: upstream is restarting",
        "waiting_on": None,
        "retry_at": "2026-01-05T12:00:02Z",
        "failure": {
            "code": "handler_failed",
            "route": "scripted",
            "error": "route scripted: upstream is restarting",
            "count": 1,
            "first_failed_at": "2026-01-05T12:00:00Z",
            "last_failed_at": "2026-01-05T12:00:00Z",
            "backoff_until": "2026-01-05T12:00:02Z",
            "generation": "1",
        },
    }


@pytest.mark.django_db
@pytest.mark.usefixtures("handlers")
def test_r29_api_route_of_an_event_waiting_behind_another_names_it(client, reader_auth, history):
    body = get_route(client, reader_auth, history.behind.seq).json()
    assert body["state"] == "unrouted"
    assert body["waiting_on"] == history.failing.seq
    assert body["reason"] == f"waiting behind earlier input #{history.failing.seq}"
    assert body["failure"] is None


@pytest.mark.django_db
@pytest.mark.usefixtures("handlers")
def test_r29_api_route_shapes_are_the_ones_the_openapi_schema_describes(client, reader_auth, history):
    schemas = openapi_schema()["components"]["schemas"]
    path = openapi_schema()["paths"]["/api/events/{seq}/route"]["get"]
    assert path["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/EventRoute"
    }
    for event in history.events:
        body = get_route(client, reader_auth, event.seq).json()
        schema = schemas["UnroutedRoute" if body["state"] == "unrouted" else "SettledRoute"]
        assert set(body) == set(schema["properties"]), event
        assert set(schema["required"]) <= set(body)
        for refusal in body.get("refusals", []):
            assert set(refusal) == set(schemas["Refusal"]["properties"])
        if body.get("failure"):
            assert set(body["failure"]) == set(schemas["RouteFailure"]["properties"])


@pytest.mark.django_db
@pytest.mark.usefixtures("handlers")
def test_r29_api_route_of_an_unknown_event_is_a_json_404(client, reader_auth):
    response = get_route(client, reader_auth, 424242)
    assert response.status_code == 404
    assert response.json() == {"error": "not_found", "message": "no Event has seq 424242"}


@pytest.mark.django_db
@pytest.mark.usefixtures("handlers")
def test_r29_api_route_needs_a_token(client, history):
    response = client.get(f"/api/events/{history.started.seq}/route")
    assert response.status_code == 401
    assert response.json()["error"] == "unauthorized"
    assert response["WWW-Authenticate"].startswith("Bearer")
    revoked, secret = api_token_with_secret(user=UserFactory(is_active=False))
    response = client.get(
        f"/api/events/{history.started.seq}/route", headers={"Authorization": f"Bearer {secret}"}
    )
    assert response.status_code == 401


@pytest.mark.django_db
@pytest.mark.usefixtures("handlers")
def test_r29_api_route_allows_only_get(client, reader_auth, history):
    response = client.post(f"/api/events/{history.started.seq}/route", headers=reader_auth)
    assert response.status_code == 405
    assert response["Allow"] == "GET"


@pytest.mark.django_db
@pytest.mark.usefixtures("handlers")
def test_r29_events_get_json_is_the_event_and_the_api_route(client, reader_auth, history):
    for event in history.events:
        data = json.loads(events_command("get", str(event.seq), "--json"))
        assert data == {**event_json(event), "route": get_route(client, reader_auth, event.seq).json()}


# --- the CloudEvents HTTP binding's conformance feature, round trip -------------------------------

# The four scenarios of the conformance feature (http-protocol-binding.feature): binary mode with
# two Content-Types, structured mode with two; each Event has these attributes and this data.
CONFORMANCE_ATTRIBUTES = {
    "id": "1234-1234-1234",
    "specversion": "1.0",
    "type": "com.example.someevent",
    "source": "/mycontext/subcontext",
    "time": "2018-04-05T03:56:24Z",
}
CONFORMANCE_DATA = {"message": "Hello World!"}


def conformance_request(client, auth, mode: str, content_type: str):
    if mode == "binary":
        headers = {f"ce-{name}": value for name, value in CONFORMANCE_ATTRIBUTES.items()}
        body = json.dumps(CONFORMANCE_DATA, indent=4).encode()
        return client.generic(
            "POST",
            EVENTS_URL,
            data=body,
            content_type=content_type,
            headers={**auth, **headers, "ce-scope": "acme"},
        )
    structured = {
        **CONFORMANCE_ATTRIBUTES,
        "datacontenttype": "application/json",
        "data": CONFORMANCE_DATA,
        "scope": "acme",
    }
    return post(client, json.dumps(structured, indent=4), auth, content_type=content_type)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("mode", "content_type", "datacontenttype"),
    [
        ("binary", "application/json", "application/json"),
        ("binary", "application/json; charset=utf-8", "application/json; charset=utf-8"),
        ("structured", "application/cloudevents+json", "application/json"),
        ("structured", "application/cloudevents+json; charset=utf-8", "application/json"),
    ],
)
def test_the_conformance_features_four_scenarios_round_trip_every_attribute(
    client, auth, acme, mode, content_type, datacontenttype
):
    seq = seq_of(conformance_request(client, auth, mode, content_type))
    response = client.get(f"{EVENTS_URL}/{seq}", {"format": "cloudevent"}, headers=auth)
    body = response.json()
    assert body.pop("data") == CONFORMANCE_DATA
    assert body == {**CONFORMANCE_ATTRIBUTES, "datacontenttype": datacontenttype, "scope": "acme"}
    # The official SDK reads the same attributes back.
    received = read_back(client, auth, seq).get_attributes()
    assert received.pop("time").isoformat().replace("+00:00", "Z") == CONFORMANCE_ATTRIBUTES["time"]
    expected = {**CONFORMANCE_ATTRIBUTES, "datacontenttype": datacontenttype, "scope": "acme"}
    del expected["time"]
    assert received == expected


@pytest.mark.django_db
def test_an_event_sent_without_datacontenttype_comes_back_without_one(client, auth, acme):
    seq = seq_of(post(client, cloud_event(), auth))
    body = client.get(f"{EVENTS_URL}/{seq}", {"format": "cloudevent"}, headers=auth).json()
    assert "datacontenttype" not in body


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("accept", "detail_type", "list_type"),
    [
        (
            "application/cloudevents+json",
            "application/cloudevents+json",
            "application/cloudevents-batch+json",
        ),
        (
            "application/cloudevents-batch+json",
            "application/cloudevents+json",
            "application/cloudevents-batch+json",
        ),
        ("application/json", "application/json", "application/json"),
        ("text/html,application/xhtml+xml,*/*;q=0.8", "application/json", "application/json"),
        (
            "application/json;q=0.5, application/cloudevents+json",
            "application/cloudevents+json",
            "application/cloudevents-batch+json",
        ),
    ],
)
def test_accept_chooses_the_bare_cloudevents_or_the_wrapper(
    client, auth, acme, accept, detail_type, list_type
):
    seq = seq_of(post(client, cloud_event(), auth))
    detail = client.get(f"{EVENTS_URL}/{seq}", headers={**auth, "Accept": accept})
    listed = client.get(EVENTS_URL, headers={**auth, "Accept": accept})
    assert (detail.status_code, listed.status_code) == (200, 200)
    assert (detail["Content-Type"], listed["Content-Type"]) == (detail_type, list_type)
    assert "Accept" in detail["Vary"] and "Accept" in listed["Vary"]
    if detail_type == "application/json":
        assert detail.json()["conduit"]["seq"] == seq and listed.json()["events"][0]["conduit"]["seq"] == seq
    else:
        assert detail.json()["id"] == listed.json()[0]["id"]
    # ?format= still wins over Accept.
    assert (
        client.get(f"{EVENTS_URL}/{seq}", {"format": "conduit"}, headers={**auth, "Accept": accept}).json()[
            "conduit"
        ]["seq"]
        == seq
    )
