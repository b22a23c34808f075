"""An acceptance builds its Event from values in field order and prepares
its columns once per batch. The row it stores must be the one the model's own constructor
and ``bulk_create`` would store."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import transaction

from causal.models import Event
from causal.services import Envelope, event_row, events_accept_in_tx


def _envelope(n: int, **more) -> Envelope:
    return Envelope(
        id=f"row-{n}",
        source="tests/rows",
        type="pr.opened",
        scope="rows",
        subject=f"subject {n}",
        data={"n": n, "nested": {"list": [1, "two", None]}},
        extensions={"traceparent": f"00-{n:032x}-{n:016x}-01"},
        correlation=(f"pr:{n}", f"repo:{n % 2}"),
        work_id=n,
        execution_id=n + 1,
        time=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        **more,
    )


def _keyword_row(envelope: Envelope, at: datetime) -> Event:
    return Event(
        envelope_id=envelope.id,
        source=envelope.source,
        type=envelope.type,
        subject=envelope.subject,
        time=envelope.time,
        specversion=envelope.specversion,
        datacontenttype=envelope.datacontenttype,
        data=envelope.data,
        extensions=dict(envelope.extensions),
        scope=envelope.scope,
        correlation=list(envelope.correlation),
        work_id=envelope.work_id,
        execution_id=envelope.execution_id,
        accepted_at=at,
        accepted_by="alice",
    )


def test_a_root_row_equals_the_keyword_constructor():
    at = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    envelope = _envelope(1)
    fast = event_row(envelope, parent=None, accepted_at=at, accepted_by="alice")
    slow = _keyword_row(envelope, at)
    for field in Event._meta.concrete_fields:
        assert getattr(fast, field.attname) == getattr(slow, field.attname), field.attname
    assert fast._state.adding


@pytest.mark.django_db(transaction=True)
def test_a_batch_stores_what_bulk_create_stores():
    """Each column of each row, read back, equals a row stored by Django's bulk_create."""
    at = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    with transaction.atomic():
        accepted = events_accept_in_tx(
            envelopes=[_envelope(n) for n in range(3)], clock=lambda: at, accepted_by="alice"
        )
    reference = Event.objects.bulk_create(
        [
            Event(
                envelope_id=f"ref-{n}",
                source="tests/rows",
                type="pr.opened",
                scope="rows",
                subject=f"subject {n}",
                time=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
                data={"n": n, "nested": {"list": [1, "two", None]}},
                extensions={"traceparent": f"00-{n:032x}-{n:016x}-01"},
                correlation=[f"pr:{n}", f"repo:{n % 2}"],
                work_id=n,
                execution_id=n + 1,
                accepted_at=at,
                accepted_by="alice",
            )
            for n in range(3)
        ]
    )
    stored = {e.seq: e for e in Event.objects.filter(source="tests/rows")}
    for result, ref in zip(accepted, reference, strict=True):
        mine, theirs = stored[result.event.seq], stored[ref.seq]
        for field in Event._meta.concrete_fields:
            if field.attname in ("seq", "envelope_id"):
                continue
            assert getattr(mine, field.attname) == getattr(theirs, field.attname), field.attname
        assert mine.envelope_id == result.event.envelope_id


def test_a_root_row_holds_what_the_constructor_holds_and_nothing_else():
    at = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    envelope = _envelope(2)
    fast, slow = (
        event_row(envelope, parent=None, accepted_at=at, accepted_by="alice"),
        _keyword_row(envelope, at),
    )
    assert {k: v for k, v in vars(fast).items() if k != "_state"} == {
        k: v for k, v in vars(slow).items() if k != "_state"
    }
    assert (fast._state.adding, fast._state.db) == (True, None)
    assert fast.pk is None and fast.parent is None and fast.root is None
    # Fresh defaults per row: no two rows share a mutable default.
    other = event_row(_envelope(3), parent=None, accepted_at=at, accepted_by="alice")
    for column in Event._meta.concrete_fields:
        value = getattr(fast, column.attname)
        if isinstance(value, dict | list):
            assert value is not getattr(other, column.attname), column.attname


def test_a_receiver_of_the_model_signals_gets_the_constructor_back():
    from django.db.models.signals import post_init

    seen = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance)

    post_init.connect(receiver, sender=Event)
    try:
        made = event_row(
            _envelope(4), parent=None, accepted_at=datetime(2026, 1, 1, tzinfo=UTC), accepted_by="a"
        )
    finally:
        post_init.disconnect(receiver, sender=Event)
    assert seen == [made]
    assert made.envelope_id == "row-4" and made.correlation == ["pr:4", "repo:0"]


@pytest.mark.django_db(transaction=True)
def test_empty_objects_and_arrays_are_stored_as_the_field_stores_them():
    """Empty JSON is prepared once per chunk: each row still reads back its own value."""
    at = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    shapes = [{}, [], None, {"a": []}, [{}]]
    envelopes = [
        Envelope(
            id=f"empty-{n}",
            source="tests/empty",
            type="pr.opened",
            scope="rows",
            data=data,
            extensions={},
            correlation=(),
        )
        for n, data in enumerate(shapes)
    ]
    with transaction.atomic():
        accepted = events_accept_in_tx(envelopes=envelopes, clock=lambda: at, accepted_by="alice")
    stored = {e.seq: e for e in Event.objects.filter(source="tests/empty")}
    assert [stored[r.event.seq].data for r in accepted] == shapes
    assert all(stored[r.event.seq].extensions == {} for r in accepted)
    assert all(stored[r.event.seq].correlation == [] for r in accepted)
    # Each row its own object: changing one read-back value changes no other.
    first, second = (stored[r.event.seq] for r in accepted[:2])
    first.data["x"] = 1
    assert second.data == []


def test_acceptance_reads_an_attribute_where_pre_save_would_only_read_it():
    """A batch's columns are read from the Event directly unless their field's ``pre_save``
    does more (sets a time on save, or is a field's own): the values stored are those
    ``pre_save`` would have given."""
    from django.db import models

    from causal.services import pre_save_needed

    class Stamped(models.DateTimeField):
        def pre_save(self, model_instance, add):
            return datetime(2026, 1, 1, tzinfo=UTC)

    assert not pre_save_needed(models.DateTimeField())
    assert not pre_save_needed(models.JSONField())
    assert not pre_save_needed(models.CharField())
    assert pre_save_needed(models.DateTimeField(auto_now=True))
    assert pre_save_needed(models.DateTimeField(auto_now_add=True))
    assert pre_save_needed(Stamped())
    assert not [f.name for f in Event._meta.concrete_fields if pre_save_needed(f)]
