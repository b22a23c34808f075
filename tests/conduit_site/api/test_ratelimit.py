"""The API's rate limits: requests a minute per API token and per login over all its tokens,
answered 429 with Retry-After past them; acceptance from senders (``POST /api/events`` per token,
``/hooks/NAME`` per receiver) counts apart, with its own limit."""

from __future__ import annotations

import json
import os
import uuid

import pytest

from conduit_site.api import ratelimit
from tests.routing.factories import DEFAULT_TEST_CONFIG, api_token_with_secret, apply_config, user_with_role
from tests.support import run_manage

pytestmark = pytest.mark.django_db

# 45 s into a minute: a window ends in 15 s.
NOW = 1_767_614_445.0


@pytest.fixture
def minute(monkeypatch):
    """The rate limits' clock, fixed 45 s into a minute; ``minute["now"]`` moves it."""
    state = {"now": NOW}
    monkeypatch.setattr(ratelimit, "clock", lambda: state["now"])
    return state


@pytest.fixture
def operator():
    apply_config(DEFAULT_TEST_CONFIG)
    return user_with_role("operator", username="opal")


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def listed(client, secret):
    return client.get("/api/events", headers=bearer(secret)).status_code


def accept(client, secret, n):
    event = {"specversion": "1.0", "id": f"r{n}", "source": "rate", "type": "t.x", "scope": "acme"}
    return client.post("/api/events", data=event, content_type="application/json", headers=bearer(secret))


def test_a_token_past_its_rate_limit_gets_429_with_retry_after_until_the_minute_ends(
    client, operator, minute, settings
):
    settings.CONDUIT_API_RATE_PER_MINUTE = 3
    settings.CONDUIT_API_LOGIN_RATE_PER_MINUTE = 100
    token, secret = api_token_with_secret(user=operator)
    _, other = api_token_with_secret(user=operator)

    assert [listed(client, secret) for _ in range(3)] == [200, 200, 200]
    refused = client.get("/api/events", headers=bearer(secret))

    assert refused.status_code == 429 and refused["Retry-After"] == "15"
    body = refused.json()
    assert (body["error"], body["retry_after"]) == ("rate_limited", 15)
    assert f"API token {token.prefix} made more than 3 requests this minute" in body["message"]
    assert client.get("/api/work", headers=bearer(secret)).status_code == 429  # every endpoint counts
    assert listed(client, other) == 200  # the same login's other token has its own count
    minute["now"] += 15
    assert listed(client, secret) == 200


def test_a_login_past_its_rate_limit_is_refused_whichever_token_it_uses(client, operator, minute, settings):
    settings.CONDUIT_API_RATE_PER_MINUTE = 100
    settings.CONDUIT_API_LOGIN_RATE_PER_MINUTE = 4
    _, first = api_token_with_secret(user=operator)
    _, second = api_token_with_secret(user=operator)
    _, stranger = api_token_with_secret(user=user_with_role("viewer", username="vera"))

    assert [listed(client, first), listed(client, second), listed(client, first), listed(client, second)] == [
        200
    ] * 4
    refused = client.get("/api/events", headers=bearer(second))

    assert refused.status_code == 429 and refused["Retry-After"] == "15"
    assert "user 'opal' (all its tokens)" in refused.json()["message"]
    assert listed(client, first) == 429
    assert listed(client, stranger) == 200


def test_acceptance_from_a_sender_has_its_own_higher_limit(client, operator, minute, settings):
    settings.CONDUIT_API_RATE_PER_MINUTE = 2
    settings.CONDUIT_ACCEPT_RATE_PER_MINUTE = 5
    _, secret = api_token_with_secret(user=operator)
    assert [listed(client, secret) for _ in range(3)] == [200, 200, 429]

    accepted = [accept(client, secret, n).status_code for n in range(5)]
    refused = accept(client, secret, 5)

    assert accepted == [201] * 5  # reading used up the API's limit, not acceptance's
    assert refused.status_code == 429 and refused["Retry-After"] == "15"
    assert refused.json()["error"] == "rate_limited"


def test_deliveries_to_a_receiver_count_per_receiver(client, minute, settings):
    settings.CONDUIT_ACCEPT_RATE_PER_MINUTE = 2
    apply_config(DEFAULT_TEST_CONFIG)

    # No such receivers: 404 while under the limit, 429 past it, before the delivery is read.
    statuses = [
        client.post("/hooks/gh", data=b"{}", content_type="application/json").status_code for _ in range(3)
    ]
    elsewhere = client.post("/hooks/alerts", data=b"{}", content_type="application/json")

    assert statuses == [404, 404, 429] and elsewhere.status_code == 404


COUNT_IN_A_PROCESS = """
import json, sys
from conduit_site.api import ratelimit
limit = ratelimit.Limit(key=sys.argv[1], per_minute=5, what="a test")
print(json.dumps([ratelimit.rate_count([limit]) is not None for _ in range(3)]))
"""


def _count_in_a_process(key: str, **env: str) -> list[bool]:
    """Three requests counted against a limit of 5 a minute by a new process; which passed it."""
    done = run_manage("shell", "-c", f"import sys; sys.argv = ['', {key!r}]\n{COUNT_IN_A_PROCESS}", **env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.slow
def test_with_redis_the_rate_limits_count_across_processes_and_without_it_each_process_alone():
    """Two web processes count one limit (5 a minute, 3 requests each): with ``REDIS_URL`` the
    second process's third request passes it, as one process's would; without it, neither does."""
    key = f"test-{uuid.uuid4().hex}"
    redis = {"REDIS_URL": os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15")}
    assert _count_in_a_process(key, **redis) == [False, False, False]
    assert _count_in_a_process(key, **redis) == [False, False, True]
    alone = f"test-{uuid.uuid4().hex}"
    assert _count_in_a_process(alone, REDIS_URL="") == [False, False, False]
    assert _count_in_a_process(alone, REDIS_URL="") == [False, False, False]
