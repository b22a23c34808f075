"""``POST /hooks/<receiver>`` with real HTTP requests. Each delivery is a raw
body with the headers its sender sends, signed with the real secret the way the sender signs
(``tests/routing/receivers/senders.py``): a good signature stores and routes the Event; a bad,
missing, replayed or body-altered one is a 401 that stores nothing; handshakes and redeliveries
get what the sender expects. ``-k github``, ``-k slack``, ``-k alertmanager`` select a sender."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

import pytest

from causal.models import Event
from conduit_site.api import hooks
from routing.models import ReceiverCount, RouteRecord
from tests.conftest import FakeClock
from tests.routing.factories import apply_config
from tests.routing.receivers import senders
from tests.routing.receivers.senders import (
    ALERTMANAGER_TOKEN,
    BASIC_PASSWORD,
    CLOUDEVENTS_TOKEN,
    GITHUB_SECRET,
    SHOP_SECRET,
    SLACK_SECRET,
    alert,
    alert_group,
    basic,
    bearer,
    body_of,
    github_headers,
    github_pull_request,
    shop_headers,
    slack_headers,
    slack_message,
)
from tests.routing.routerkit import drain, router

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 1, 5, 12, 15, tzinfo=UTC)


@pytest.fixture
def hook_clock(monkeypatch) -> FakeClock:
    """The receivers' trusted clock, injected."""
    fake = FakeClock(NOW)
    monkeypatch.setattr(hooks, "clock", fake)
    return fake


@pytest.fixture
def receivers(monkeypatch, tmp_path, hook_clock, settings):
    """The test configuration applied, with each receiver's secret where it says."""
    settings.CONDUIT_SECRETS_DIR = tmp_path
    for name, value in senders.ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TEST_HOOK_NEVER_SET", raising=False)
    secret_file = tmp_path / "alertmanager-basic"
    secret_file.write_text(BASIC_PASSWORD + "\n")
    return apply_config(senders.CONFIG.format(basic_file=secret_file), hook_clock)


def deliver(client, name: str, body: bytes, headers: dict[str, str]):
    """POST ``body`` to /hooks/``name`` with ``headers``, as the sender does."""
    headers = dict(headers)
    content_type = headers.pop("Content-Type", "application/octet-stream")
    return client.post(f"/hooks/{name}", data=body, content_type=content_type, headers=headers)


def route_everything() -> None:
    r = router(lambda: NOW)
    try:
        drain(r)
    finally:
        r.close()


def refusals(receiver: str) -> dict[str, int]:
    return dict(ReceiverCount.objects.filter(receiver=receiver).values_list("outcome", "count"))


def assert_refused(response, status: int, error: str) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["error"] == error, body
    assert Event.objects.count() == 0
    return body


# --- GitHub ------------------------------------------------------------------------------------


def test_github_signed_delivery_is_stored_mapped_and_routed(client, receivers):
    body = body_of(github_pull_request("opened", 42))

    response = deliver(client, "github", body, github_headers(body))

    assert response.status_code == 201, response.content
    answer = response.json()
    assert answer["status"] == "accepted" and answer["receiver"] == "github"
    event = Event.objects.get()
    assert response["Location"] == f"/api/events/{event.seq}"
    assert (event.envelope_id, event.type, event.source, event.subject, event.scope) == (
        "72d3162e-cc78-11e3-81ab-4c9367dc0958",
        "github.pull_request.opened",
        "https://github.com/acme/web",
        "pull/42",
        "acme",
    )
    assert event.data == json.loads(body)  # the payload as sent
    assert event.accepted_by == "receiver:github"
    route_everything()
    record = RouteRecord.objects.get(event=event)
    assert (record.route, record.policy, record.keys) == ("prs", "start", ["pr:acme/web#42"])


def test_github_form_encoded_delivery_is_accepted(client, receivers):
    from urllib.parse import urlencode

    payload = github_pull_request("synchronize", 7)
    body = urlencode({"payload": json.dumps(payload)}).encode()

    response = deliver(
        client, "github", body, github_headers(body, content_type="application/x-www-form-urlencoded")
    )

    assert response.status_code == 201, response.content
    event = Event.objects.get()
    assert (event.type, event.subject, event.data) == ("github.pull_request.synchronize", "pull/7", payload)


def test_github_redelivery_of_the_same_delivery_id_is_a_200_duplicate(client, receivers):
    body = body_of(github_pull_request())
    first = deliver(client, "github", body, github_headers(body))

    again = deliver(client, "github", body, github_headers(body))

    assert first.status_code == 201 and again.status_code == 200
    assert again.json()["status"] == "duplicate"
    assert again.json()["events"][0]["seq"] == first.json()["events"][0]["seq"]
    assert Event.objects.count() == 1


@pytest.mark.parametrize(
    ("tamper", "error"),
    [
        ("missing", "signature_missing"),
        ("wrong secret", "signature_invalid"),
        ("body altered", "signature_invalid"),
        ("sha1 signature only", "signature_missing"),
        ("garbage", "signature_invalid"),
    ],
)
def test_github_bad_missing_or_altered_signature_is_401_and_stores_nothing(client, receivers, tamper, error):
    body = body_of(github_pull_request())
    headers = github_headers(body)
    if tamper == "missing":
        del headers["X-Hub-Signature-256"]
    elif tamper == "wrong secret":
        headers = github_headers(body, secret="not the secret")
    elif tamper == "body altered":
        body = body.replace(b'"opened"', b'"closed"')
    elif tamper == "sha1 signature only":
        del headers["X-Hub-Signature-256"]
        headers["X-Hub-Signature"] = "sha1=" + "0" * 40
    else:
        headers["X-Hub-Signature-256"] = "sha256=\u00e9\u00e9"

    response = deliver(client, "github", body, headers)

    assert_refused(response, 401, error)
    assert refusals("github") == {error: 1}


def test_github_ping_is_answered_and_stores_nothing(client, receivers):
    body = body_of({"zen": "Design for failure.", "hook_id": 512730861, "hook": {"type": "Repository"}})

    response = deliver(client, "github", body, github_headers(body, event="ping"))

    assert response.status_code == 200
    assert response.json()["status"] == "ping"
    assert Event.objects.count() == 0
    assert refusals("github") == {"handshake": 1}


def test_github_delivery_without_its_event_header_is_400(client, receivers):
    body = body_of(github_pull_request())
    headers = github_headers(body)
    del headers["X-GitHub-Event"]

    body_json = assert_refused(deliver(client, "github", body, headers), 400, "invalid_payload")

    assert body_json["field"] == "X-GitHub-Event"


def test_github_refusal_is_counted_logged_and_never_shows_the_secret(client, receivers, caplog):
    caplog.set_level(logging.WARNING, logger="conduit.receivers")
    body = body_of(github_pull_request())

    response = deliver(client, "github", body, github_headers(body, secret="guess"))

    assert response.status_code == 401
    refused = [r for r in caplog.records if r.name == "conduit.receivers"]
    assert [(r.getMessage(), r.receiver, r.reason) for r in refused] == [
        ("receiver.refused", "github", "signature_invalid")
    ]
    row = ReceiverCount.objects.get(receiver="github")
    expected = github_headers(body)["X-Hub-Signature-256"]
    for text in (response.content.decode(), row.last_message, caplog.text):
        assert GITHUB_SECRET not in text and expected not in text and expected[7:] not in text


# --- Slack -------------------------------------------------------------------------------------


def test_slack_signed_event_callback_is_stored_mapped_and_routed(client, receivers):
    body = body_of(slack_message())

    response = deliver(client, "slack", body, slack_headers(body, timestamp=int(NOW.timestamp())))

    assert response.status_code == 201, response.content
    event = Event.objects.get()
    assert (event.envelope_id, event.type, event.source, event.subject) == (
        "Ev08AB12CD34",
        "slack.message",
        "slack.com/T0ACME001",
        "C024BE91L/1767615300.000200",
    )
    assert event.time == datetime.fromtimestamp(1767615300, UTC)
    assert "token" not in event.data  # the legacy verification token is never stored
    assert event.data["event"]["text"] == "Is the deploy blocked?"
    route_everything()
    assert RouteRecord.objects.get(event=event).keys == ["thread:C024BE91L/1767615300.000200"]


def test_slack_url_verification_challenge_is_answered(client, receivers):
    body = body_of(
        {
            "token": "Jhj5dZrVaK7ZwHHjRyZWjbDl",
            "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
            "type": "url_verification",
        }
    )

    response = deliver(client, "slack", body, slack_headers(body, timestamp=int(NOW.timestamp())))

    assert response.status_code == 200
    assert response.json() == {"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}
    assert Event.objects.count() == 0


def test_slack_unsigned_challenge_is_401(client, receivers):
    body = body_of({"challenge": "abc", "type": "url_verification"})

    assert_refused(
        deliver(client, "slack", body, slack_headers(body, timestamp=int(NOW.timestamp()), secret=None)),
        401,
        "signature_missing",
    )


def test_slack_retry_is_a_200_duplicate(client, receivers, hook_clock):
    body = body_of(slack_message())
    first = deliver(client, "slack", body, slack_headers(body, timestamp=int(NOW.timestamp())))
    hook_clock.advance(60)
    retry = {**slack_headers(body, timestamp=int(hook_clock().timestamp())), "X-Slack-Retry-Num": "1"}
    retry["X-Slack-Retry-Reason"] = "http_timeout"

    again = deliver(client, "slack", body, retry)

    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["status"] == "duplicate"
    assert Event.objects.count() == 1


@pytest.mark.parametrize("age", [301, 3600, -301])
def test_slack_replayed_timestamp_outside_five_minutes_is_401(client, receivers, age):
    body = body_of(slack_message())
    # Signed correctly, but at a time more than five minutes from now.
    headers = slack_headers(body, timestamp=int(NOW.timestamp()) - age)

    assert_refused(deliver(client, "slack", body, headers), 401, "timestamp_stale")
    assert refusals("slack") == {"timestamp_stale": 1}


def test_slack_timestamp_within_five_minutes_is_accepted(client, receivers):
    body = body_of(slack_message())

    response = deliver(client, "slack", body, slack_headers(body, timestamp=int(NOW.timestamp()) - 299))

    assert response.status_code == 201


@pytest.mark.parametrize(
    ("tamper", "error"),
    [
        ("missing signature", "signature_missing"),
        ("missing timestamp", "signature_missing"),
        ("wrong secret", "signature_invalid"),
        ("body altered", "signature_invalid"),
        ("timestamp altered", "signature_invalid"),
        ("timestamp not a number", "signature_invalid"),
    ],
)
def test_slack_bad_missing_or_altered_signature_is_401_and_stores_nothing(client, receivers, tamper, error):
    now = int(NOW.timestamp())
    body = body_of(slack_message())
    headers = slack_headers(body, timestamp=now)
    if tamper == "missing signature":
        del headers["X-Slack-Signature"]
    elif tamper == "missing timestamp":
        del headers["X-Slack-Request-Timestamp"]
    elif tamper == "wrong secret":
        headers = slack_headers(body, timestamp=now, secret=SLACK_SECRET[::-1])
    elif tamper == "body altered":
        body = body.replace(b"blocked", b"unblocked")
    elif tamper == "timestamp altered":
        headers["X-Slack-Request-Timestamp"] = str(now - 10)
    else:
        headers["X-Slack-Request-Timestamp"] = "soon"

    assert_refused(deliver(client, "slack", body, headers), 401, error)


# --- Alertmanager ------------------------------------------------------------------------------


def test_alertmanager_group_of_three_alerts_is_three_events(client, receivers):
    group = alert_group(
        alert("PaymentsErrorRate", "3c7a1e6f0b9d2c48"),
        alert("PaymentsLatency", "9d0e8f7a6b5c4d3e"),
        alert("PaymentsDown", "1a2b3c4d5e6f7a8b", status="resolved"),
    )
    body = body_of(group)

    response = deliver(client, "alertmanager", body, bearer(ALERTMANAGER_TOKEN))

    assert response.status_code == 201, response.content
    events = list(Event.objects.order_by("seq"))
    assert [e.type for e in events] == [
        "alertmanager.alert.firing",
        "alertmanager.alert.firing",
        "alertmanager.alert.resolved",
    ]
    assert [e.subject for e in events] == ["PaymentsErrorRate", "PaymentsLatency", "PaymentsDown"]
    assert {e.source for e in events} == {"http://alertmanager.acme.internal:9093"}
    first = events[0]
    assert first.envelope_id.endswith("/3c7a1e6f0b9d2c48/firing/2026-01-05T12:20:00.123456789Z")
    assert first.data["labels"]["alertname"] == "PaymentsErrorRate"
    assert first.data["groupKey"] == group["groupKey"] and first.data["externalURL"] == group["externalURL"]
    assert events[2].time == datetime(2026, 1, 5, 12, 31, tzinfo=UTC)  # a resolution's time is endsAt
    assert {e.accepted_by for e in events} == {"receiver:alertmanager"}
    assert [item["seq"] for item in response.json()["events"]] == [e.seq for e in events]
    route_everything()
    assert [RouteRecord.objects.get(event=e).route for e in events] == ["alerts"] * 3


def test_alertmanager_firing_then_resolved_are_two_events_and_repeats_are_duplicates(client, receivers):
    firing = body_of(alert_group(alert("PaymentsErrorRate", "3c7a1e6f0b9d2c48")))
    resolved = body_of(
        alert_group(alert("PaymentsErrorRate", "3c7a1e6f0b9d2c48", status="resolved"), status="resolved")
    )
    # The repeat_interval's notification of the same alert, an annotation's value changed since.
    repeated = alert("PaymentsErrorRate", "3c7a1e6f0b9d2c48")
    repeated["annotations"]["summary"] = "5xx rate now at 7%"

    answers = [
        deliver(client, "alertmanager", body, bearer(ALERTMANAGER_TOKEN)).status_code
        for body in (firing, body_of(alert_group(repeated)), resolved, resolved)
    ]

    assert answers == [201, 200, 201, 200]
    assert sorted(Event.objects.values_list("type", flat=True)) == [
        "alertmanager.alert.firing",
        "alertmanager.alert.resolved",
    ]


def test_alertmanager_repeated_group_with_a_new_alert_stores_only_the_new_one(client, receivers):
    first = alert("PaymentsErrorRate", "3c7a1e6f0b9d2c48")
    deliver(client, "alertmanager", body_of(alert_group(first)), bearer(ALERTMANAGER_TOKEN))
    changed = {**first, "annotations": {"summary": "worse"}}

    response = deliver(
        client,
        "alertmanager",
        body_of(alert_group(changed, alert("PaymentsLatency", "9d0e8f7a6b5c4d3e"))),
        bearer(ALERTMANAGER_TOKEN),
    )

    assert response.status_code == 201
    assert [item["created"] for item in response.json()["events"]] == [False, True]
    assert Event.objects.count() == 2


@pytest.mark.parametrize(
    ("headers", "error"),
    [
        ({"Content-Type": "application/json"}, "signature_missing"),
        (bearer("not-the-token"), "signature_invalid"),
        (basic("alertmanager", ALERTMANAGER_TOKEN), "signature_invalid"),
        (
            {"Content-Type": "application/json", "Authorization": f"Token {ALERTMANAGER_TOKEN}"},
            "signature_invalid",
        ),
    ],
)
def test_alertmanager_missing_or_wrong_credentials_are_401(client, receivers, headers, error):
    body = body_of(alert_group(alert("PaymentsErrorRate", "3c7a1e6f0b9d2c48")))

    response = deliver(client, "alertmanager", body, headers)

    assert_refused(response, 401, error)
    assert response["WWW-Authenticate"] == 'Bearer realm="conduit"'


def test_alertmanager_basic_auth_with_a_secret_file(client, receivers):
    body = body_of(alert_group(alert("PaymentsErrorRate", "3c7a1e6f0b9d2c48")))

    wrong_user = deliver(client, "alertmanager-basic", body, basic("prometheus", BASIC_PASSWORD))
    wrong_password = deliver(client, "alertmanager-basic", body, basic("alertmanager", "nope"))
    right = deliver(client, "alertmanager-basic", body, basic("alertmanager", BASIC_PASSWORD))

    assert (wrong_user.status_code, wrong_password.status_code, right.status_code) == (401, 401, 201)
    assert wrong_user["WWW-Authenticate"] == 'Basic realm="conduit"'
    assert Event.objects.get().accepted_by == "receiver:alertmanager-basic"


def test_alertmanager_other_payload_versions_are_400(client, receivers):
    body = body_of({**alert_group(alert("X", "1")), "version": "3"})

    assert_refused(deliver(client, "alertmanager", body, bearer(ALERTMANAGER_TOKEN)), 400, "invalid_payload")


# --- CloudEvents and generic HMAC --------------------------------------------------------------


def test_cloudevents_receiver_takes_the_event_as_sent_in_its_scope(client, receivers):
    event = {
        "specversion": "1.0",
        "id": "A234-1234-1234",
        "source": "/mycontext",
        "type": "com.example.someevent",
    }
    headers = {**bearer(CLOUDEVENTS_TOKEN), "Content-Type": "application/cloudevents+json"}

    plain = deliver(client, "events", body_of(event), headers)
    below = deliver(client, "events", body_of({**event, "id": "2", "scope": "acme/web"}), headers)
    outside = deliver(client, "events", body_of({**event, "id": "3", "scope": "other"}), headers)

    assert (plain.status_code, below.status_code, outside.status_code) == (201, 201, 400)
    assert outside.json()["field"] == "scope"
    assert sorted(Event.objects.values_list("scope", flat=True)) == ["acme", "acme/web"]


def test_a_cloudevents_receiver_answers_the_webhook_validation_handshake_and_stores_nothing(
    client, receivers
):
    asked = client.options(
        "/hooks/events",
        headers={"WebHook-Request-Origin": "eventemitter.example.com", "WebHook-Request-Rate": "120"},
    )
    plain = client.options("/hooks/events")
    other_kind = client.options(
        "/hooks/github", headers={"WebHook-Request-Origin": "eventemitter.example.com"}
    )
    unknown = client.options("/hooks/nobody", headers={"WebHook-Request-Origin": "eventemitter.example.com"})

    assert asked.status_code == 200
    assert (asked["WebHook-Allowed-Origin"], asked["WebHook-Allowed-Rate"]) == (
        "eventemitter.example.com",
        "6000",  # acceptance's rate limit, per receiver, a minute
    )
    assert asked["Allow"] == "POST, OPTIONS"
    assert plain.status_code == 200 and "WebHook-Allowed-Origin" not in plain
    assert (other_kind.status_code, other_kind["Allow"]) == (405, "POST")
    assert "WebHook-Allowed-Origin" not in other_kind
    assert unknown.status_code == 404
    assert Event.objects.count() == 0 and refusals("events") == {}


def test_a_cloudevents_receiver_refuses_keys_its_sender_chose_403_and_stores_nothing(client, receivers):
    """A receiver's sender may not choose correlation keys (they would steer its Event into the
    Work owning them): its Events' keys are its routes'."""
    event = {
        "specversion": "1.0",
        "id": "k-1",
        "source": "/s",
        "type": "com.example.x",
        "correlation": ["pr:acme/web#42"],
    }
    headers = {**bearer(CLOUDEVENTS_TOKEN), "Content-Type": "application/cloudevents+json"}

    one = deliver(client, "events", body_of(event), headers)
    body = assert_refused(one, 403, "forbidden")
    assert body["field"] == "correlation" and body["receiver"] == "events"
    assert "choosing correlation keys needs the permission worklife.send_input" in body["message"]
    batch_headers = {**headers, "Content-Type": "application/cloudevents-batch+json"}
    plain = {**event, "id": "k-0", "correlation": None}
    body = assert_refused(deliver(client, "events", body_of([plain, event]), batch_headers), 403, "forbidden")
    assert body["index"] == 1 and body["field"] == "correlation"
    assert refusals("events") == {"invalid_event": 2}
    assert deliver(client, "events", body_of(plain), headers).status_code == 201


def test_cloudevents_receiver_takes_binary_and_batch_mode(client, receivers):
    binary = deliver(
        client,
        "events",
        b'{"answer": 42}',
        {
            **bearer(CLOUDEVENTS_TOKEN),
            "Content-Type": "application/json",
            "ce-specversion": "1.0",
            "ce-id": "bin-1",
            "ce-source": "/sensor",
            "ce-type": "com.example.reading",
        },
    )
    batch = deliver(
        client,
        "events",
        body_of(
            [
                {"specversion": "1.0", "id": "b-1", "source": "/s", "type": "t.one"},
                {"specversion": "1.0", "id": "b-2", "source": "/s", "type": "t.two", "scope": "acme/web"},
            ]
        ),
        {**bearer(CLOUDEVENTS_TOKEN), "Content-Type": "application/cloudevents-batch+json"},
    )
    unsigned = deliver(
        client,
        "events",
        b"{}",
        {
            "Content-Type": "application/json",
            "ce-specversion": "1.0",
            "ce-id": "x",
            "ce-source": "/s",
            "ce-type": "t",
        },
    )

    assert (binary.status_code, batch.status_code, unsigned.status_code) == (201, 201, 401)
    stored = {e.envelope_id: (e.scope, e.type, e.data) for e in Event.objects.all()}
    assert stored == {
        "bin-1": ("acme", "com.example.reading", {"answer": 42}),
        "b-1": ("acme", "t.one", None),
        "b-2": ("acme/web", "t.two", None),
    }


def test_generic_hmac_receiver_maps_with_its_templates(client, receivers):
    body = body_of({"id": 820982911946154508, "email": "jon@example.com", "total_price": "409.94"})

    response = deliver(client, "shop", body, shop_headers(body))
    altered = deliver(client, "shop", body + b" ", shop_headers(body, webhook_id="other"))

    assert (response.status_code, altered.status_code) == (201, 401)
    event = Event.objects.get()
    assert (event.envelope_id, event.type, event.source, event.subject) == (
        "b54557e4",
        "shop.orders/create",
        "/hooks/shop",
        "820982911946154508",
    )


def test_generic_hmac_template_needing_a_missing_field_is_400(client, receivers):
    body = body_of({"email": "jon@example.com"})

    refused = assert_refused(deliver(client, "shop", body, shop_headers(body)), 400, "invalid_payload")

    assert "needs data.id, which is missing" in refused["message"]
    assert SHOP_SECRET not in refused["message"]


# --- every receiver --------------------------------------------------------------------------------


def test_an_unknown_receiver_is_404_and_other_methods_405(client, receivers):
    assert client.post("/hooks/nobody", data=b"{}", content_type="application/json").status_code == 404
    assert client.post("/hooks/a/b", data=b"{}", content_type="application/json").status_code == 404
    response = client.get("/hooks/github")
    assert (response.status_code, response["Allow"]) == (405, "POST, OPTIONS")


def test_a_receiver_whose_secret_is_unavailable_answers_503_naming_no_variable(client, receivers, caplog):
    body = body_of(github_pull_request())

    with caplog.at_level(logging.WARNING, logger="conduit.receivers"):
        refused = assert_refused(
            deliver(client, "unset", body, github_headers(body)), 503, "secret_unavailable"
        )

    # Whoever posts learns only that the receiver is not ready; where the secret lives goes to
    # the log and to the operators (the receiver's counted refusal, shown on the Receivers page).
    assert "not ready" in refused["message"]
    assert "TEST_HOOK_NEVER_SET" not in json.dumps(refused)
    assert [record.detail for record in caplog.records if record.msg == "receiver.refused"] == [
        "the receiver's secret is unavailable to the server: the environment variable TEST_HOOK_NEVER_SET is not set"
    ]
    counted = ReceiverCount.objects.get(receiver="unset", outcome="secret_unavailable")
    assert "TEST_HOOK_NEVER_SET is not set" in counted.last_message


def test_a_delivery_over_the_size_limit_is_413(client, receivers, settings):
    settings.CONDUIT_MAX_EVENT_BYTES = 200
    body = body_of(github_pull_request())

    assert_refused(deliver(client, "github", body, github_headers(body)), 413, "event_too_large")
    assert refusals("github") == {"event_too_large": 1}


def test_a_media_type_the_sender_never_uses_is_415(client, receivers):
    body = body_of(slack_message())
    headers = {**slack_headers(body, timestamp=int(NOW.timestamp())), "Content-Type": "text/plain"}

    assert_refused(deliver(client, "slack", body, headers), 415, "unsupported_media_type")


def test_receivers_need_no_session_csrf_or_token(receivers):
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    body = body_of(github_pull_request())

    assert deliver(strict, "github", body, github_headers(body)).status_code == 201


def test_a_body_nested_as_deep_as_an_event_may_be_is_400_before_it_is_parsed(client, receivers, settings):
    """Its data would sit one level below the envelope: the body may nest one level less."""
    settings.CONDUIT_MAX_JSON_DEPTH = 5
    fits = body_of({"id": 1, "a": {"b": {"c": {"d": 1}}}})  # 4 levels: the Event holds 5
    too_deep = body_of({"id": 2, "a": {"b": {"c": {"d": {"e": 1}}}}})  # 5 levels: the Event would hold 6

    refused = deliver(client, "shop", too_deep, shop_headers(too_deep))
    accepted = deliver(client, "shop", fits, shop_headers(fits))

    assert (refused.status_code, refused.json()["error"], accepted.status_code) == (
        400,
        "invalid_payload",
        201,
    )
    assert "more than 4 levels deep" in refused.json()["message"]
