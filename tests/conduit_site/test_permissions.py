"""Least privilege for people and tokens, as one permission matrix.

Every API endpoint and method (walked from ``conduit_site/api/urls.py``), every console page and
control (``conduit_site/console/urls.py``), the admin site and both websockets, each tried by an
anonymous client, a viewer, an operator, an admin and a token narrowed to ``accept`` (an
operator's). The expected permission of each row is written here, not read from the code, and
the tables must name exactly the routes the URLconfs hold, so a new route fails until it is
placed in the matrix.

A refusal is exact: the API answers 401 (anonymous) or 403; the console sends anonymous users
to the login page and answers 403 to a login without the permission; a websocket is closed with
4401 or 4403. An allowed request only has to get past the door: it may still be a 400, 404 or
409 for the empty body it sends, never a 401, 403, login redirect or 5xx.
"""

from __future__ import annotations

import io

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.core.management import call_command
from django.test import Client
from django.urls import URLPattern, get_resolver, reverse

from conduit_site.api.auth import api_view
from conduit_site.asgi import application
from conduit_site.console.consumers import CLOSE_FORBIDDEN, CLOSE_UNAUTHENTICATED
from routing.access.services import api_token_create
from routing.models import ApiToken
from tests.causal.factories import EventFactory
from tests.controls.factories import BulkJobFactory
from tests.routing.factories import T0, ImpactRunFactory, UserFactory, apply_config, user_with_role
from tests.worklife.factories import WorkFactory

# --- who: the principals and the scopes each may use ------------------------------------------

PRINCIPALS = ("anonymous", "viewer", "operator", "admin", "narrowed")
CONTROLS = {"skip", "reroute", "replay", "cancel", "retry", "send", "create", "rebind", "pause"}
MAY = {
    "anonymous": set(),
    "viewer": {"read"},
    "operator": {"read", "accept", *CONTROLS},
    "admin": {"read", "accept", *CONTROLS, "admin", "configure"},
    # A token of an operator narrowed to accept: its user may do everything an operator may.
    "narrowed": {"accept"},
}

# --- what: every route, method and the scope it needs ----------------------------------------

# (url name, method) -> scope; None: public.
API = {
    ("api-events", "GET"): "read",
    ("api-events", "POST"): "accept",
    ("api-events", "OPTIONS"): None,
    ("api-event-detail", "GET"): "read",
    ("api-event-skip", "POST"): "skip",
    ("api-event-reroute", "POST"): "reroute",
    ("api-event-replay", "POST"): "replay",
    ("api-events-replay", "POST"): "replay",
    ("api-doctor", "GET"): "read",
    ("api-event-route", "GET"): "read",
    ("api-trace", "POST"): "read",
    ("api-candidates", "POST"): "configure",
    ("api-candidate-detail", "GET"): "read",
    ("api-candidate-impact", "GET"): "read",
    ("api-impact-job", "GET"): "read",
    ("api-impact-job", "DELETE"): "read",
    ("api-candidate-apply", "POST"): "configure",
    ("api-candidate-discard", "POST"): "configure",
    ("api-work", "GET"): "read",
    ("api-work", "POST"): "create",
    ("api-work-detail", "GET"): "read",
    ("api-work-cancel", "POST"): "cancel",
    ("api-work-bulk", "POST"): "retry",
    # Cancelling a job needs the permission of its control: the world's job is a bulk retry.
    ("api-job-detail", "GET"): "read",
    ("api-job-cancel", "POST"): "retry",
    ("api-work-retry", "POST"): "retry",
    ("api-work-send", "POST"): "send",
    ("api-work-rebind", "POST"): "rebind",
    ("api-pauses", "GET"): "read",
    ("api-pauses", "POST"): "pause",
    ("api-pauses-resume", "POST"): "pause",
    ("api-schedules", "GET"): "read",
    ("api-schedules-fire", "POST"): "pause",
    ("api-openapi", "GET"): None,
}

CONSOLE = {
    ("console-home", "GET"): "read",
    ("login", "GET"): None,
    ("logout", "POST"): None,
    ("event-list", "GET"): "read",
    ("event-detail", "GET"): "read",
    ("event-skip", "GET"): "skip",
    ("event-skip", "POST"): "skip",
    ("event-reroute", "GET"): "reroute",
    ("event-reroute", "POST"): "reroute",
    ("event-replay", "GET"): "replay",
    ("event-replay", "POST"): "replay",
    ("events-replay", "POST"): "replay",
    ("dead-letters", "GET"): "read",
    ("dead-letters-reroute", "POST"): "reroute",
    ("doctor", "GET"): "read",
    ("console-health", "GET"): "read",
    ("work-list", "GET"): "read",
    ("work-detail", "GET"): "read",
    ("work-create", "GET"): "create",
    ("work-create", "POST"): "create",
    ("work-cancel", "GET"): "cancel",
    ("work-cancel", "POST"): "cancel",
    ("work-bulk", "POST"): "retry",
    ("work-retry", "GET"): "retry",
    ("work-retry", "POST"): "retry",
    ("work-send", "GET"): "send",
    ("work-send", "POST"): "send",
    ("work-rebind", "GET"): "rebind",
    ("work-rebind", "POST"): "rebind",
    ("config-list", "GET"): "read",
    ("setup", "GET"): "read",
    ("setup-check", "POST"): "read",
    ("job-detail", "GET"): "read",
    ("job-cancel", "POST"): "retry",
    ("candidate-create", "POST"): "configure",
    ("candidate-detail", "GET"): "read",
    ("candidate-trace", "POST"): "read",
    ("candidate-impact", "GET"): "read",
    ("candidate-impact", "POST"): "read",
    ("impact-run", "GET"): "read",
    ("candidate-apply", "POST"): "configure",
    ("candidate-discard", "POST"): "configure",
    ("trace", "GET"): "read",
    ("trace", "POST"): "read",
    ("receivers", "GET"): "read",
    ("flow", "GET"): "read",
    ("flow-pause", "POST"): "pause",
    ("flow-resume", "POST"): "pause",
    ("flow-fire", "POST"): "pause",
    ("causal-root", "GET"): "read",
    ("causal-diagnostics", "GET"): "read",
}

# The admin site opens for admins only (staff); managing logins is theirs too.
ADMIN_SITE = {
    ("admin:index", "GET"): "admin",
    ("admin:auth_user_changelist", "GET"): "admin",
    ("admin:auth_user_add", "GET"): "admin",
    ("admin:routing_apitoken_changelist", "GET"): "admin",
    ("admin:causal_event_changelist", "GET"): "admin",
}

WEBSOCKETS = {"ws-work": "read", "ws-events": "read", "ws-work-list": "read", "ws-home": "read"}


def _patterns(urlconf: str) -> set[str]:
    return {p.name for p in get_resolver(urlconf).url_patterns if isinstance(p, URLPattern)}


def test_the_matrix_names_every_api_route_and_method():
    routes = {
        (pattern.name, method)
        for pattern in get_resolver("conduit_site.api.urls").url_patterns
        for method in pattern.callback.api_methods
    }
    assert routes == set(API)


def test_the_matrix_names_every_console_route():
    assert _patterns("conduit_site.console.urls") == {name for name, _ in CONSOLE}


def test_an_api_endpoint_must_name_its_permission():
    with pytest.raises(ValueError, match="needs a permission for each of GET, POST"):
        api_view(["GET", "POST"], permission={"GET": "routing.view_event"})


# --- the world every cell runs in ------------------------------------------------------------


@pytest.fixture
def world():
    """A live configuration, one unrouted Event, one Work and one candidate; the URL arguments
    they give."""
    apply_config()
    event = EventFactory()
    work = WorkFactory(binding="agent")
    candidate = apply_config(candidate=True)
    run = ImpactRunFactory(candidate=candidate)
    job = BulkJobFactory()
    return {
        "seq": event.seq,
        "work_id": work.pk,
        "candidate_id": candidate.pk,
        "run_id": run.pk,
        "job_id": job.pk,
    }


def principal_user(who: str):
    if who == "anonymous":
        return None
    role = "operator" if who == "narrowed" else who
    return user_with_role(role, username=f"{who}-login")


def principal_token(who: str) -> str | None:
    user = principal_user(who)
    if user is None:
        return None
    scopes = ["accept"] if who == "narrowed" else None
    return api_token_create(user=user, name=who, clock=lambda: T0, scopes=scopes).secret


def url_for(name: str, world: dict[str, int]) -> str:
    for kwargs in (
        {},
        {"seq": world["seq"]},
        {"work_id": world["work_id"]},
        {"candidate_id": world["candidate_id"]},
        {"run_id": world["run_id"]},
        {"job_id": world["job_id"]},
    ):
        try:
            return reverse(name, kwargs=kwargs)
        except Exception:  # noqa: BLE001 - try the next set of arguments
            continue
    raise AssertionError(f"no arguments reverse {name}")


def allowed(who: str, scope: str | None) -> bool:
    return scope is None or scope in MAY[who]


# --- API ---------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("who", PRINCIPALS)
@pytest.mark.parametrize(("name", "method"), sorted(API))
def test_each_principal_gets_each_api_route_and_method_as_the_matrix_says(world, name, method, who):
    secret = principal_token(who)
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    url = url_for(name, world)
    client = Client()
    if method == "GET":
        response = client.get(url, headers=headers)
    else:
        response = client.generic(method, url, data="{}", content_type="application/json", headers=headers)

    scope = API[(name, method)]
    if allowed(who, scope):
        assert response.status_code not in (401, 403), response.content
        assert response.status_code < 500
    elif who == "anonymous":
        assert response.status_code == 401
        assert response["WWW-Authenticate"].startswith("Bearer")
    else:
        assert response.status_code == 403, response.content
        assert response.json()["error"] == "forbidden"


# --- console and admin site ---------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("who", PRINCIPALS)
@pytest.mark.parametrize(("name", "method"), sorted({**CONSOLE, **ADMIN_SITE}))
def test_each_principal_gets_each_console_page_as_the_matrix_says(world, name, method, who):
    client = Client()
    headers = {}
    if who == "narrowed":
        # A token is for the API: sent to a page, it signs nobody in.
        headers = {"Authorization": f"Bearer {principal_token(who)}"}
    elif who != "anonymous":
        client.force_login(principal_user(who))
    url = url_for(name, world)
    response = client.get(url, headers=headers) if method == "GET" else client.post(url, headers=headers)

    scope = {**CONSOLE, **ADMIN_SITE}[(name, method)]
    as_who = "anonymous" if who == "narrowed" else who
    location = response.get("Location", "")
    if name.startswith("admin:"):
        login = reverse("admin:login")
        if allowed(as_who, scope):
            assert response.status_code == 200
        else:
            # Django's admin sends anyone who is not staff to its own login page.
            assert response.status_code == 302 and location.startswith(login)
    elif allowed(as_who, scope):
        assert response.status_code != 403 and response.status_code < 500
        assert not location.startswith(reverse("login") + "?")
    elif as_who == "anonymous":
        assert response.status_code == 302 and location.startswith(reverse("login") + "?next=")
    else:
        assert response.status_code == 403


# --- websockets ----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("who", PRINCIPALS)
@pytest.mark.parametrize("name", sorted(WEBSOCKETS))
def test_each_principal_joins_each_websocket_as_the_matrix_says(name, who):
    work = WorkFactory()
    headers = [(b"origin", b"http://testserver"), (b"host", b"testserver")]
    if who == "narrowed":
        headers.append((b"authorization", f"Bearer {principal_token(who)}".encode()))
    elif who != "anonymous":
        client = Client()
        client.force_login(principal_user(who))
        headers.append((b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()))
    path = {"ws-work": f"/ws/work/{work.pk}/", "ws-work-list": "/ws/work/", "ws-home": "/ws/home/"}.get(
        name, "/ws/events/"
    )

    async def connect():
        communicator = WebsocketCommunicator(application, path, headers=headers)
        connected, code = await communicator.connect(timeout=5)
        if connected:
            # A refusal is an accepted socket closed at once with its code.
            if not await communicator.receive_nothing(timeout=0.1):
                closed = await communicator.receive_output(timeout=1)
                if closed["type"] == "websocket.close":
                    return False, closed.get("code")
            await communicator.disconnect()
        return connected, code

    connected, code = async_to_sync(connect)()

    as_who = "anonymous" if who == "narrowed" else who
    if allowed(as_who, WEBSOCKETS[name]):
        assert connected
    else:
        assert (connected, code) == (
            False,
            CLOSE_UNAUTHENTICATED if as_who == "anonymous" else CLOSE_FORBIDDEN,
        )


MATRIX_SIZE = len(PRINCIPALS) * (len(API) + len(CONSOLE) + len(ADMIN_SITE) + len(WEBSOCKETS))


def test_the_matrix_covers_five_principals_on_every_route():
    # 5 principals x (routes and methods of the API, the console, the admin site and 4 websockets).
    assert MATRIX_SIZE == 5 * 94 == 470


# --- narrowing a token ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_api_token_create_only_accept_makes_a_webhook_token_that_cannot_read():
    apply_config()
    user_with_role("operator", username="hooks")
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "api_token", "create", "hooks", "--name", "github", "--only", "accept", stdout=out, stderr=err
    )
    secret = out.getvalue().strip()
    token = ApiToken.objects.get(name="github")
    assert token.scopes == ["accept"]
    assert "narrowed to accept" in err.getvalue()

    client = Client()
    auth = {"Authorization": f"Bearer {secret}"}
    body = '{"specversion": "1.0", "id": "h-1", "source": "github", "type": "push", "scope": "acme"}'
    accepted = client.post("/api/events", data=body, content_type="application/json", headers=auth)
    assert accepted.status_code == 201, accepted.content
    read = client.get(accepted["Location"], headers=auth)
    assert read.status_code == 403
    assert "narrowed to accept" in read.json()["message"] and "routing.view_event" in read.json()["message"]

    listing = io.StringIO()
    call_command("api_token", "list", stdout=listing)
    assert "only accept" in listing.getvalue()


@pytest.mark.django_db
def test_a_narrowed_token_never_exceeds_its_users_permissions():
    apply_config()
    viewer = user_with_role("viewer", username="reader")
    secret = api_token_create(user=viewer, name="t", clock=lambda: T0, scopes=["accept", "read"]).secret
    client = Client()
    auth = {"Authorization": f"Bearer {secret}"}
    body = '{"specversion": "1.0", "id": "r-1", "source": "s", "type": "t", "scope": "acme"}'
    refused = client.post("/api/events", data=body, content_type="application/json", headers=auth)
    assert refused.status_code == 403
    assert "lacks the permission routing.accept_event" in refused.json()["message"]
    assert client.get("/api/work", headers=auth).status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("only", "message"), [("write", "unknown scope 'write'"), (",", "name at least one scope")]
)
def test_api_token_create_refuses_unknown_scopes_and_stores_nothing(only, message):
    UserFactory(username="someone")
    with pytest.raises(Exception, match=message):
        call_command(
            "api_token", "create", "someone", "--only", only, stdout=io.StringIO(), stderr=io.StringIO()
        )
    assert not ApiToken.objects.exists()


@pytest.mark.django_db
def test_an_admin_narrows_a_token_in_the_admin_site():
    client = Client()
    client.force_login(user_with_role("admin", username="boss"))
    owner = user_with_role("operator", username="sender")

    response = client.post(
        "/admin/routing/apitoken/add/", {"user": owner.pk, "name": "hook", "only": ["accept"]}
    )

    assert response.status_code == 200, response.content[:500]
    assert ApiToken.objects.get(name="hook").scopes == ["accept"]
