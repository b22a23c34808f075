"""Structured log lines carry their fields, as key=value text or JSON (LOG_FORMAT), with the
request id of the web request they were written for."""

import http.client
import io
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.urls import reverse

from causal.clock import system_clock
from conduit_site.logformat import JsonFormatter, KeyValueFormatter, RequestIdFilter
from routing.config.services import config_apply
from tests.routing.factories import UserFactory, api_token_with_secret
from tests.support import child_env, free_port


def test_fields_are_printed_as_key_values():
    formatter = KeyValueFormatter("%(levelname)s %(message)s")
    record = logging.LogRecord("conduit.routing", logging.WARNING, __file__, 1, "route.gave_up", (), None)
    record.__dict__.update(
        {"event": 12, "code": "handler_timeout", "route.refusals": [{"route": "a", "reason": "b"}]}
    )
    line = formatter.format(record)
    assert line.startswith("WARNING route.gave_up ")
    assert 'event=12 code="handler_timeout" route.refusals=[{"route": "a", "reason": "b"}]' in line


def test_a_plain_record_is_unchanged():
    formatter = KeyValueFormatter("%(message)s")
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello %s", ("there",), None)
    assert formatter.format(record) == "hello there"


# --- LOG_FORMAT=json and request ids ---------------------------------------------------------------


FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"  # the settings' for both formatters


def test_a_json_line_has_the_fields_of_the_key_value_line():
    record = logging.LogRecord("conduit.routing", logging.WARNING, __file__, 1, "route.gave_up", (), None)
    record.__dict__.update({"event": 12, "code": "handler_timeout", "route.refusals": [{"route": "a"}]})

    text = KeyValueFormatter(FORMAT).format(record)
    line = json.loads(JsonFormatter(FORMAT).format(record))

    assert set(line) == {"asctime", "levelname", "name", "message", "event", "code", "route.refusals"}
    assert (line["levelname"], line["name"], line["message"]) == (
        "WARNING",
        "conduit.routing",
        "route.gave_up",
    )
    assert (line["event"], line["code"], line["route.refusals"]) == (12, "handler_timeout", [{"route": "a"}])
    assert text.startswith(f"{line['asctime']} WARNING conduit.routing route.gave_up event=12 ")


def test_a_json_line_keeps_the_traceback_and_writes_what_json_cannot_hold_as_text():
    from datetime import UTC, datetime

    try:
        raise ValueError("bad ünïcode")
    except ValueError:
        record = logging.LogRecord(
            "x", logging.ERROR, __file__, 1, "work_loop.pass_failed", (), sys.exc_info()
        )
    record.at = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
    record.thing = object()

    raw = JsonFormatter(FORMAT).format(record)
    line = json.loads(raw)

    assert "\n" not in raw  # one line
    assert "ValueError: bad ünïcode" in line["exc_info"] and "ünïcode" in raw
    assert line["at"] == "2026-01-05T12:00:00+00:00"
    assert line["thing"].startswith("<object object")


ROOT = Path(django_settings.BASE_DIR)


def run_logging(log_format: str) -> subprocess.CompletedProcess:
    script = textwrap.dedent(
        """
        import logging, django
        django.setup()
        logging.getLogger("conduit.routing").warning("route.gave_up", extra={"event": 3, "code": "handler_failed"})
        """
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "conduit_site.settings", "LOG_FORMAT": log_format}
    return subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def test_log_format_json_writes_each_record_as_one_json_object():
    result = run_logging("json")

    assert result.returncode == 0, result.stderr
    (line,) = [json.loads(text) for text in result.stderr.splitlines()]
    assert {k: line[k] for k in ("levelname", "name", "message", "event", "code")} == {
        "levelname": "WARNING",
        "name": "conduit.routing",
        "message": "route.gave_up",
        "event": 3,
        "code": "handler_failed",
    }
    assert "asctime" in line


def test_log_format_text_is_the_default_and_an_unknown_one_is_refused():
    text = run_logging("text")
    unknown = run_logging("yaml")

    assert 'route.gave_up event=3 code="handler_failed"' in text.stderr
    assert unknown.returncode != 0 and "LOG_FORMAT must be text or json, not 'yaml'" in unknown.stderr


@pytest.fixture
def json_lines():
    """The JSON lines the root logger writes, through the settings' formatter and filter."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter(FORMAT))
    handler.addFilter(RequestIdFilter())
    root = logging.getLogger()
    root.addHandler(handler)
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    root.removeHandler(handler)


@pytest.mark.django_db
def test_a_web_request_gets_an_id_in_its_answer_and_its_log_lines(client, json_lines):
    user = UserFactory(username="operator")
    user.set_password("a-long-console-password-1")
    user.save()

    given = client.post(
        reverse("login"), {"username": "operator", "password": "wrong"}, headers={"x-request-id": "req-7f3a"}
    )
    made = client.get("/healthz")
    forged = client.get("/healthz", headers={"x-request-id": "a b\nlog injection"})

    assert given["X-Request-ID"] == "req-7f3a"
    assert len(made["X-Request-ID"]) == 32 and made["X-Request-ID"] != given["X-Request-ID"]
    assert forged["X-Request-ID"] != "a b\nlog injection" and len(forged["X-Request-ID"]) == 32
    (failed,) = [line for line in json_lines() if line["message"] == "auth.login_failed"]
    assert failed["request_id"] == "req-7f3a" and failed["username"] == "operator"


@pytest.mark.django_db
def test_djangos_own_request_lines_carry_the_request_id_and_other_lines_none(client, json_lines):
    client.get("/no-such-page/", headers={"x-request-id": "req-404"})
    logging.getLogger("conduit.routing").warning("route.gave_up")

    lines = json_lines()
    (not_found,) = [line for line in lines if line["name"] == "django.request"]
    (outside,) = [line for line in lines if line["message"] == "route.gave_up"]
    assert not_found["request_id"] == "req-404" and not_found["status_code"] == 404
    assert "request_id" not in outside


# --- every line of a real serve is JSON -----------------------------------------------------------

TRACED_SCOPE = """
version: 1
scopes:
  - path: acme
    bindings:
      inbox: {}
    routes:
      - slot: traced
        handler: match
        params: {type: "x.traced"}
        binding: inbox
        policy: queue
"""
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def request_status(port: int, method: str, path: str, body: bytes = b"", **headers: str) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(method, path, body=body or None, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


@pytest.mark.django_db(transaction=True)
def test_with_log_format_json_every_line_of_serve_is_json_and_lines_about_a_traced_event_carry_its_trace(
    tmp_path,
):
    config_apply(document=TRACED_SCOPE, clock=system_clock)
    _, secret = api_token_with_secret(user__permissions=("routing.accept_event",))
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--workers", "1", "--port", str(port)],
        cwd=ROOT,
        # DEBUG on: Django's own DEBUG-only console handler must not print plain copies.
        env=child_env(CONDUIT_VAR_DIR=str(tmp_path), LOG_FORMAT="json", LOG_LEVEL="INFO", DEBUG="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        seen = []
        for line in server.stderr:
            seen.append(line)
            if "Conduit console" in line:
                break
        event = {
            "specversion": "1.0",
            "id": "traced-1",
            "source": "/tests",
            "type": "x.traced",
            "scope": "acme",
            "datacontenttype": "application/json",
            "traceparent": TRACEPARENT,
            "data": {"n": 1},
        }
        structured = request_status(
            port,
            "POST",
            "/api/events",
            json.dumps(event).encode(),
            **{"Authorization": f"Bearer {secret}", "Content-Type": "application/cloudevents+json"},
        )
        missing = request_status(port, "GET", "/no-such-page/", traceparent=TRACEPARENT)
        untraced = request_status(port, "GET", "/healthz")
    finally:
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=60)
    assert (structured, missing, untraced) == (201, 404, 200)

    raw = [line for line in (*seen, *err.splitlines(), *out.splitlines()) if line.strip()]
    not_json = []
    lines = []
    for text in raw:
        try:
            lines.append(json.loads(text))
        except json.JSONDecodeError:
            not_json.append(text)
    assert not_json == [] and len(lines) >= 10
    access = {line["path"]: line for line in lines if line["name"] == "conduit.access"}
    assert access["/api/events"]["status"] == 201 and access["/api/events"]["method"] == "POST"
    for path in ("/api/events", "/no-such-page/"):
        assert (access[path]["trace_id"], access[path]["span_id"]) == (
            "0af7651916cd43dd8448eb211c80319c",
            "b7ad6b7169203331",
        ), path
    assert "trace_id" not in access["/healthz"]
    (not_found,) = [line for line in lines if line["name"] == "django.request"]
    assert not_found["trace_id"] == "0af7651916cd43dd8448eb211c80319c"
    started = {line["message"].split()[0] for line in lines if line["name"] == "conduit.process"}
    assert {"Conduit", "route_loop", "work_loop"} <= started
