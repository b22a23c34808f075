"""Factories for Work and what belongs to it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import factory

from worklife.models import (
    Attempt,
    CorrelationKey,
    DependencySubscription,
    Intent,
    Timer,
    Wait,
    Work,
    WorkInput,
    WorkStatus,
)

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


class WorkFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Work

    scope = "acme"
    binding = "triage"
    created_at = T0
    updated_at = T0


class CorrelationKeyFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = CorrelationKey

    work = factory.SubFactory(WorkFactory)
    scope = factory.SelfAttribute("work.scope")
    key = factory.Sequence(lambda n: f"key:{n}")
    attached_at = T0


class AttemptFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Attempt

    work = factory.SubFactory(WorkFactory)
    number = factory.Sequence(lambda n: n + 1)
    binding = "triage"
    executor = "python"
    generation = 1
    capabilities = factory.LazyFunction(list)
    started_at = T0


class WaitFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Wait

    work = factory.SubFactory(WorkFactory)
    match = factory.LazyFunction(dict)
    created_at = T0


# --- input (console tests) -------------------------------------------------------------------


class WorkInputFactory(factory.django.DjangoModelFactory):
    """An Event given to a Work as input; ``seq`` follows the Event's."""

    class Meta:
        model = WorkInput

    work = factory.SubFactory(WorkFactory)
    event = factory.SubFactory(
        "tests.causal.factories.EventFactory",
        route_state="routed",
        scope=factory.SelfAttribute("..work.scope"),
    )
    seq = factory.SelfAttribute("event.seq")
    binding = "triage"
    created_at = T0


class IntentFactory(factory.django.DjangoModelFactory):
    """An inject intent for an attempt at its lease epoch."""

    class Meta:
        model = Intent

    attempt = factory.SubFactory(AttemptFactory)
    work = factory.SelfAttribute("attempt.work")
    lease_epoch = factory.SelfAttribute("attempt.lease_epoch")
    event = factory.SubFactory("tests.causal.factories.EventFactory", route_state="routed")
    kind = "inject"
    created_at = T0


# --- timers (causal limits tests) ------------------------------------------------------------


class TimerFactory(factory.django.DjangoModelFactory):
    """A pending timer of a Work, due at ``T0``; ``parent=`` an Event makes its firing derived."""

    class Meta:
        model = Timer

    work = factory.SubFactory(WorkFactory)
    due_at = T0
    type = "test.timer.due"
    data = factory.LazyFunction(dict)
    created_at = T0


class DependencySubscriptionFactory(factory.django.DjangoModelFactory):
    """A waiting Work's subscription to Events of another scope (R42)."""

    class Meta:
        model = DependencySubscription

    wait = factory.SubFactory(WaitFactory)
    work = factory.SelfAttribute("wait.work")
    scope = "acme"
    match = factory.LazyFunction(dict)
    created_at = T0


# (what the Work is, its fields, whether Retry applies): the retry rule's cases.
RETRY_CASES = [
    ("parked", {"failures": 5, "parked_at": T0, "pending_run": True}, True),
    ("backing off", {"failures": 1, "retry_at": T0 + timedelta(minutes=1), "pending_run": True}, True),
    ("a refused dispatch looked at again later", {"retry_at": T0 + timedelta(seconds=30)}, True),
    ("ready with nothing holding it", {}, False),
    ("running", {"status": WorkStatus.RUNNING, "failures": 1}, False),
    ("waiting", {"status": WorkStatus.WAITING, "retry_at": T0}, False),
    ("completed", {"status": WorkStatus.COMPLETED, "parked_at": T0}, False),
    ("cancelled", {"status": WorkStatus.CANCELLED, "retry_at": T0}, False),
]
