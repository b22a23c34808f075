"""Schemathesis against ``/api/openapi.json`` (issue 9 item 11): generated requests, valid and
invalid, anonymous and authenticated, get no server error and no answer the document does not
describe. The app runs in-process (WSGI) on the test database; the seed is fixed."""

from __future__ import annotations

from collections import Counter

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.causal.factories import EventFactory
from tests.routing.factories import DEFAULT_TEST_CONFIG, api_token_with_secret, apply_config

pytestmark = pytest.mark.django_db

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
RECEIVERS = """\
receivers:
  github: {kind: github, scope: acme, secret: {env: TEST_HOOK_GITHUB}}
  alerts: {kind: alertmanager, scope: acme, secret: {env: TEST_HOOK_ALERTMANAGER}}
  events: {kind: cloudevents, scope: acme, secret: {env: TEST_HOOK_ALERTMANAGER}}
  slack: {kind: slack, scope: acme, secret: {env: TEST_HOOK_GITHUB}}
"""
HOOK_NAMES = ("github", "alerts", "events", "slack")
# Per (generation mode, authentication): 4 runs of this many examples, 1,200 requests in all.
EXAMPLES = 300


@pytest.fixture
def wsgi_app():
    """The Django app as WSGI, on the test's database connection: as Django's test client does,
    requests must not close the connection that holds the test's transaction."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield WSGIHandler()
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=str)
@pytest.mark.parametrize("authenticated", [False, True], ids=["anonymous", "token"])
def test_i9_11_schemathesis_finds_no_server_error_and_no_schema_violation(
    wsgi_app, mode, authenticated, monkeypatch
):
    # Issue 37: receivers too, so that /hooks/{name} is fuzzed past its 404.
    monkeypatch.setenv("TEST_HOOK_GITHUB", "fuzzed-github-secret")
    monkeypatch.setenv("TEST_HOOK_ALERTMANAGER", "fuzzed-alertmanager-token")
    apply_config(DEFAULT_TEST_CONFIG + RECEIVERS)
    EventFactory.create_batch(3)
    _, secret = api_token_with_secret(user__username="fuzzer", user__is_superuser=True)
    headers = {"Authorization": f"Bearer {secret}"} if authenticated else {}
    schema = schemathesis.openapi.from_wsgi("/api/openapi.json", wsgi_app)
    statuses: Counter[int] = Counter()
    hook_statuses: Counter[int] = Counter()
    hooks_tried = {"all": 0}

    @given(case=schema.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    def fuzz(case):
        if authenticated:
            case.headers = {**(case.headers or {}), **headers}
        elif case.headers:
            case.headers.pop("Authorization", None)
        turn = hooks_tried["all"] % (len(HOOK_NAMES) + 1)
        if case.path == "/hooks/{name}" and turn:
            # Four in five deliveries go to a receiver that exists, so that its checks of the
            # generated headers and bodies are fuzzed, not only its 404.
            case.path_parameters = {"name": HOOK_NAMES[turn - 1]}
        hooks_tried["all"] += case.path == "/hooks/{name}"
        response = case.call()
        statuses[response.status_code] += 1
        if case.path == "/hooks/{name}":
            hook_statuses[response.status_code] += 1
        case.validate_response(response, checks=CHECKS)

    fuzz()
    assert sum(statuses.values()) >= EXAMPLES
    assert not any(status >= 500 for status in statuses)
    # Where the receivers were tried more than a few times, they answered more than their 404:
    # their signature checks refused what was generated.
    if hooks_tried["all"] > 2 * len(HOOK_NAMES):
        assert hook_statuses[401] or hook_statuses[415], hook_statuses
