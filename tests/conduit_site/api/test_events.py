"""POST /api/events, GET /api/events/<seq> and the OpenAPI schema."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, resolve, reverse

from causal.models import Event
from conduit_site.api import hooks
from conduit_site.api import urls as urls_api
from tests.causal.factories import EventFactory
from tests.routing.factories import READER_PERMISSIONS, ScopeFactory, api_token_with_secret, apply_config

EVENTS_URL = "/api/events"


def cloud_event(**overrides):
    event = {
        "specversion": "1.0",
        "id": "evt-1",
        "source": "github/acme",
        "type": "github.pull_request.opened",
        "scope": "acme",
        "data": {"number": 7},
    }
    event.update(overrides)
    return {key: value for key, value in event.items() if value is not ...}


@pytest.fixture
def auth():
    """The Authorization header of a fresh token (its user is ``alice``, who may also name a
    Work: ``worklife.send_input``)."""
    _, secret = api_token_with_secret(
        user__username="alice", user__permissions=(*READER_PERMISSIONS, "worklife.send_input")
    )
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def acme():
    """The default test configuration (scopes acme and acme/web), applied through the service."""
    return apply_config()


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
    assert set(schema["paths"]["/hooks/{name}"]) == {"post"}
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
