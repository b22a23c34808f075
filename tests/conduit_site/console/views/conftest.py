"""Fixtures shared by the console page tests: signed-in clients and the operators behind them.
None is autouse; a module that defines its own fixture of the same name keeps its own."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from conduit_site.console.views import controls as control_views
from tests.routing.factories import UserFactory


@pytest.fixture
def routing_handlers(test_handlers):
    """The test handlers registered (tests/conftest.py), for the tests here that route."""


@pytest.fixture
def list_operator():
    user = UserFactory(username="operator")
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="routing", codename__in=["skip_event", "reroute_event"]
        )
    )
    return user


@pytest.fixture
def operator_console(client, list_operator, clock, monkeypatch):
    monkeypatch.setattr(control_views, "clock", clock)
    client.force_login(list_operator)
    return client


@pytest.fixture
def signed_in(client, operator):
    client.force_login(operator)
    return client


@pytest.fixture
def console(client):
    client.force_login(UserFactory(username="operator"))
    return client
