"""Clients generated from the OpenAPI document by openapi-python-client and by openapi-generator
(as an integrator would generate them) send Events with nested data, trace one and create a Work
through a live server: the document's any-JSON values are ones both generators read."""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from causal.models import Event
from conduit_site.api.openapi import openapi_schema
from tests.routing.factories import api_token_with_secret, apply_config
from worklife.models import Work

pytestmark = pytest.mark.django_db(transaction=True)

GENERATOR = Path(sys.executable).parent / "openapi-python-client"
PACKAGE = "conduit_api_client"
OPENAPI_GENERATOR = Path(sys.executable).parent / "openapi-generator-cli"
OPENAPI_GENERATOR_PACKAGE = "conduit_openapi_generator_client"
NESTED = {
    "repository": {"full_name": "acme/web", "topics": ["ci", {"weight": 2.5, "on": True}]},
    "none": None,
}


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """The client package openapi-python-client generates from the served document."""
    folder = tmp_path_factory.mktemp("generated")
    document = folder / "openapi.json"
    document.write_text(json.dumps(openapi_schema()), encoding="utf-8")
    result = subprocess.run(
        [
            str(GENERATOR),
            "generate",
            "--path",
            str(document),
            "--meta",
            "none",
            "--output-path",
            str(folder / PACKAGE),
        ],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # Every operation the test calls was generated (the generator leaves out what it cannot read).
    for operation in ("events/events_accept.py", "setup/trace.py", "work/work_create.py"):
        assert (folder / PACKAGE / "api" / operation).is_file(), (operation, result.stdout)
    yield from imported(folder, PACKAGE)


def imported(folder: Path, package: str):
    """Import ``package`` from ``folder`` for the tests of a module, then forget it."""
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module(package)
    finally:
        sys.path.remove(str(folder))
        for name in [name for name in sys.modules if name == package or name.startswith(f"{package}.")]:
            del sys.modules[name]


@pytest.fixture(scope="module")
def generated_by_openapi_generator(tmp_path_factory):
    """The Python client openapi-generator (a Java program) generates from the served document."""
    assert shutil.which("java"), (
        "java is missing: install Debian's default-jre-headless package (.ci/run does)"
    )
    folder = tmp_path_factory.mktemp("openapi_generator")
    document = folder / "openapi.json"
    document.write_text(json.dumps(openapi_schema()), encoding="utf-8")
    result = subprocess.run(
        [
            str(OPENAPI_GENERATOR),
            "generate",
            "--generator-name",
            "python",
            "--input-spec",
            str(document),
            "--output",
            str(folder / "client"),
            "--package-name",
            OPENAPI_GENERATOR_PACKAGE,
        ],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    yield from imported(folder / "client", OPENAPI_GENERATOR_PACKAGE)


def test_a_generated_client_accepts_traces_and_creates_work_with_nested_data(generated, live_server):
    from conduit_api_client.api.events import event_detail, events_accept
    from conduit_api_client.api.setup import trace
    from conduit_api_client.api.work import work_create
    from conduit_api_client.client import AuthenticatedClient
    from conduit_api_client.models import EventAttributes, OperatorInput, TraceBody, WorkCreateBody

    apply_config()
    _, secret = api_token_with_secret(user__username="integrator", user__is_superuser=True)
    client = AuthenticatedClient(base_url=live_server.url, token=secret)
    attributes = {
        "specversion": "1.0",
        "id": "gen-1",
        "source": "generated",
        "type": "chat.message",
        "scope": "acme",
    }

    accepted = events_accept.sync_detailed(
        client=client, body=EventAttributes.from_dict({**attributes, "data": NESTED})
    )
    assert accepted.status_code == 201, accepted.content
    event = Event.objects.get(envelope_id="gen-1")
    assert event.data == NESTED
    read = event_detail.sync_detailed(client=client, seq=event.seq)
    assert read.status_code == 200 and json.loads(read.content)["event"]["data"] == NESTED

    traced = trace.sync_detailed(
        client=client,
        body=TraceBody.from_dict({"event": {**attributes, "id": "gen-2", "data": NESTED}}),
    )
    assert traced.status_code == 200, traced.content
    assert not Event.objects.filter(envelope_id="gen-2").exists()  # a trace stores nothing

    created = work_create.sync_detailed(
        client=client,
        body=WorkCreateBody(
            scope="acme",
            binding="inbox",
            input_=OperatorInput.from_dict({"type": "operator.task", "data": NESTED}),
        ),
    )
    assert created.status_code == 201, created.content
    work = Work.objects.get()
    assert Event.objects.get(seq=work.trigger_id).data == NESTED


def test_a_client_generated_by_openapi_generator_accepts_traces_and_creates_with_nested_data(
    generated_by_openapi_generator, live_server
):
    client = generated_by_openapi_generator
    apply_config()
    _, secret = api_token_with_secret(user__username="integrator", user__is_superuser=True)
    api = client.ApiClient(client.Configuration(host=live_server.url, access_token=secret))
    events, setup, work = client.EventsApi(api), client.SetupApi(api), client.WorkApi(api)
    attributes = {
        "specversion": "1.0",
        "id": "gen-1",
        "source": "generated",
        "type": "chat.message",
        "scope": "acme",
    }

    # The generated models validate the body before sending it: object data must pass.
    body = client.CloudEventOrBatch(client.CloudEventInput.from_dict({**attributes, "data": NESTED}))
    accepted = events.events_accept_with_http_info(cloud_event_or_batch=body)
    assert accepted.status_code == 201, accepted.raw_data
    event = Event.objects.get(envelope_id="gen-1")
    assert event.data == NESTED
    read = events.event_detail(seq=event.seq)
    assert read.event.data == NESTED

    traced = setup.trace_with_http_info(
        trace_request=client.TraceRequest(
            event=client.TracedEvent.from_dict({**attributes, "id": "gen-2", "data": NESTED})
        )
    )
    assert traced.status_code == 200, traced.raw_data
    assert not Event.objects.filter(envelope_id="gen-2").exists()  # a trace stores nothing

    created = work.work_create_with_http_info(
        work_create_request=client.WorkCreateRequest(
            scope="acme",
            binding="inbox",
            input=client.OperatorInput.from_dict({"type": "operator.task", "data": NESTED}),
        )
    )
    assert created.status_code == 201, created.raw_data
    created_work = Work.objects.get()
    assert created.data.work_id == created_work.id
    assert Event.objects.get(seq=created.data.input_seq).data == NESTED
