"""Helpers of the operator control tests: permissions to grant, a parked Work, a Work held
behind a failing Event, the control Events written, and a JSON API call."""

from __future__ import annotations

import io
import json

from django.contrib.auth.models import Permission
from django.core.management import call_command

from causal.models import Event
from routing.models import RouteRecord
from tests.routing import sample_handlers
from tests.routing.routerkit import accept, drain
from tests.worklife.factories import (
    AttemptFactory,
    WorkFactory,
)
from worklife.models import (
    AttemptState,
    Work,
)

HTMX = {"HTTP_HX_REQUEST": "true"}

CONTROLS = ("cancel_work", "retry_work", "send_input", "create_work", "rebind_work")


def grant(user, *codenames: str):
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="worklife", codename__in=codenames)
    )
    return user


def control_events(action: str | None = None) -> list[Event]:
    events = Event.objects.filter(source="core.manual", type__startswith="core.manual.")
    if action is not None:
        events = events.filter(type=f"core.manual.{action}")
    return list(events.order_by("seq"))


def stored() -> tuple[int, int, int]:
    """What a refused control must leave as it was: Events, Work, route records."""
    return Event.objects.count(), Work.objects.count(), RouteRecord.objects.count()


def parked_work(clock) -> Work:
    """A ready Work parked after five failures of its attempt on triage."""
    work = WorkFactory(
        scope="acme", binding="triage", failures=5, parked_at=clock(), pending_run=True, last_error="boom"
    )
    AttemptFactory(work=work, number=1, binding="triage", state=AttemptState.FAILED, started_at=clock())
    return work


def api(client, method, url, secret=None, body=None):
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    if body is None:
        return client.generic(method, url, headers=headers)
    return client.generic(method, url, json.dumps(body), content_type="application/json", headers=headers)


def pr(clock, number=1, action="opened", **kw):
    return accept(clock, f"github.pull_request.{action}", {"repo": "acme/api", "number": number}, **kw)


def holding_work(clock, r, *, event_id="stuck"):
    """A Work (started by a pull request) and an Event for it that keeps failing (retried, in
    backoff), and a later Event for the Work waiting behind it."""
    opened = pr(clock, 1)
    r.route(opened.seq)
    work_id = RouteRecord.objects.get(event=opened).work_id
    sample_handlers.BROKEN.add(event_id)
    stuck = accept(clock, "x.comment", {"keys": []}, correlation=["pr:acme/api#1"], id=event_id)
    later = pr(clock, 1, action="edited")
    drain(r)
    return work_id, stuck, later


def events_command(*args):
    out = io.StringIO()
    call_command("events", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()
