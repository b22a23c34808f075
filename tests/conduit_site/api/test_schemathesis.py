"""Schemathesis against ``/api/openapi.json``: generated requests, valid and
invalid, anonymous and authenticated, get no server error and no answer the document does not
describe. The app runs in-process (WSGI) on the test database; the seed is fixed."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from conduit_site.api.openapi import openapi_schema
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
def test_schemathesis_finds_no_server_error_and_no_schema_violation(
    wsgi_app, mode, authenticated, monkeypatch
):
    # Receivers too, so that /hooks/{name} is fuzzed past its 404.
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


# --- every check --------------------------------------------------------------------------------

CONFIG = Path(__file__).with_name("schemathesis.toml")
# Per generation mode and operation: 23 operations, with the coverage phase's cases beside them.
EVERY_CHECK_EXAMPLES = 12
# The refusals a well-formed request may get (schemathesis.toml says which operations): the
# field at fault and how its message starts. Any other 400 to one is a disagreement.
BEYOND_SCHEMA = {
    ("scope", "unknown scope "),
    ("scope", "scope is required"),  # no default scope: the test's configuration and token have none
    ("document", "the document is not valid"),
    ("until", "must be later than since"),
    ("subtree", "needs a scope"),
    # Binary mode: one ce-* header asks for the others an Event needs (OpenAPI cannot make one
    # header require another).
    *((name, f"{name} is required") for name in ("specversion", "id", "source", "type")),
}


# What JsonValue (any JSON value, as generated clients read it) leaves to the server inside an
# Event's data: a NUL or a lone surrogate in a string or key, a number JSON cannot hold, the depth.
JSON_VALUE_REFUSALS = ("NUL characters", "invalid Unicode", "numbers must be finite")


def within_json_value(body: dict) -> bool:
    """Whether a 400 refuses what JsonValue's description says and its schema leaves out."""
    field = str(body.get("field") or "")
    return (field == "data" or field.startswith(("data.", "data["))) and body.get("message", "").startswith(
        JSON_VALUE_REFUSALS
    )


def refuses_described_requests_only_beyond_the_schema(ctx, response, case):
    """A well-formed request refused with 400 names one of ``BEYOND_SCHEMA``, or what an Event's
    data may not hold (``within_json_value``)."""
    if case.meta is None or not case.meta.generation.mode.is_positive or response.status_code != 400:
        return None
    body = response.json()
    assert within_json_value(body) or any(
        body.get("field") == field and body.get("message", "").startswith(start)
        for field, start in BEYOND_SCHEMA
    ), f"{case.method} {case.path} refused a request its document describes: {body}"
    return None


def every_check_schema():
    """The document as the server serves it, run in-process, with ``schemathesis.toml``."""
    config = SchemathesisConfig.from_path(CONFIG)
    config.projects.default.generation.update(
        modes=list(GenerationMode), max_examples=EVERY_CHECK_EXAMPLES, deterministic=True
    )
    schema = schemathesis.openapi.from_dict(openapi_schema(), config=config)
    schema.app = WSGIHandler()
    return schema


every_check = every_check_schema()


@pytest.fixture
def fuzzer_token(wsgi_app):
    apply_config(DEFAULT_TEST_CONFIG)
    EventFactory.create_batch(3)
    return api_token_with_secret(user__username="fuzzer", user__is_superuser=True)[1]


@every_check.parametrize()
@settings(database=None, deadline=None, suppress_health_check=list(HealthCheck))
def test_schemathesis_with_every_check_finds_nothing(case, fuzzer_token):
    """Every check schemathesis has (``-c all``: the answers' schema, status codes and headers,
    and that what the document describes is accepted and what it forbids is refused), over the
    examples, coverage and fuzzing phases, positive and negative, as a superuser's token."""
    case.call_and_validate(
        headers={"Authorization": f"Bearer {fuzzer_token}"},
        additional_checks=[refuses_described_requests_only_beyond_the_schema],
    )


def test_schemathesis_stateful_with_every_check_finds_nothing(fuzzer_token):
    """The stateful phase: sequences of requests following the document's links (a Work listed,
    then read, cancelled, retried…), every check on each answer."""

    class Sequences(every_check.as_state_machine()):
        def get_call_kwargs(self, case):
            return {"headers": {"Authorization": f"Bearer {fuzzer_token}"}}

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            # The token is the run's own (as -H gives it to the CLI), not part of the case.
            case.validate_response(
                response,
                additional_checks=[
                    *(additional_checks or []),
                    refuses_described_requests_only_beyond_the_schema,
                ],
                headers=kwargs["headers"],
                transport_kwargs=kwargs,
                recorder=self.recorder,
            )

    Sequences.run(
        settings=settings(
            max_examples=EVERY_CHECK_EXAMPLES,
            stateful_step_count=6,
            derandomize=True,
            database=None,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        )
    )
