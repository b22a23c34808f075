"""The Work list, ``work list`` and the API mark and filter the Work a pause holds: ready Work of
a paused scope or binding reads "paused" (the pause's who, when and why in its title), the status
filter ``paused`` finds it, and ``ready`` no longer does."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import call_command
from django.urls import reverse

from conduit_site.console.views import work as work_views
from tests.worklife.factories import WorkFactory
from worklife.models import PauseKind
from worklife.pauses import PauseTarget, pause_create, pause_end

pytestmark = pytest.mark.django_db

BINDING = PauseTarget(PauseKind.BINDING, "acme", "triage")


@pytest.fixture
def paused(clock, monkeypatch):
    """Ready Work on binding triage (paused), on another binding, and a running Work of triage."""
    monkeypatch.setattr(work_views, "clock", clock)
    held = WorkFactory(pending_run=True)
    other = WorkFactory(pending_run=True, binding="digest")
    running = WorkFactory(status="running")
    pause_create(target=BINDING, paused_by="alice", reason="incident 42", until=None, clock=clock)
    return held, other, running


def _rows(body: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'<tr id="work-(\d+)">', body)]


def test_the_work_list_marks_the_work_a_paused_binding_holds_and_filters_it(console, paused, clock):
    held, other, running = paused
    body = console.get(reverse("work-list")).content.decode()
    row = re.search(rf'<tr id="work-{held.pk}">(.*?)</tr>', body, re.S).group(1)
    assert (
        '<span class="badge badge-paused" title="held: binding &#x27;triage&#x27; in acme is paused by alice'
        in row
    )
    assert "incident 42" in row
    for pk in (other.pk, running.pk):
        assert "badge-paused" not in re.search(rf'<tr id="work-{pk}">(.*?)</tr>', body, re.S).group(1)
    assert _rows(console.get(reverse("work-list"), {"status": "paused"}).content.decode()) == [held.pk]
    assert _rows(console.get(reverse("work-list"), {"status": "ready"}).content.decode()) == [other.pk]
    pause_end(target=BINDING, ended_by="bob", clock=clock)
    assert _rows(console.get(reverse("work-list"), {"status": "paused"}).content.decode()) == []
    assert "badge-paused" not in console.get(reverse("work-list")).content.decode()


def test_the_work_page_status_reads_paused_while_its_scope_is_paused(console, clock, monkeypatch):
    monkeypatch.setattr(work_views, "clock", clock)
    work = WorkFactory(pending_run=True)
    pause_create(
        target=PauseTarget(PauseKind.SCOPE, "acme"), paused_by="alice", reason="", until=None, clock=clock
    )
    body = console.get(reverse("work-detail", args=[work.pk])).content.decode()
    assert '<span class="badge badge-paused" title="held: scope acme is paused by alice' in body


def test_work_list_and_the_api_mark_and_filter_paused_work(client, reader_auth, paused):
    held, other, _ = paused
    out = io.StringIO()
    call_command("work", "list", "--status", "paused", stdout=out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Work {held.pk}  ready (paused by alice at ")
    assert lines[0].split("  ")[1].endswith(": incident 42)")
    out = io.StringIO()
    call_command("work", "get", str(other.pk), stdout=out)
    assert "paused" not in out.getvalue().splitlines()[0]
    body = client.get("/api/work", {"status": "paused"}, headers=reader_auth).json()
    assert [work["id"] for work in body["work"]] == [held.pk]
