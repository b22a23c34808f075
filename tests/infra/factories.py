"""Factories for infra's one table, the live-update outbox."""

from __future__ import annotations

from datetime import UTC, datetime

import factory

from infra.models import LiveChange


class LiveChangeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = LiveChange

    at = factory.LazyFunction(lambda: datetime.now(UTC))
    groups = factory.LazyFunction(lambda: ["console.work"])
    works = factory.LazyFunction(list)
    events = factory.LazyFunction(list)
