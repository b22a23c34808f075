"""Sign-ins are throttled per login and address, and every failure is logged."""

from __future__ import annotations

import importlib
import logging

import pytest
from axes.models import AccessAttempt
from django.apps import apps as django_apps
from django.test import Client
from django.urls import reverse

from routing.access.roles import AXES_UNLOCK, Role, role_groups_ensure
from tests.conduit_site.sitekit import PASSWORD
from tests.routing.factories import UserFactory, user_with_role

pytestmark = pytest.mark.django_db

WRONG = "not-the-password-9"


def sign_in(client, password: str, address: str = "203.0.113.7"):
    return client.post(reverse("login"), {"username": "operator", "password": password}, REMOTE_ADDR=address)


def failure_records(caplog) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.getMessage() == "auth.login_failed"]


def test_repeated_wrong_passwords_lock_out_the_login_from_that_address(client, operator, settings, caplog):
    caplog.set_level(logging.WARNING, logger="conduit.auth")
    limit = settings.AXES_FAILURE_LIMIT
    for _ in range(limit - 1):
        refused = sign_in(client, WRONG)
        assert refused.status_code == 200
        assert "errorlist" in refused.content.decode()

    locked = sign_in(client, WRONG)
    assert locked.status_code == 429
    assert "Sign-in locked" in locked.content.decode()

    # While locked, the right password is refused too and signs nobody in.
    right = sign_in(client, PASSWORD)
    assert right.status_code == 429
    assert "_auth_user_id" not in client.session

    # The lockout is per login and address: the same login from another address still works.
    elsewhere = sign_in(client, PASSWORD, address="198.51.100.2")
    assert elsewhere.status_code == 302
    assert client.session["_auth_user_id"] == str(operator.pk)


def test_every_failed_sign_in_is_logged_without_the_password(client, operator, settings, caplog):
    caplog.set_level(logging.WARNING, logger="conduit.auth")
    limit = settings.AXES_FAILURE_LIMIT
    for _ in range(limit + 1):
        sign_in(client, WRONG)
    sign_in(client, PASSWORD)

    records = failure_records(caplog)
    # Each wrong password, and the right one refused by the lockout.
    assert len(records) == limit + 2
    assert [record.failures for record in records[:limit]] == list(range(1, limit + 1))
    assert [record.locked_out for record in records] == [False] * (limit - 1) + [True] * 3
    assert {record.username for record in records} == {"operator"}
    assert {record.address for record in records} == {"203.0.113.7"}
    for record in records:
        fields = " ".join(str(value) for value in vars(record).values())
        assert WRONG not in fields and PASSWORD not in fields


def test_a_successful_sign_in_resets_the_count(client, operator, settings):
    limit = settings.AXES_FAILURE_LIMIT
    for _ in range(limit - 1):
        sign_in(client, WRONG)
    assert sign_in(client, PASSWORD).status_code == 302
    client.post(reverse("logout"))
    for _ in range(limit - 1):
        assert sign_in(client, WRONG).status_code == 200
    assert sign_in(client, PASSWORD).status_code == 302


def test_the_admin_sign_in_is_locked_out_too(client, settings):
    admin = UserFactory(username="root", is_staff=True, is_superuser=True)
    admin.set_password(PASSWORD)
    admin.save()
    url = reverse("admin:login")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        response = client.post(url, {"username": "root", "password": WRONG}, REMOTE_ADDR="203.0.113.9")
    assert response.status_code == 429
    right = client.post(url, {"username": "root", "password": PASSWORD}, REMOTE_ADDR="203.0.113.9")
    assert right.status_code == 429
    assert "_auth_user_id" not in client.session


def test_an_admin_unlocks_a_locked_sign_in_in_the_admin_under_axes(client, operator, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT):
        sign_in(client, WRONG)
    assert sign_in(client, PASSWORD).status_code == 429
    admin = Client()
    admin.force_login(user_with_role("admin"))  # staff, never a superuser

    listing = admin.get(reverse("admin:axes_accessattempt_changelist"))
    assert listing.status_code == 200 and "operator" in listing.content.decode()
    assert admin.get(reverse("admin:index")).content.decode().count("Access attempts") >= 1
    attempt = AccessAttempt.objects.get(username="operator")
    deleted = admin.post(reverse("admin:axes_accessattempt_delete", args=[attempt.pk]), {"post": "yes"})
    assert deleted.status_code == 302, deleted.content.decode()[:500]

    assert sign_in(client, PASSWORD).status_code == 302
    assert client.session["_auth_user_id"] == str(operator.pk)


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_only_the_admin_role_may_unlock_sign_ins(client, role):
    client.force_login(user_with_role(role))
    assert client.get(reverse("admin:axes_accessattempt_changelist")).status_code in (302, 403)


def test_upgrading_gives_an_existing_admin_group_the_unlock_permissions():
    migration = importlib.import_module("routing.migrations.0010_admin_unlocks_sign_ins")
    admin_group = role_groups_ensure()[Role.ADMIN]
    admin_group.permissions.remove(*admin_group.permissions.filter(content_type__app_label="axes"))

    migration.grant_unlock(django_apps, None)

    granted = admin_group.permissions.filter(content_type__app_label="axes").values_list(
        "codename", flat=True
    )
    assert {f"axes.{codename}" for codename in granted} == set(AXES_UNLOCK)
