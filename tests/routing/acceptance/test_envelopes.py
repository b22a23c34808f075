"""Envelope parsing and validation (routing.acceptance.envelopes) and the acceptance service
(routing.acceptance.services.event_accept / events_accept)."""

from __future__ import annotations

import json
import random
import threading
from datetime import UTC, datetime

import pytest
from django.db import connections

from causal.models import Event, EventKey
from routing.acceptance.envelopes import (
    BatchInvalid,
    EnvelopeInvalid,
    EventTooLarge,
    check_text_depth,
    check_value_depth,
    parse_envelope,
    parse_json,
    read_documents,
)
from routing.acceptance.services import event_accept, events_accept
from tests.routing.factories import apply_config, live_scopes
from tests.routing.routerkit import cloud_event


def refused(obj, field, *, trusted=False):
    with pytest.raises(EnvelopeInvalid) as info:
        parse_envelope(obj, trusted=trusted)
    assert info.value.field == field, info.value.details()
    return info.value


# --- parse_envelope: the envelope ------------------------------------------------------------


def test_ingress_parses_every_cloudevents_attribute_and_router_field():
    envelope = parse_envelope(
        cloud_event(
            subject="pr/7",
            time="2026-01-05T13:30:00.250+01:00",
            datacontenttype="application/vnd.github+json",
            dataschema="https://example.com/schema",
            correlation=["pr:acme#7", "repo:acme", "pr:acme#7"],
            work_id=12,
            execution_id=34,
            traceparent="00-abc-def-01",
            priority=3,
            urgent=True,
        )
    )
    assert envelope.id == "evt-1"
    assert envelope.source == "github/acme"
    assert envelope.type == "github.pull_request.opened"
    assert envelope.subject == "pr/7"
    assert envelope.time == datetime(2026, 1, 5, 12, 30, 0, 250000, tzinfo=UTC)
    assert envelope.time.tzinfo is UTC
    assert envelope.datacontenttype == "application/vnd.github+json"
    assert envelope.data == {"number": 7}
    assert envelope.scope == "acme"
    # Duplicate keys name one target; order is kept.
    assert envelope.correlation == ("pr:acme#7", "repo:acme")
    assert envelope.work_id == 12
    assert envelope.execution_id == 34
    assert envelope.extensions == {
        "dataschema": "https://example.com/schema",
        "traceparent": "00-abc-def-01",
        "priority": 3,
        "urgent": True,
    }


def test_ingress_null_optional_attributes_are_absent():
    envelope = parse_envelope(cloud_event(subject=None, time=None, datacontenttype=None, correlation=None))
    assert envelope.subject == ""
    assert envelope.time is None
    assert envelope.datacontenttype == "application/json"
    assert envelope.correlation == ()


@pytest.mark.parametrize("field", ["specversion", "id", "source", "type", "scope"])
def test_ingress_required_attribute_missing_is_named(field):
    error = refused(cloud_event(**{field: ...}), field)
    assert "required" in error.message


@pytest.mark.parametrize("field", ["specversion", "id", "source", "type", "scope"])
def test_ingress_required_attribute_null_is_missing(field):
    refused(cloud_event(**{field: None}), field)


@pytest.mark.parametrize("field", ["id", "source", "type", "scope", "subject", "datacontenttype"])
def test_ingress_mistyped_string_attribute_is_named(field):
    error = refused(cloud_event(**{field: 5}), field)
    assert "must be a string" in error.message


@pytest.mark.parametrize("field", ["id", "source", "type", "scope"])
def test_ingress_empty_required_string_is_named(field):
    refused(cloud_event(**{field: ""}), field)


def test_ingress_only_specversion_1_0():
    error = refused(cloud_event(specversion="0.3"), "specversion")
    assert "1.0" in error.message


@pytest.mark.parametrize(
    "value",
    [
        "2026-01-05",
        "2026-01-05T12:00:00",
        "yesterday",
        "2026-01-05T25:00:00Z",
        "2026-02-30T12:00:00Z",
        1767614400,
    ],
)
def test_ingress_time_must_be_rfc3339(value):
    error = refused(cloud_event(time=value), "time")
    assert "RFC 3339" in error.message or "date" in error.message


@pytest.mark.parametrize(
    "value", ["2026-01-05T12:00:00Z", "2026-01-05t12:00:00z", "2026-01-05T12:00:00.123456789-05:00"]
)
def test_ingress_time_rfc3339_variants_become_aware_utc(value):
    assert parse_envelope(cloud_event(time=value)).time.utcoffset().total_seconds() == 0


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("pr:1", "correlation"),
        ([1], "correlation[0]"),
        (["ok", ""], "correlation[1]"),
        (["x" * 513], "correlation[0]"),
    ],
)
def test_ingress_correlation_must_be_a_list_of_strings(value, field):
    refused(cloud_event(correlation=value), field)


@pytest.mark.parametrize("field", ["work_id", "execution_id"])
@pytest.mark.parametrize("value", ["12", 1.5, True, 0, -3, 2**63])
def test_ingress_target_ids_must_be_positive_integers(field, value):
    refused(cloud_event(**{field: value}), field)


@pytest.mark.parametrize("name", ["Trace", "my_ext", "my-ext", "ünï", "a" * 21])
def test_ingress_extension_names_are_lowercase_alphanumerics(name):
    error = refused(cloud_event(**{name: "x"}), name)
    assert "a-z" in error.message


@pytest.mark.parametrize("value", [{"nested": 1}, [1, 2], 1.5, 2**31])
def test_ingress_extension_values_are_cloudevents_scalars(value):
    refused(cloud_event(ext=value), "ext")


def test_data_base64_is_kept_as_canonical_base64_binary_data():
    envelope = parse_envelope(cloud_event(data=..., data_base64="AP8Q", datacontenttype="image/png"))
    assert (envelope.data, envelope.binary_data, envelope.datacontenttype) == ("AP8Q", True, "image/png")
    # A null data beside it is an absent one (the JSON format), and empty data is data.
    assert parse_envelope(cloud_event(data=None, data_base64="")).binary_data is True
    assert parse_envelope(cloud_event()).binary_data is False


@pytest.mark.parametrize("value", ["not base64!", "aGVsbG8", "aGVs\nbG8=", 12, ["aGVsbG8="]])
def test_data_base64_that_is_not_base64_text_is_refused(value):
    assert "base64" in refused(cloud_event(data=..., data_base64=value), "data_base64").message


def test_data_and_data_base64_together_are_refused():
    error = refused(cloud_event(data={"a": 1}, data_base64="aGVsbG8="), "data_base64")
    assert "not both" in error.message


def test_an_event_without_scope_takes_the_default_its_own_first():
    assert parse_envelope(cloud_event(scope=...), default_scope="acme/web").scope == "acme/web"
    assert parse_envelope(cloud_event(scope=None), default_scope="acme/web").scope == "acme/web"
    assert parse_envelope(cloud_event(scope="acme"), default_scope="acme/web").scope == "acme"
    # The default is checked as a sent scope is.
    with pytest.raises(EnvelopeInvalid) as info:
        parse_envelope(cloud_event(scope=...), default_scope="a" * 300)
    assert info.value.field == "scope"


def test_without_scope_or_default_the_refusal_says_how_to_set_one():
    error = refused(cloud_event(scope=...), "scope")
    assert "api_token create USER --default-scope PATH" in error.message
    assert "default_scope: PATH" in error.message


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"text": "a\x00b"}, "data.text"),
        ({"list": [1, float("inf")]}, "data.list[1]"),
        ({"k\x00": 1}, "data.k\x00"),
        ("\ud800", "data"),
    ],
)
def test_ingress_data_no_backend_can_store_is_refused(data, field):
    refused(cloud_event(data=data), field)


def test_ingress_overlong_attribute_is_refused_naming_the_limit():
    error = refused(cloud_event(type="t" * 256), "type")
    assert "255" in error.message


@pytest.mark.parametrize("obj", [[], "event", 5, None])
def test_ingress_an_event_must_be_an_object(obj):
    refused(obj, None)


# --- reserved core families (R51) ------------------------------------------------------------


@pytest.mark.parametrize("event_type", ["core", "core.manual.skip_event", "core.work.created"])
def test_r51_external_caller_cannot_send_core_types(event_type):
    refused(cloud_event(type=event_type), "type")


@pytest.mark.parametrize("source", ["core.manual", "core", "core.router"])
def test_r51_external_caller_cannot_use_core_sources(source):
    refused(cloud_event(source=source), "source")


def test_r51_trusted_core_code_may_use_core_families():
    envelope = parse_envelope(cloud_event(source="core.manual", type="core.manual.skip_event"), trusted=True)
    assert envelope.type == "core.manual.skip_event"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("type", "CORE.manual.skip_event"),
        ("type", "Core"),
        ("source", "Core.Manual"),
        ("id", "Reroute/gh-1"),
        ("id", "TIMER/7"),
        ("id", "Emit/1/2/3"),
        ("source", "Conduit.Work/1"),
    ],
)
def test_reserved_identities_are_refused_in_any_case(field, value):
    refused(cloud_event(**{field: value}), field)


def test_r51_core_lookalikes_are_not_reserved():
    assert (
        parse_envelope(cloud_event(type="corebank.payment", source="core-banking")).type == "corebank.payment"
    )


# --- documents -------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", [b"{", b'{"a": NaN}', b"\xff\xfe{", b'{"a": 1} x'])
def test_ingress_invalid_json_is_refused_without_a_field(raw):
    with pytest.raises(EnvelopeInvalid) as info:
        parse_json(raw)
    assert info.value.field is None
    assert "JSON" in info.value.message or "UTF-8" in info.value.message


def test_ingress_reads_an_object_an_array_or_json_lines():
    one, batch = read_documents(b'{"id": "1"}')
    assert ([d.obj for d in one], batch) == ([{"id": "1"}], False)
    many, batch = read_documents(b'[{"id": "1"}, {"id": "2"}]')
    assert ([d.label for d in many], batch) == (["[0]", "[1]"], True)
    lines, batch = read_documents(b'{"id": "1"}\n\n{"id": "2"}\n')
    assert ([d.obj["id"] for d in lines], [d.label for d in lines], batch) == (
        ["1", "2"],
        ["line 1", "line 3"],
        True,
    )


def test_ingress_json_lines_error_names_the_line():
    with pytest.raises(EnvelopeInvalid) as info:
        read_documents(b'{"id": "1"}\n{"id": \n')
    assert info.value.message.startswith("line 2:")


@pytest.mark.parametrize("raw", [b"", b"  \n", b"[]"])
def test_ingress_empty_input_is_refused(raw):
    with pytest.raises(EnvelopeInvalid):
        read_documents(raw)


# --- the acceptance service ------------------------------------------------------------------


@pytest.mark.django_db
def test_event_accept_stores_the_envelope_and_its_keys(clock):
    live_scopes("acme")
    accepted = event_accept(
        payload=cloud_event(correlation=["pr:acme#7"], traceparent="00-1"),
        clock=clock,
        accepted_by="alice",
        may_address_work=True,
    )
    assert accepted.created
    event = Event.objects.get(seq=accepted.event.seq)
    assert (event.envelope_id, event.source, event.scope) == ("evt-1", "github/acme", "acme")
    assert event.extensions == {"traceparent": "00-1"}
    assert event.accepted_at == clock()
    assert event.accepted_by == "alice"
    assert list(EventKey.objects.filter(event=event).values_list("key", flat=True)) == ["pr:acme#7"]


@pytest.mark.django_db
def test_event_accept_same_source_and_id_returns_the_first_event(clock):
    live_scopes("acme")
    first = event_accept(payload=cloud_event(), clock=clock)
    again = event_accept(payload=cloud_event(), clock=clock)
    assert not again.created
    assert again.event.seq == first.event.seq
    assert again.event.data == {"number": 7}
    assert Event.objects.count() == 1


@pytest.mark.django_db
def test_event_accept_same_source_and_id_with_another_body_is_a_conflict(clock):
    from routing.acceptance.envelopes import EventConflict

    live_scopes("acme")
    first = event_accept(payload=cloud_event(time="2026-01-05T13:00:00+01:00"), clock=clock)
    # The same instant written another way is the same body.
    assert not event_accept(payload=cloud_event(time="2026-01-05T12:00:00Z"), clock=clock).created
    with pytest.raises(EventConflict) as info:
        event_accept(payload=cloud_event(data={"different": True}), clock=clock)
    assert info.value.seq == first.event.seq and info.value.field == "id"
    assert info.value.digests["accepted"] != info.value.digests["offered"]
    assert Event.objects.count() == 1


@pytest.mark.django_db
def test_event_accept_unknown_scope_is_refused(clock):
    live_scopes("acme")
    with pytest.raises(EnvelopeInvalid) as info:
        event_accept(payload=cloud_event(scope="acme/web"), clock=clock)
    assert info.value.field == "scope"
    assert "acme/web" in info.value.message
    assert Event.objects.count() == 0


@pytest.mark.django_db
def test_event_accept_without_a_live_generation_every_scope_is_unknown(clock):
    with pytest.raises(EnvelopeInvalid) as info:
        event_accept(payload=cloud_event(), clock=clock)
    assert info.value.field == "scope"
    assert "no configuration" in info.value.message
    assert Event.objects.count() == 0


@pytest.mark.django_db
def test_event_accept_only_the_newest_applied_generation_is_live(clock):
    live_scopes("acme")
    live_scopes("other")
    with pytest.raises(EnvelopeInvalid):
        event_accept(payload=cloud_event(scope="acme"), clock=clock)
    assert event_accept(payload=cloud_event(scope="other"), clock=clock).created


@pytest.mark.django_db
def test_event_accept_scopes_follow_the_applied_configuration(clock):
    apply_config()
    assert event_accept(payload=cloud_event(id="w1", scope="acme/web"), clock=clock).created
    apply_config("version: 1\nscopes:\n  - path: acme\n")
    with pytest.raises(EnvelopeInvalid) as info:
        event_accept(payload=cloud_event(id="w2", scope="acme/web"), clock=clock)
    assert info.value.field == "scope"
    assert "generation 2" in info.value.message
    # A candidate is never live.
    apply_config(candidate=True)
    with pytest.raises(EnvelopeInvalid):
        event_accept(payload=cloud_event(id="w3", scope="acme/web"), clock=clock)
    assert Event.objects.count() == 1


@pytest.mark.django_db
def test_event_accept_a_retry_is_acknowledged_after_its_scope_left_the_configuration(clock):
    live_scopes("acme")
    first = event_accept(payload=cloud_event(), clock=clock)
    live_scopes("other")
    again = event_accept(payload=cloud_event(), clock=clock)
    assert (again.created, again.event.seq) == (False, first.event.seq)


@pytest.mark.django_db
def test_event_accept_refuses_an_event_over_the_size_limit(clock, settings):
    live_scopes("acme")
    settings.CONDUIT_MAX_EVENT_BYTES = 1024
    with pytest.raises(EventTooLarge):
        event_accept(payload=cloud_event(data={"blob": "x" * 1024}), clock=clock)
    assert Event.objects.count() == 0


@pytest.mark.django_db
def test_event_accept_trusted_core_event(clock):
    live_scopes("acme")
    accepted = event_accept(
        payload=cloud_event(source="core.manual", type="core.manual.skip_event"), clock=clock, trusted=True
    )
    assert accepted.event.type == "core.manual.skip_event"


@pytest.mark.django_db
def test_events_accept_batch_is_all_or_nothing_and_lists_every_refusal(clock):
    live_scopes("acme")
    batch = [
        cloud_event(id="a"),
        cloud_event(id="b", time="noon"),
        cloud_event(id="c"),
        cloud_event(id="d", scope="nowhere"),
        cloud_event(id="e", type="core.x"),
    ]
    with pytest.raises(BatchInvalid) as info:
        events_accept(payloads=batch, clock=clock)
    assert [(e.index, e.field) for e in info.value.errors] == [(1, "time"), (4, "type")]
    assert Event.objects.count() == 0
    # Once the shape is right, the scope check refuses the whole batch too.
    batch[1], batch[4] = cloud_event(id="b"), cloud_event(id="e")
    with pytest.raises(BatchInvalid) as info:
        events_accept(payloads=batch, clock=clock)
    assert [(e.index, e.field) for e in info.value.errors] == [(3, "scope")]
    assert Event.objects.count() == 0


@pytest.mark.django_db
def test_events_accept_batch_keeps_order_and_reports_duplicates(clock):
    live_scopes("acme")
    event_accept(payload=cloud_event(id="old"), clock=clock)
    results = events_accept(
        payloads=[cloud_event(id="n1"), cloud_event(id="old"), cloud_event(id="n2"), cloud_event(id="n1")],
        clock=clock,
    )
    assert [r.created for r in results] == [True, False, True, False]
    assert results[0].event.seq < results[2].event.seq
    assert results[3].event.seq == results[0].event.seq
    assert Event.objects.count() == 3


@pytest.mark.django_db(transaction=True)
def test_events_accept_batch_commits_in_one_transaction(clock, monkeypatch):
    """A failure while storing the batch (here: its key index, written after the Events)
    leaves none of the batch stored."""
    live_scopes("acme")

    def disk_full(*args, **kwargs):
        raise RuntimeError("the disk is full")

    payloads = [cloud_event(id=str(i), correlation=[f"k{i}"]) for i in range(4)]
    monkeypatch.setattr(EventKey.objects, "bulk_create", disk_full)
    with pytest.raises(RuntimeError):
        events_accept(payloads=payloads, clock=clock, may_address_work=True)
    assert Event.objects.count() == 0
    monkeypatch.undo()
    results = events_accept(payloads=payloads, clock=clock, may_address_work=True)
    assert [r.created for r in results] == [True] * 4
    assert Event.objects.count() == 4
    assert EventKey.objects.count() == 4


@pytest.mark.django_db(transaction=True)
def test_event_accept_concurrent_duplicates_store_one_event(clock):
    """Two callers offering the same (source, id) at once: one Event, one created answer."""
    live_scopes("acme")
    barrier = threading.Barrier(4)
    answers: list[tuple[bool, int]] = []
    failures: list[BaseException] = []

    def offer() -> None:
        try:
            barrier.wait(timeout=10)
            accepted = event_accept(payload=cloud_event(id="same"), clock=clock)
            answers.append((accepted.created, accepted.event.seq))
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            failures.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=offer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not failures, failures
    assert sorted(created for created, _ in answers) == [False, False, False, True]
    assert len({seq for _, seq in answers}) == 1
    assert Event.objects.count() == 1


# --- the depth limit --------------------------------------------------------------------------


def test_the_depth_scan_ignores_brackets_inside_strings(settings):
    settings.CONDUIT_MAX_JSON_DEPTH = 2
    text = '{"a": {"b": "[[[[{{{{\\"]]]"}}'
    assert parse_json(text) == {"a": {"b": '[[[[{{{{"]]]'}}
    with pytest.raises(EnvelopeInvalid, match="more than 2 levels deep"):
        parse_json('{"a": {"b": ["x"]}}')


def _nested_documents(seed: int, count: int) -> list[str]:
    """JSON texts of mixed nesting whose strings hold brackets, quotes and backslashes."""
    rng = random.Random(seed)
    texts = []

    def value(depth: int):
        roll = rng.random()
        if depth > 7 or roll < 0.3:
            return rng.choice(["[", "}", '\\"]', "x{[", "\\", 1, None, "]]]", '"{'])
        if roll < 0.65:
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        return {rng.choice(["a", "[", "}{", '"']): value(depth + 1) for _ in range(rng.randint(0, 3))}

    for _ in range(count):
        texts.append(json.dumps(value(0)))
    return texts


@pytest.mark.parametrize("limit", [1, 2, 3, 5])
def test_the_depth_scan_agrees_with_the_depth_of_the_decoded_value(limit):
    """The text scan refuses a document exactly when its decoded value nests deeper than the
    limit: what lets acceptance skip walking a value decoded from a checked text."""
    for text in _nested_documents(limit, 300):
        try:
            check_value_depth(json.loads(text), limit)
            deep = False
        except EnvelopeInvalid:
            deep = True
        try:
            check_text_depth(text, limit)
            refused = False
        except EnvelopeInvalid:
            refused = True
        assert refused == deep, text


@pytest.mark.django_db
def test_a_batch_decoded_from_checked_text_is_not_walked_again_and_still_refused_when_deep(settings):
    """A batch body's text passes the depth scan once; its Events are not walked again
    (``depth_checked``), and a batch too deep is refused before anything is decoded."""
    live_scopes("acme")
    settings.CONDUIT_MAX_JSON_DEPTH = 4
    ok = [cloud_event(id="a", data={"x": {"y": 1}})]  # array, Event, data, x: four levels
    assert (
        len(
            events_accept(
                payloads=parse_json(json.dumps(ok)), clock=lambda: datetime.now(UTC), depth_checked=True
            )
        )
        == 1
    )
    deep = [cloud_event(id="b", data={"x": {"y": [1]}})]
    with pytest.raises(EnvelopeInvalid, match="more than 4 levels deep"):
        parse_json(json.dumps(deep))
    # Without the flag, a decoded value is walked: the Event object is its first level.
    with pytest.raises(EnvelopeInvalid, match="more than 4 levels deep"):
        events_accept(
            payloads=[cloud_event(id="c", data={"x": {"y": [{}]}})], clock=lambda: datetime.now(UTC)
        )
    assert Event.objects.count() == 1


@pytest.mark.parametrize("levels", [65, 100_000])
def test_parse_json_refuses_deep_documents_without_recursion(levels):
    with pytest.raises(EnvelopeInvalid, match="more than 64 levels deep") as info:
        parse_json("[" * levels + "]" * levels)
    assert info.value.field is None


@pytest.mark.django_db
def test_acceptance_refuses_a_decoded_event_deeper_than_the_limit():
    live_scopes("acme")
    data: dict = {}
    for _ in range(2_000):
        data = {"a": data}
    with pytest.raises(EnvelopeInvalid, match="64 levels") as info:
        event_accept(payload=cloud_event(data=data), clock=lambda: datetime.now(UTC), trusted=True)
    assert info.value.field == "data"
    assert Event.objects.count() == 0
