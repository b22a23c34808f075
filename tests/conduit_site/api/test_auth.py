"""API tokens: bearer authentication of the JSON API, hashed storage, the api_token command
and the admin."""

from __future__ import annotations

import io
import json
import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import connection

from causal.models import Event
from routing.access.roles import VIEW_EVENT
from routing.access.services import (
    ApiTokenInvalid,
    api_token_authenticate,
    api_token_create,
    api_token_revoke,
)
from routing.access.tokens import token_digest
from routing.models import ApiToken
from tests.routing.factories import T0, UserFactory, api_token_with_secret, live_scopes

EVENTS_URL = "/api/events"
EVENT = {"specversion": "1.0", "id": "e1", "source": "tests", "type": "test.event", "scope": "acme"}


def post_event(client, headers):
    return client.post(EVENTS_URL, data=json.dumps(EVENT), content_type="application/json", headers=headers)


def assert_unauthorized(response, *, invalid):
    assert response.status_code == 401, response.content
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"] == "unauthorized"
    assert response["WWW-Authenticate"].startswith('Bearer realm="conduit"')
    assert ('error="invalid_token"' in response["WWW-Authenticate"]) is invalid
    assert Event.objects.count() == 0


def call(*args):
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


# --- 401 -------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_api_without_token_is_401(client):
    live_scopes("acme")
    assert_unauthorized(post_event(client, {}), invalid=False)


@pytest.mark.django_db
def test_api_session_login_is_not_an_api_credential(client):
    live_scopes("acme")
    client.force_login(UserFactory())
    assert_unauthorized(post_event(client, {}), invalid=False)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "header",
    [
        "Bearer cdt_00000000_" + "A" * 43,  # well-formed, unknown
        "Bearer not-a-token",
        "Bearer ",
        "Basic YWxpY2U6c2VjcmV0",
        "cdt_00000000_" + "A" * 43,
    ],
)
def test_api_with_wrong_token_is_401(client, header):
    live_scopes("acme")
    api_token_with_secret()
    assert_unauthorized(post_event(client, {"Authorization": header}), invalid=True)


@pytest.mark.django_db
def test_api_with_a_token_one_character_off_is_401(client):
    live_scopes("acme")
    _, secret = api_token_with_secret()
    wrong = secret[:-1] + ("B" if secret[-1] != "B" else "C")
    assert_unauthorized(post_event(client, {"Authorization": f"Bearer {wrong}"}), invalid=True)


@pytest.mark.django_db
def test_api_with_revoked_token_is_401(client, clock):
    live_scopes("acme")
    token, secret = api_token_with_secret()
    headers = {"Authorization": f"Bearer {secret}"}
    assert client.get("/api/events/1", headers=headers).status_code == 404
    api_token_revoke(prefix=token.prefix, clock=clock)
    assert_unauthorized(post_event(client, headers), invalid=True)


@pytest.mark.django_db
def test_api_token_of_inactive_user_is_401(client):
    live_scopes("acme")
    _, secret = api_token_with_secret(user__is_active=False)
    assert_unauthorized(post_event(client, {"Authorization": f"Bearer {secret}"}), invalid=True)


@pytest.mark.django_db
def test_api_valid_token_acts_as_its_user(client):
    live_scopes("acme")
    _, secret = api_token_with_secret(user__username="bob")
    response = post_event(client, {"Authorization": f"bearer {secret}"})
    assert response.status_code == 201
    assert Event.objects.get().accepted_by == "bob"


# --- storage ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_api_token_is_stored_hashed_the_secret_is_nowhere_in_the_database(clock):
    user = UserFactory()
    issued = api_token_create(user=user, name="ci", clock=clock)
    assert re.fullmatch(r"cdt_[0-9a-f]{8}_[A-Za-z0-9_-]{43}", issued.secret)
    row = ApiToken.objects.get()
    assert row.digest == token_digest(issued.secret)
    assert row.prefix == issued.secret[:12]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {ApiToken._meta.db_table}")
        stored = repr(cursor.fetchall())
    assert issued.secret not in stored
    assert issued.secret[12:] not in stored


@pytest.mark.django_db
def test_api_token_authenticate_records_last_use_at_most_once_a_minute(clock):
    token, secret = api_token_with_secret()
    assert api_token_authenticate(secret=secret, clock=clock).pk == token.pk
    first = clock()
    clock.advance(30)
    api_token_authenticate(secret=secret, clock=clock)
    token.refresh_from_db()
    assert token.last_used_at == first
    clock.advance(31)
    api_token_authenticate(secret=secret, clock=clock)
    token.refresh_from_db()
    assert token.last_used_at == clock()


@pytest.mark.django_db
def test_api_token_create_refuses_bad_input_and_stores_nothing(clock):
    user = UserFactory()
    with pytest.raises(ApiTokenInvalid) as info:
        api_token_create(user=user, name="  ", clock=clock)
    assert info.value.field == "name"
    with pytest.raises(ApiTokenInvalid):
        api_token_create(user=user, name="n" * 101, clock=clock)
    with pytest.raises(ApiTokenInvalid) as info:
        api_token_create(user=UserFactory(is_active=False), name="x", clock=clock)
    assert info.value.field == "user"
    assert ApiToken.objects.count() == 0


# --- the api_token command -------------------------------------------------------------------


@pytest.mark.django_db
def test_api_token_command_create_list_revoke(client):
    live_scopes("acme")
    UserFactory(username="carol")
    secret, note = call("api_token", "create", "carol", "--name", "deploy bot")
    secret = secret.strip()
    assert "shown only this once" in note
    headers = {"Authorization": f"Bearer {secret}"}
    assert post_event(client, headers).status_code == 201
    assert Event.objects.get().accepted_by == "carol"

    listing, _ = call("api_token", "list")
    prefix = secret[:12]
    assert prefix in listing and "carol" in listing and "deploy bot" in listing
    assert secret not in listing

    done, _ = call("api_token", "revoke", prefix)
    assert f"Revoked API token {prefix}" in done
    assert client.get("/api/events/1", headers=headers).status_code == 401
    assert prefix not in call("api_token", "list")[0]
    assert "revoked" in call("api_token", "list", "--all")[0]


@pytest.mark.django_db
def test_api_token_command_list_by_user():
    mine, _ = api_token_with_secret(user__username="frank", name="frank's")
    theirs, _ = api_token_with_secret(user__username="grace", name="grace's")
    listing, _ = call("api_token", "list", "--user", "frank")
    assert mine.prefix in listing
    assert theirs.prefix not in listing
    assert len(listing.splitlines()) == 1


@pytest.mark.django_db
def test_api_token_command_errors_are_non_zero_exits():
    with pytest.raises(CommandError, match="no user named 'nobody'"):
        call("api_token", "create", "nobody")
    with pytest.raises(CommandError, match="no API token has the prefix"):
        call("api_token", "revoke", "cdt_deadbeef")
    token, _ = api_token_with_secret()
    call("api_token", "revoke", token.prefix)
    with pytest.raises(CommandError, match="already revoked"):
        call("api_token", "revoke", token.prefix)
    assert ApiToken.objects.count() == 1


# --- the admin -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_api_token_admin_add_shows_the_secret_once_and_revokes(client):
    live_scopes("acme")
    admin_user = UserFactory(username="root", is_staff=True, is_superuser=True)
    owner = UserFactory(username="dave")
    client.force_login(admin_user)
    response = client.post("/admin/routing/apitoken/add/", {"user": owner.pk, "name": "laptop"})
    assert response.status_code == 200, response.content[:500]
    assert "no-store" in response["Cache-Control"]
    secret = re.search(rb'value="(cdt_[0-9a-f]{8}_[A-Za-z0-9_-]{43})"', response.content).group(1).decode()
    token = ApiToken.objects.get()
    assert (token.user, token.name, token.digest) == (owner, "laptop", token_digest(secret))

    # The secret is never shown again.
    page = client.get(f"/admin/routing/apitoken/{token.pk}/change/")
    assert page.status_code == 200
    assert secret.encode() not in page.content
    assert token.prefix.encode() in page.content

    api = client.__class__()
    headers = {"Authorization": f"Bearer {secret}"}
    assert post_event(api, headers).status_code == 201

    response = client.post(
        "/admin/routing/apitoken/",
        {"action": "revoke_tokens", "_selected_action": [token.pk]},
    )
    assert response.status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert api.get("/api/events/1", headers=headers).status_code == 401


# --- the raw statements of the hot path ------------------------------------------------------


@pytest.mark.django_db
def test_permissions_read_in_one_statement_equal_djangos_model_backend():
    """routing.access.backend reads a user's permissions with one raw UNION statement; what it
    answers must be what Django's own ModelBackend answers, for every kind of login."""
    from django.contrib.auth.backends import ModelBackend as DjangoModelBackend
    from django.contrib.auth.models import Group, Permission

    from routing.access.backend import ModelBackend

    group = Group.objects.create(name="skippers")
    group.permissions.add(*Permission.objects.filter(codename__in=["skip_event", "cancel_work"]))
    other = Group.objects.create(name="unused")
    other.permissions.add(*Permission.objects.filter(codename="delete_user"))
    own_only = UserFactory(permissions=(VIEW_EVENT,))
    group_only = UserFactory(permissions=())
    group_only.groups.add(group)
    both = UserFactory(permissions=(VIEW_EVENT, "routing.skip_event"))
    both.groups.add(group)
    nothing = UserFactory(permissions=())
    superuser = UserFactory(permissions=(), is_superuser=True)
    inactive = UserFactory(permissions=(VIEW_EVENT,), is_active=False)
    inactive.groups.add(group)
    logins = [own_only, group_only, both, nothing, superuser, inactive]
    for login in logins:
        ours = ModelBackend().get_all_permissions(get_user_model().objects.get(pk=login.pk))
        djangos = DjangoModelBackend().get_all_permissions(get_user_model().objects.get(pk=login.pk))
        assert ours == djangos, login.username
    assert ModelBackend().get_all_permissions(get_user_model().objects.get(pk=both.pk)) == {
        VIEW_EVENT,
        "routing.skip_event",
        "worklife.cancel_work",
    }
    assert ModelBackend().get_all_permissions(get_user_model().objects.get(pk=nothing.pk)) == set()


@pytest.mark.django_db
def test_an_authenticated_token_carries_its_user_as_stored(clock):
    """The token and its user come from raw statements: every field is converted as the ORM
    converts it (dates, booleans, JSON scopes)."""
    token, secret = api_token_with_secret(scopes=["accept"], last_used_at=T0)
    found = api_token_authenticate(secret=secret, clock=clock)
    stored = ApiToken.objects.select_related("user").get(pk=token.pk)
    assert found is not None
    for field in ApiToken._meta.concrete_fields:
        if field.name != "last_used_at":
            assert getattr(found, field.attname) == getattr(stored, field.attname), field.name
    assert found.scopes == ["accept"] and found.created_at == T0
    for field in get_user_model()._meta.concrete_fields:
        assert getattr(found.user, field.attname) == getattr(stored.user, field.attname), field.name
    assert found.user.is_active is True and found.user.date_joined == stored.user.date_joined


# --- a token's default scope -------------------------------------------------------------------


@pytest.mark.django_db
def test_an_admin_gives_a_token_a_default_scope_and_a_bad_path_is_refused(client):
    from routing.models import ApiToken
    from tests.routing.factories import user_with_role

    client.force_login(user_with_role("admin", username="boss"))
    owner = user_with_role("operator", username="sender")
    bad = client.post(
        "/admin/routing/apitoken/add/", {"user": owner.pk, "name": "hook", "default_scope": "a//b"}
    )
    assert bad.status_code == 200 and b"Not a scope path" in bad.content
    assert not ApiToken.objects.exists()
    good = client.post(
        "/admin/routing/apitoken/add/", {"user": owner.pk, "name": "hook", "default_scope": "acme/web"}
    )
    assert good.status_code == 200
    assert ApiToken.objects.get(name="hook").default_scope == "acme/web"


# --- query parameters --------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("query", ["after=1&=null", "=x", "="])
def test_a_query_parameter_without_a_name_is_refused_not_ignored(client, query):
    """No endpoint has a parameter with an empty name: ``GET /api/events?after=1&=null`` is not
    read as ``?after=1``, it is refused naming the nameless parameter."""
    live_scopes("acme")
    _, secret = api_token_with_secret()
    response = client.get(f"{EVENTS_URL}?{query}", headers={"Authorization": f"Bearer {secret}"})
    assert response.status_code == 400, response.content
    assert response.json()["error"] == "invalid_request" and response.json()["field"] == ""
    named = client.get(f"{EVENTS_URL}?after=1", headers={"Authorization": f"Bearer {secret}"})
    assert named.status_code == 200, named.content
