"""Factories for the routing app."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import factory
from django.contrib.auth import get_user_model

from routing.models import ApiToken, Generation, GenerationKind, Scope
from routing.tokens import token_digest, token_generate

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


# --- configuration generations and scopes (acceptance tests) --------------------------------


class GenerationFactory(factory.django.DjangoModelFactory):
    """An applied generation (numbered in order); ``kind="candidate", number=None`` for a candidate."""

    class Meta:
        model = Generation

    number = factory.Sequence(lambda n: n + 1)
    kind = GenerationKind.APPLIED
    document = "version: 1\nscopes: []\n"
    digest = factory.LazyAttribute(lambda o: hashlib.sha256(o.document.encode()).hexdigest())
    created_at = T0


class ScopeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Scope

    generation = factory.SubFactory(GenerationFactory)
    path = factory.Sequence(lambda n: f"scope{n}")


def live_scopes(*paths: str) -> Generation:
    """A new live (newest applied) generation holding exactly the scopes ``paths``."""
    newest = Generation.objects.filter(kind=GenerationKind.APPLIED).order_by("-number").first()
    generation = GenerationFactory(number=(newest.number + 1) if newest else 1)
    for path in paths:
        ScopeFactory(generation=generation, path=path)
    return generation


# --- users and API tokens --------------------------------------------------------------------


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda o: f"{o.username}@example.com")
    is_active = True


class ApiTokenFactory(factory.django.DjangoModelFactory):
    """An API token; pass ``secret=`` (from :func:`routing.tokens.token_generate`) to know it."""

    class Meta:
        model = ApiToken
        exclude = ["secret"]

    secret = factory.LazyFunction(lambda: token_generate()[1])
    user = factory.SubFactory(UserFactory)
    name = "tests"
    prefix = factory.LazyAttribute(lambda o: o.secret[:12])
    digest = factory.LazyAttribute(lambda o: token_digest(o.secret))
    created_at = T0


def api_token_with_secret(**kwargs) -> tuple[ApiToken, str]:
    """A stored API token and its secret (which the database does not hold)."""
    _, secret = token_generate()
    return ApiTokenFactory(secret=secret, **kwargs), secret
