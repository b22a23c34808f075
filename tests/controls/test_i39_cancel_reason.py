"""A cancel takes an optional reason (issue 39 item 10j): the service, the API, the CLI and the
console keep it with the control Event, and the Work's history and the Event page show it."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.urls import reverse

from causal.models import Event
from conduit_site.api import work as api_work
from conduit_site.console.views import work_controls as control_views
from controls import work as controls
from controls.work import WorkControlInvalid
from tests.controls.test_work import CONTROLS, grant, parked_work
from tests.routing.factories import UserFactory, api_token_with_secret
from tests.routing.routerkit import apply

pytestmark = pytest.mark.django_db

WHY = "duplicate of Work 7, handled there"


@pytest.fixture(autouse=True)
def live(clock, monkeypatch, test_handlers):
    monkeypatch.setattr(api_work, "clock", clock)
    monkeypatch.setattr(control_views, "clock", clock)
    return apply(clock)


def control_data(seq: int) -> dict:
    return Event.objects.get(seq=seq).data


def test_i39_10_j_the_service_keeps_the_reason_with_the_control_event(clock):
    work = parked_work(clock)

    result = controls.work_cancel(work_id=work.pk, user="ada", clock=clock, reason=f"  {WHY}\n")

    assert control_data(result.control_seq)["reason"] == WHY
    assert result.reason == WHY and f"cancelled by ada: {WHY}" in result.message
    other = parked_work(clock)
    plain = controls.work_cancel(work_id=other.pk, user="ada", clock=clock)
    assert "reason" not in control_data(plain.control_seq) and plain.reason == ""
    with pytest.raises(WorkControlInvalid, match="reason: at most 500"):
        controls.work_cancel(work_id=parked_work(clock).pk, user="ada", clock=clock, reason="x" * 501)


def test_i39_10_j_the_api_takes_an_optional_reason(client, clock):
    token, secret = api_token_with_secret(user__username="dave")
    grant(token.user, "cancel_work")
    headers = {"Authorization": f"Bearer {secret}"}
    url = reverse("api-work-cancel", args=[parked_work(clock).pk])

    answer = client.post(url, json.dumps({"reason": WHY}), content_type="application/json", headers=headers)

    assert answer.status_code == 200, answer.content
    assert answer.json()["reason"] == WHY and control_data(answer.json()["control_seq"])["reason"] == WHY
    bare = client.post(reverse("api-work-cancel", args=[parked_work(clock).pk]), headers=headers)
    assert bare.status_code == 200 and bare.json()["reason"] == ""
    wrong = client.post(
        reverse("api-work-cancel", args=[parked_work(clock).pk]),
        json.dumps({"why": WHY}),
        content_type="application/json",
        headers=headers,
    )
    assert wrong.status_code == 400 and wrong.json()["field"] == "why"


def test_i39_10_j_the_cli_takes_reason(clock):
    work = parked_work(clock)
    out = io.StringIO()

    call_command("work", "cancel", str(work.pk), "--reason", WHY, "--json", stdout=out)

    assert control_data(json.loads(out.getvalue())["control_seq"])["reason"] == WHY


def test_i39_10_j_the_console_asks_why_and_the_history_shows_it(client, clock):
    client.force_login(grant(UserFactory(username="operator"), *CONTROLS))
    work = parked_work(clock)
    page = client.get(reverse("work-detail", args=[work.pk])).content.decode()
    assert 'hx-prompt="Cancel Work' in page and "Why (optional)?" in page

    client.post(
        reverse("work-cancel", args=[work.pk]),
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="work-controls",
        HTTP_HX_PROMPT=WHY,
    )

    history = client.get(reverse("work-detail", args=[work.pk])).content.decode()
    assert f'<q class="control-reason">{WHY}</q>' in history
    (control,) = Event.objects.filter(type="core.manual.cancel_work")
    event_page = client.get(reverse("event-detail", args=[control.seq])).content.decode()
    assert f"used the control cancel_work on Work #{work.pk}: \u201c{WHY}\u201d" in event_page


def test_i39_10_j_the_confirmation_page_without_javascript_has_a_reason_field(client, clock):
    client.force_login(grant(UserFactory(username="operator"), *CONTROLS))
    work = parked_work(clock)
    form = client.get(reverse("work-cancel", args=[work.pk])).content.decode()
    assert 'name="reason"' in form

    client.post(reverse("work-cancel", args=[work.pk]), {"reason": WHY})

    (control,) = Event.objects.filter(type="core.manual.cancel_work")
    assert control.data["reason"] == WHY
