"""Shared by the Event tests of the API and of the events command: a CloudEvent to send, the
command's output, and the route of an Event read through the API."""

from __future__ import annotations

import io

from django.core.management import call_command


def cloud_event(**overrides):
    event = {
        "specversion": "1.0",
        "id": "evt-1",
        "source": "github/acme",
        "type": "github.pull_request.opened",
        "scope": "acme",
        "data": {"number": 7},
    }
    event.update(overrides)
    return {key: value for key, value in event.items() if value is not ...}


def events_command(*args: str) -> str:
    out = io.StringIO()
    call_command("events", *args, stdout=out)
    return out.getvalue()


def get_route(client, reader_auth, seq):
    response = client.get(f"/api/events/{seq}/route", headers=reader_auth)
    assert response["Content-Type"] == "application/json"
    return response
