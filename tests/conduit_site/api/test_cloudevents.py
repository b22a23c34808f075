"""The CloudEvents HTTP binding at ``/api/events`` (binary,
structured with ``data_base64``, batch, the webhook validation handshake), the default scope,
and CloudEvents out (``GET /api/events/{seq}``, ``GET /api/events``), with the official Python
SDK (``cloudevents``) on the other side: what it sends is accepted, what comes back it reads
back equal. ``-k binary`` selects the binary-mode tests."""

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

from causal.models import Event
from routing.models import ApiToken
from tests.routing.factories import (
    DEFAULT_TEST_CONFIG,
    READER_PERMISSIONS,
    api_token_with_secret,
    apply_config,
)

pytestmark = pytest.mark.django_db

EVENTS_URL = "/api/events"
T = datetime(2026, 1, 5, 12, 30, 15, 250000, tzinfo=UTC)


@pytest.fixture
def acme():
    return apply_config()


@pytest.fixture
def auth():
    # Some Events here name their Work (work_id), which needs the send permission too.
    _, secret = api_token_with_secret(
        user__username="alice", user__permissions=(*READER_PERMISSIONS, "worklife.send_input")
    )
    return {"Authorization": f"Bearer {secret}"}


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


def test_binary_sdk_event_is_accepted_and_read_back_equal(client, auth, acme):
    sent = sdk_event({"action": "opened", "number": 42, "repository": {"full_name": "acme/web"}})
    response = send(client, ce_http.to_binary(sent, JSONFormat()), auth)
    assert response.status_code == 201, response.content
    event = Event.objects.get()
    assert (event.envelope_id, event.scope, event.subject) == ("delivery-1", "acme", "pull/42")
    assert event.data == {"action": "opened", "number": 42, "repository": {"full_name": "acme/web"}}
    assert event.extensions == {"comexampletrace": "abc"}
    assert_same(read_back(client, auth, event.seq), sent)


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
    assert received == sent


def test_binary_text_data_is_kept_as_text_with_its_content_type(client, auth, acme):
    sent = sdk_event("<much wow='xml'/>", datacontenttype="text/xml")
    seq = seq_of(send(client, ce_http.to_binary(sent, JSONFormat()), auth))
    event = Event.objects.get(seq=seq)
    assert (event.data, event.binary_data, event.datacontenttype) == ("<much wow='xml'/>", False, "text/xml")
    assert_same(read_back(client, auth, seq), sent)


def test_binary_data_that_is_not_utf8_is_kept_as_base64(client, auth, acme):
    png = b"\x89PNG\r\n\x1a\n\x00\xff\xfe"
    sent = sdk_event(png, datacontenttype="image/png")
    seq = seq_of(send(client, ce_http.to_binary(sent, JSONFormat()), auth))
    event = Event.objects.get(seq=seq)
    assert (event.data, event.binary_data) == ("iVBORw0KGgoA//4=", True)
    body = client.get(f"{EVENTS_URL}/{seq}", headers=auth).json()["event"]
    assert body["data_base64"] == "iVBORw0KGgoA//4=" and "data" not in body
    assert_same(read_back(client, auth, seq), sent)


def test_binary_utf8_text_holding_nul_is_kept_as_base64(client, auth, acme):
    seq = seq_of(binary(client, auth, b"a\x00b", content_type="application/octet-stream", **CE_HEADERS))
    assert Event.objects.get(seq=seq).data == "YQBi"


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


def test_binary_without_content_type_is_json_data_and_empty_body_is_no_data(client, auth, acme):
    seq = seq_of(binary(client, auth, b"", content_type="", **CE_HEADERS))
    event = Event.objects.get(seq=seq)
    assert (event.data, event.datacontenttype) == (None, "application/json")
    assert "data" not in client.get(f"{EVENTS_URL}/{seq}", headers=auth).json()["event"]


def test_binary_content_type_parameters_are_kept_in_datacontenttype(client, auth, acme):
    seq = seq_of(
        binary(client, auth, b'{"a": 1}', content_type="application/json; charset=utf-8", **CE_HEADERS)
    )
    event = Event.objects.get(seq=seq)
    assert (event.data, event.datacontenttype) == ({"a": 1}, "application/json; charset=utf-8")


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


def test_a_body_that_is_not_json_without_ce_headers_is_415_naming_binary_mode(client, auth, acme):
    response = client.post(EVENTS_URL, "hello", content_type="text/plain", headers=auth)
    assert response.status_code == 415
    assert "ce-* headers" in response.json()["message"]
    assert Event.objects.count() == 0


# --- data_base64 and batch --------------------------------------------------------------------


def test_structured_data_base64_from_the_sdk_round_trips(client, auth, acme):
    sent = sdk_event(b"\x00\x01\xfe\xff", datacontenttype="application/octet-stream")
    message = ce_http.to_structured(sent, JSONFormat())
    assert b'"data_base64"' in message.body
    seq = seq_of(send(client, message, auth))
    assert Event.objects.get(seq=seq).binary_data is True
    assert_same(read_back(client, auth, seq), sent)


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


def test_batch_media_type_holds_an_array(client, auth, acme):
    one = {"specversion": "1.0", "id": "s-1", "source": "tests", "type": "chat.message", "scope": "acme"}
    response = client.post(EVENTS_URL, one, content_type="application/cloudevents-batch+json", headers=auth)
    assert response.status_code == 400 and "JSON array" in response.json()["message"]
    assert Event.objects.count() == 0


# --- the webhook validation handshake ----------------------------------------------------------


def test_webhook_validation_answers_the_origin_and_rate_without_a_token(client):
    response = client.options(EVENTS_URL, headers={"WebHook-Request-Origin": "eventemitter.example.com"})
    assert response.status_code == 200
    assert response["WebHook-Allowed-Origin"] == "eventemitter.example.com"
    assert response["WebHook-Allowed-Rate"] == "*"
    assert "POST" in [method.strip() for method in response["Allow"].split(",")]
    rated = client.options(
        EVENTS_URL, headers={"WebHook-Request-Origin": "a.example", "WebHook-Request-Rate": "120"}
    )
    assert rated.status_code == 200 and rated["WebHook-Allowed-Rate"] == "*"


def test_a_plain_options_answers_allow_only(client):
    response = client.options(EVENTS_URL)
    assert response.status_code == 200
    assert response["Allow"] == "GET, POST, OPTIONS"
    assert not response.has_header("WebHook-Allowed-Origin")


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


def test_an_event_without_scope_and_without_default_is_400_saying_how_to_set_one(client, auth, acme):
    response = post_structured(client, without_scope(), auth)
    assert response.status_code == 400
    body = response.json()
    assert body["field"] == "scope"
    assert "--default-scope" in body["message"] and "default_scope:" in body["message"]
    assert Event.objects.count() == 0


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


def test_a_token_default_not_in_the_live_configuration_is_refused_as_an_unknown_scope(client, acme):
    _, secret = api_token_with_secret(default_scope="gone")
    response = post_structured(client, without_scope(), {"Authorization": f"Bearer {secret}"})
    assert response.status_code == 400 and "unknown scope 'gone'" in response.json()["message"]


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


def test_every_attribute_name_out_is_lower_case_alphanumeric(client, auth, acme):
    seq = seq_of(
        post_structured(client, {**without_scope(scope="acme", work_id=3, execution_id=4), "zz9": True}, auth)
    )
    cloudevent = client.get(f"{EVENTS_URL}/{seq}", headers=auth).json()["event"]
    assert all(re.fullmatch(r"[a-z0-9]+", name) for name in cloudevent if name != "data"), cloudevent
    # The SDK validates extension names when it builds the event: it reads it without complaint.
    received = read_back(client, auth, seq)
    assert received.get_extension("zz9") is True and received.get_extension("scope") == "acme"


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


def test_events_list_query_count_does_not_grow_with_history(
    client, auth, acme, django_assert_max_num_queries
):
    for n in range(30):
        post_structured(client, without_scope(id=f"q-{n}", scope="acme"), auth)
    # Token, last use, permissions (2), the page's seqs, its rows, their routes' failures.
    with django_assert_max_num_queries(8):
        assert len(api_listed(client, auth, limit="25")) == 25


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


def test_events_list_needs_view_event(client, acme):
    _, secret = api_token_with_secret(scopes=["accept"])
    response = client.get(EVENTS_URL, headers={"Authorization": f"Bearer {secret}"})
    assert response.status_code == 403
    assert client.get(EVENTS_URL).status_code == 401
