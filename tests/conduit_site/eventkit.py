"""Shared by the Event tests of the API and of the events command: the command's output, and
the route of an Event read through the API."""

from __future__ import annotations

import io

from django.core.management import call_command


def events_command(*args: str) -> str:
    out = io.StringIO()
    call_command("events", *args, stdout=out)
    return out.getvalue()


def get_route(client, reader_auth, seq):
    response = client.get(f"/api/events/{seq}/route", headers=reader_auth)
    assert response["Content-Type"] == "application/json"
    return response
