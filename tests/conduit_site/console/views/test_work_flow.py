"""The console, the API and ``work get`` say flow control's hold: the Work page's why-not-running
line names the limit and the Work running on its gate, the Work list marks and filters Work held
by flow control, the Work JSON carries the hold."""

from __future__ import annotations

import io
import json
import re
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.urls import reverse

from conduit_site.console.views import work as work_views
from tests.worklife.factories import AttemptFactory, WorkFactory
from worklife.flow import gate_name

pytestmark = pytest.mark.django_db

GATE = gate_name("concurrency", "acme", "triage")


@pytest.fixture
def held(clock, monkeypatch):
    """Two Work running on the gate of binding triage, and one held at its limit of 2."""
    monkeypatch.setattr(work_views, "clock", clock)
    running = [WorkFactory(status="running") for _ in range(2)]
    for work in running:
        AttemptFactory(work=work, number=1, state="running", concurrency_key=GATE, started_at=clock())
    work = WorkFactory(
        pending_run=True,
        hold_kind="concurrency",
        hold_reason="binding `triage` is at its concurrency limit 2",
        hold_gate=GATE,
        held_until=clock() + timedelta(seconds=30),
    )
    return work, running


def test_the_work_page_says_which_limit_holds_the_work_and_what_runs_on_it(console, held):
    work, running = held
    body = console.get(reverse("work-detail", args=[work.pk])).content.decode()
    assert (
        '<dd id="work-why" data-reason="flow_held">held: binding `triage` is at its concurrency limit 2'
        f" — running: Work {running[0].pk}, {running[1].pk}"
    ) in body.replace("&#x60;", "`")


def test_the_work_list_marks_and_filters_the_work_held_by_flow_control(console, held, clock):
    work, running = held
    body = console.get(reverse("work-list")).content.decode()
    row = re.search(rf'<tr id="work-{work.pk}">(.*?)</tr>', body, re.S).group(1)
    assert "held by flow control</span>" in row and "concurrency limit" in row
    filtered = console.get(reverse("work-list"), {"status": "flow_held"}).content.decode()
    assert [int(pk) for pk in re.findall(r'<tr id="work-(\d+)">', filtered)] == [work.pk]
    assert '<option value="flow_held" selected>held by flow control</option>' in filtered
    clock.advance(seconds=31)  # past its recheck: the claim looks at it again
    later = console.get(reverse("work-list"), {"status": "flow_held"}).content.decode()
    assert re.findall(r'<tr id="work-(\d+)">', later) == []


def test_the_work_json_and_work_get_carry_the_hold(client, reader_auth, held):
    work, _ = held
    body = client.get(f"/api/work/{work.pk}", headers=reader_auth).json()
    assert body["flow_hold"]["kind"] == "concurrency"
    assert body["flow_hold"]["gate"] == GATE
    assert body["flow_hold"]["reason"] == "binding `triage` is at its concurrency limit 2"
    out = io.StringIO()
    call_command("work", "get", str(work.pk), "--json", stdout=out)
    assert json.loads(out.getvalue())["flow_hold"]["kind"] == "concurrency"
