"""The Django admin (D6): every record of causal, worklife and routing is there; history
records are read-only (every field read-only, no add, no delete)."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib import admin
from django.urls import get_resolver, reverse

from routing.access.admin import ApiTokenAdmin
from routing.models import ApiToken
from tests.causal.factories import CausalDiagnosticFactory, EventFactory
from tests.routing.factories import (
    GenerationFactory,
    ImpactRunChangeFactory,
    ReceiverCountFactory,
    RouteRecordFactory,
    UserFactory,
    apply_config,
)
from tests.worklife.factories import IntentFactory, WorkInputFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def urlconf_loaded():
    """The admin modules are discovered with the URLconf (SimpleAdminConfig), as in a server."""
    get_resolver().url_patterns  # noqa: B018 - importing the URLconf registers the admin


@pytest.fixture
def staff(client):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


def admin_url(obj_or_model, action: str, *args) -> str:
    meta = obj_or_model._meta
    return reverse(f"admin:{meta.app_label}_{meta.model_name}_{action}", args=args)


def history_records():
    """One of each history record (a consumed WorkInput among them)."""
    event = EventFactory(correlation=["pr:acme/web#1"], route_state="routed")
    return {
        "Event": event,
        "EventKey": event.keys.get(),
        "RouteRecord": RouteRecordFactory(),
        "CausalDiagnostic": CausalDiagnosticFactory(),
        "WorkInput": WorkInputFactory(state="consumed"),
        "Intent": IntentFactory(),
        "Generation": GenerationFactory(),
        "ReceiverCount": ReceiverCountFactory(),
        "ImpactRunChange": ImpactRunChangeFactory(),
    }


@pytest.mark.parametrize("app_label", ["causal", "worklife", "routing", "controls", "infra"])
def test_d6_every_model_is_registered(app_label):
    missing = [
        m.__name__ for m in apps.get_app_config(app_label).get_models() if m not in admin.site._registry
    ]
    assert missing == []


def test_d6_api_tokens_use_their_own_admin():
    assert isinstance(admin.site._registry[ApiToken], ApiTokenAdmin)


def test_d6_history_records_cannot_be_added_changed_or_deleted(staff, rf):
    for name, obj in history_records().items():
        model_admin = admin.site._registry[type(obj)]
        request = rf.get("/")
        request.user = UserFactory(username=f"su-{name}", is_staff=True, is_superuser=True)
        assert not model_admin.has_add_permission(request), name
        assert not model_admin.has_delete_permission(request, obj), name
        assert not model_admin.has_change_permission(request, obj), name
        assert model_admin.has_view_permission(request, obj), name
        every_field = {f.name for f in type(obj)._meta.concrete_fields}
        assert every_field <= set(model_admin.get_readonly_fields(request, obj)), name

        assert staff.get(admin_url(obj, "add")).status_code == 403, name
        assert staff.post(admin_url(obj, "delete", obj.pk), {"post": "yes"}).status_code == 403, name
        assert type(obj).objects.filter(pk=obj.pk).exists(), name


def test_d6_history_change_form_shows_fields_read_only_and_refuses_a_post(staff):
    records = history_records()
    event = records["Event"]
    page = staff.get(admin_url(event, "change", event.pk))
    body = page.content.decode()
    assert page.status_code == 200
    assert event.envelope_id in body
    assert 'name="envelope_id"' not in body and 'name="type"' not in body
    assert 'name="_save"' not in body

    record = records["RouteRecord"]
    refused = staff.post(admin_url(record, "change", record.pk), {"policy": "drop", "reason": "edited"})
    assert refused.status_code == 403
    record.refresh_from_db()
    assert record.policy == "queue" and record.reason == ""


def test_d6_consumed_input_is_read_only(staff):
    consumed = WorkInputFactory(state="consumed")
    body = staff.get(admin_url(consumed, "change", consumed.pk)).content.decode()
    assert 'name="state"' not in body and 'name="binding"' not in body
    assert staff.post(admin_url(consumed, "change", consumed.pk), {"state": "pending"}).status_code == 403


def test_d6_lists_search_ids_and_keys_without_counting_everything(staff):
    records = history_records()
    apply_config()
    event = records["Event"]
    for model in [
        m for app in ("causal", "worklife", "routing") for m in apps.get_app_config(app).get_models()
    ]:
        model_admin = admin.site._registry[model]
        assert model_admin.show_full_result_count is False, model.__name__
        assert model_admin.search_fields, model.__name__
        response = staff.get(admin_url(model, "changelist"), {"q": "1"})
        assert response.status_code == 200, model.__name__

    by_key = staff.get(admin_url(event, "changelist"), {"q": "pr:acme/web#1"})
    assert list(by_key.context["cl"].result_list) == [event]
    by_seq = staff.get(admin_url(event, "changelist"), {"q": str(event.seq)})
    assert event in list(by_seq.context["cl"].result_list)
    by_envelope = staff.get(admin_url(event, "changelist"), {"q": event.envelope_id})
    assert list(by_envelope.context["cl"].result_list) == [event]


# --- the admin role cannot make a superuser ------------------------------------------------


@pytest.fixture
def admin_role(client):
    """A login with the admin role (staff, not superuser), signed in."""
    from django.db import transaction

    from routing.access.roles import Role, role_assign_in_tx

    user = UserFactory(username="boss", permissions=())
    with transaction.atomic():
        role_assign_in_tx(user=user, role=Role.ADMIN)
    client.force_login(user)
    return user


def change_user(client, user, **fields):
    from django.contrib.auth.models import Group, Permission

    data = {
        "username": user.username,
        "first_name": "",
        "last_name": "",
        "email": "",
        "is_active": "on",
        "date_joined_0": "2026-01-01",
        "date_joined_1": "00:00:00",
        # What Django's own form would take: each must change nothing.
        "is_superuser": "on",
        "is_staff": "on",
        "groups": [g.pk for g in Group.objects.all()],
        "user_permissions": list(Permission.objects.values_list("pk", flat=True)[:50]),
        **fields,
    }
    return client.post(admin_url(user, "change", user.pk), data)


def test_the_admin_role_cannot_make_a_login_superuser_or_staff_beyond_its_role(client, admin_role):
    from routing.access.roles import Role, user_role

    other = UserFactory(username="someone", permissions=())
    response = change_user(client, other, role="viewer")
    assert response.status_code == 302, response.content.decode()[:2000]
    other.refresh_from_db()
    assert (other.is_superuser, other.is_staff, user_role(other)) == (False, False, Role.VIEWER)
    assert not other.user_permissions.exists()
    # Its own login neither.
    assert change_user(client, admin_role, role="admin").status_code == 302
    admin_role.refresh_from_db()
    assert (admin_role.is_superuser, admin_role.is_staff, user_role(admin_role)) == (False, True, Role.ADMIN)
    assert not admin_role.user_permissions.exists()


def test_no_role_takes_every_group_and_staff_away(client, admin_role):
    from django.db import transaction

    from routing.access.roles import Role, role_assign_in_tx

    other = UserFactory(username="leaving", permissions=())
    with transaction.atomic():
        role_assign_in_tx(user=other, role=Role.ADMIN)
    assert change_user(client, other, role="").status_code == 302
    other.refresh_from_db()
    assert (other.is_staff, other.is_superuser, other.groups.count()) == (False, False, 0)


def test_role_groups_are_read_only_in_the_admin(client, admin_role):
    from django.contrib.auth.models import Group, Permission

    group = Group.objects.get(name="viewer")
    before = set(group.permissions.values_list("pk", flat=True))
    page = client.get(admin_url(group, "change", group.pk))
    assert page.status_code == 200
    client.post(
        admin_url(group, "change", group.pk),
        {"name": "viewer", "permissions": list(Permission.objects.values_list("pk", flat=True))},
    )
    assert set(group.permissions.values_list("pk", flat=True)) == before
    assert client.get(admin_url(Group, "add")).status_code == 403


def test_adding_a_login_gives_it_the_chosen_role(client, admin_role):
    from django.contrib.auth import get_user_model

    from routing.access.roles import Role, user_role

    response = client.post(
        admin_url(get_user_model(), "add"),
        {
            "username": "newcomer",
            "usable_password": "true",
            "password1": "a-long-pass-phrase-42",
            "password2": "a-long-pass-phrase-42",
            "role": "operator",
            "is_superuser": "on",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    user = get_user_model().objects.get(username="newcomer")
    assert (user.is_superuser, user.is_staff, user_role(user)) == (False, False, Role.OPERATOR)
