"""factory-boy factories for the operator actions' rows (bulk jobs)."""

from __future__ import annotations

import factory
from django.utils import timezone

from controls.models import BulkJob, JobKind


class BulkJobFactory(factory.django.DjangoModelFactory):
    """A pending bulk retry of no Work yet (``targets`` and ``total`` to taste)."""

    class Meta:
        model = BulkJob

    kind = JobKind.RETRY_WORK
    created_by = "alice"
    total = 0
    targets = factory.LazyFunction(list)
    created_at = factory.LazyFunction(timezone.now)
    updated_at = factory.LazyAttribute(lambda job: job.created_at)
