"""Factories for the acceptance ledger."""

from __future__ import annotations

from datetime import UTC, datetime

import factory

from causal.models import KV, CausalDiagnostic, Event, EventKey


class EventFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Event
        # The ``keys`` hook writes other rows and leaves the Event as saved: no second save.
        skip_postgeneration_save = True

    envelope_id = factory.Sequence(lambda n: f"evt-{n}")
    source = "tests"
    type = "test.event"
    scope = "acme"
    data = factory.LazyFunction(dict)
    accepted_at = factory.LazyFunction(lambda: datetime(2026, 1, 5, 12, 0, tzinfo=UTC))

    @factory.post_generation
    def keys(self, create, extracted, **kwargs):
        """``EventFactory(correlation=[...])`` also writes the explicit key index rows."""
        if create and self.correlation:
            EventKey.objects.bulk_create(
                [EventKey(event=self, scope=self.scope, key=key) for key in self.correlation]
            )


class KVFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = KV

    namespace = "tests"
    key = factory.Sequence(lambda n: f"key-{n}")
    value = factory.LazyFunction(dict)
    updated_at = factory.LazyFunction(lambda: datetime(2026, 1, 5, 12, 0, tzinfo=UTC))


# --- causal diagnostics (console and admin tests) ---------------------------------------------


class CausalDiagnosticFactory(factory.django.DjangoModelFactory):
    """A redacted record of a refused derived Event."""

    class Meta:
        model = CausalDiagnostic

    kind = "depth_exceeded"
    at = factory.LazyFunction(lambda: datetime(2026, 1, 5, 12, 0, tzinfo=UTC))
    root_seq = 1
    parent_seq = 1
    type = "test.derived"
    source = "tests"
    limit = 32
    count = 33
