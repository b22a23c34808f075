"""Operator controls on Work: cancel (R48), retry, send input (R30), create and rebind, through
the services, the JSON API, the CLI and the console (the Work page with and without htmx)."""

from __future__ import annotations

import io
import json
import re
import threading

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.urls import reverse

from causal.models import Event, RouteState
from conduit_site.api import work as api_work
from conduit_site.console.views import work_controls as control_views
from controls import work as controls
from controls.work import WorkControlInvalid, WorkControlRefused
from routing.engine.decide import addressed_binding
from routing.engine.world import read_work_views
from routing.models import RouteRecord
from tests.controls.controlkit import CONTROLS, HTMX, api, control_events, grant, parked_work, stored
from tests.routing.factories import UserFactory, api_token_with_secret
from tests.routing.routerkit import apply, drain, router
from tests.worklife.factories import (
    RETRY_CASES,
    AttemptFactory,
    CorrelationKeyFactory,
    TimerFactory,
    WaitFactory,
    WorkFactory,
    WorkInputFactory,
)
from worklife.models import (
    AttemptState,
    InputState,
    TimerState,
    WaitState,
    Work,
    WorkInput,
    WorkStatus,
)
from worklife.scheduling import claimable_work_in_tx


@pytest.fixture(autouse=True)
def handlers(test_handlers):
    """Every test here routes with the test handlers registered (tests/conftest.py)."""


@pytest.fixture(autouse=True)
def fake_clocks(clock, monkeypatch):
    """The API and the console act at the test's clock."""
    monkeypatch.setattr(api_work, "clock", clock)
    monkeypatch.setattr(control_views, "clock", clock)


def running_work(clock, **fields) -> Work:
    """A running Work of acme on triage with its first attempt live."""
    work = WorkFactory(scope="acme", binding="triage", status=WorkStatus.RUNNING, **fields)
    AttemptFactory(work=work, number=1, binding="triage", state=AttemptState.RUNNING, started_at=clock())
    return work


def assert_control_event(result, action: str, work: Work, by: str) -> Event:
    """The control Event committed with the effect: names the Work and the actor, settled at
    once on the Work (policy control) so it never routes through user routes."""
    control = Event.objects.get(seq=result.control_seq)
    assert (control.source, control.type) == ("core.manual", f"core.manual.{action}")
    assert control.data["work"] == work.pk and control.data["by"] == by
    assert control.accepted_by == by and control.route_state == RouteState.ROUTED
    record = RouteRecord.objects.get(event=control)
    assert (record.work_id, record.policy, record.reason, record.decided_by) == (
        work.pk,
        "control",
        action,
        by,
    )
    return control


# --- services ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_r48_cancel_ends_attempts_waits_timers_and_queue_with_a_control_event(clock, live):
    work = running_work(clock)
    attempt = work.attempts.get()
    wait = WaitFactory(work=work, attempt=attempt)
    timer = TimerFactory(work=work)
    queued = WorkInputFactory(work=work)

    result = controls.work_cancel(work_id=work.pk, user="alice", clock=clock)

    work.refresh_from_db()
    assert work.status == WorkStatus.CANCELLED and work.ended_at == clock()
    attempt.refresh_from_db()
    assert attempt.state == AttemptState.CANCELLED  # its work loop stops the process after commit
    wait.refresh_from_db()
    timer.refresh_from_db()
    queued.refresh_from_db()
    assert (wait.state, timer.state, queued.state) == (
        WaitState.CANCELLED,
        TimerState.CANCELLED,
        InputState.DROPPED,
    )
    assert (result.action, result.status, result.attempts_cancelled) == ("cancel_work", "cancelled", 1)
    assert_control_event(result, "cancel_work", work, "alice")
    assert "cancelled by alice" in result.message and "stops the process" in result.message


@pytest.mark.django_db
def test_r48_r49_cancel_of_terminal_work_is_refused_and_stores_nothing(clock, live):
    work = WorkFactory(scope="acme", status=WorkStatus.COMPLETED, ended_at=clock())
    before = stored()
    with pytest.raises(WorkControlRefused, match=rf"Work {work.pk} is already completed") as refused:
        controls.work_cancel(work_id=work.pk, user="alice", clock=clock)
    assert refused.value.details()["error"] == "wrong_state"
    assert refused.value.details()["status"] == "completed"
    assert stored() == before
    with pytest.raises(Work.DoesNotExist, match="no Work has id 999999"):
        controls.work_cancel(work_id=999999, user="alice", clock=clock)


@pytest.mark.django_db
def test_w5_retry_runs_a_parked_work_again_at_once_with_a_control_event(clock, live):
    work = parked_work(clock)
    result = controls.work_retry(work_id=work.pk, user="alice", clock=clock)
    work.refresh_from_db()
    assert (work.parked_at, work.retry_at, work.failures, work.pending_run) == (None, None, 0, True)
    assert_control_event(result, "retry_work", work, "alice")
    # Claimable again by a work loop now.
    from django.db import transaction

    with transaction.atomic():
        assert work.pk in claimable_work_in_tx(now=clock(), limit=10)


@pytest.mark.django_db
def test_w5_retry_of_work_neither_parked_nor_backing_off_is_refused_and_stores_nothing(clock, live):
    ready = WorkFactory(scope="acme")
    cancelled = WorkFactory(scope="acme", status=WorkStatus.CANCELLED)
    before = stored()
    with pytest.raises(WorkControlRefused, match="neither parked nor backing off"):
        controls.work_retry(work_id=ready.pk, user="alice", clock=clock)
    with pytest.raises(WorkControlRefused, match="is cancelled"):
        controls.work_retry(work_id=cancelled.pk, user="alice", clock=clock)
    assert stored() == before


@pytest.mark.django_db
def test_r30_sent_input_is_an_addressed_operator_event_the_router_queues_on_the_work(clock, live):
    work = running_work(clock)
    result = controls.work_input_send(
        work_id=work.pk,
        event_type="operator.note",
        data={"text": "look again"},
        subject="PR 7",
        user="alice",
        clock=clock,
    )
    sent = Event.objects.get(seq=result.input_seq)
    assert (sent.source, sent.type, sent.work_id, sent.scope) == (
        "core.manual",
        "operator.note",
        work.pk,
        "acme",
    )
    assert (sent.data, sent.subject, sent.accepted_by) == ({"text": "look again"}, "PR 7", "alice")
    control = assert_control_event(result, "send_input", work, "alice")
    assert control.data["input"] == sent.seq
    assert sent.route_state == RouteState.UNROUTED  # the router decides, not the control

    drain(router(clock))
    record = RouteRecord.objects.get(event=sent)
    assert (record.work_id, record.policy, record.reason, record.binding) == (
        work.pk,
        "queue",
        "addressed",
        "triage",
    )
    assert WorkInput.objects.get(event=sent).state == InputState.PENDING


@pytest.mark.django_db
def test_r30_r49_send_to_terminal_work_or_with_a_core_type_is_refused_and_stores_nothing(clock, live):
    work = WorkFactory(scope="acme", status=WorkStatus.CANCELLED)
    live_work = WorkFactory(scope="acme")
    before = stored()
    with pytest.raises(WorkControlRefused, match="terminal Work takes no more input"):
        controls.work_input_send(work_id=work.pk, event_type="operator.note", user="alice", clock=clock)
    with pytest.raises(WorkControlInvalid, match="reserved for core Events") as invalid:
        controls.work_input_send(work_id=live_work.pk, event_type="core.wait.woken", user="a", clock=clock)
    assert invalid.value.field == "type"
    with pytest.raises(WorkControlInvalid, match="reserved for core Events") as shouting:
        controls.work_input_send(work_id=live_work.pk, event_type="CORE.Wait.Woken", user="a", clock=clock)
    assert shouting.value.field == "type"
    with pytest.raises(WorkControlInvalid) as empty:
        controls.work_input_send(work_id=live_work.pk, event_type=" ", user="a", clock=clock)
    assert empty.value.field == "type"
    assert stored() == before


@pytest.mark.django_db
def test_r30_create_work_accepts_its_first_input_as_addressed_so_it_runs(clock, live):
    result = controls.work_create(
        scope="acme",
        binding="inbox",
        event_type="operator.task",
        data={"do": "triage"},
        user="alice",
        clock=clock,
    )
    work = Work.objects.get(pk=result.work_id)
    assert (work.scope, work.binding, work.status, work.created_by) == ("acme", "inbox", "ready", "alice")
    assert work.trigger_id == result.input_seq and not work.pending_run
    first = Event.objects.get(seq=result.input_seq)
    assert (first.source, first.type, first.work_id) == ("core.manual", "operator.task", work.pk)
    control = assert_control_event(result, "create_work", work, "alice")
    assert (control.data["binding"], control.data["input"]) == ("inbox", first.seq)

    from django.db import transaction

    with transaction.atomic():  # nothing to run before the router queues the input
        assert work.pk not in claimable_work_in_tx(now=clock(), limit=10)
    drain(router(clock))
    record = RouteRecord.objects.get(event=first)
    assert (record.work_id, record.policy, record.reason, record.binding) == (
        work.pk,
        "queue",
        "addressed",
        "inbox",
    )
    with transaction.atomic():
        assert work.pk in claimable_work_in_tx(now=clock(), limit=10)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "scope,binding,code,message",
    [
        ("nowhere", "triage", "unknown_scope", "unknown scope 'nowhere'"),
        ("acme", "ghost", "unknown_binding", "unknown binding 'ghost': not in scope acme"),
    ],
)
def test_r30_create_work_in_an_unknown_scope_or_binding_is_refused_and_stores_nothing(
    clock, live, scope, binding, code, message
):
    before = stored()
    with pytest.raises(WorkControlRefused, match=message) as refused:
        controls.work_create(scope=scope, binding=binding, event_type="operator.task", user="a", clock=clock)
    assert refused.value.code == code
    assert stored() == before


@pytest.mark.django_db
def test_r30_create_work_refuses_bad_arguments_naming_the_field(clock, live):
    before = stored()
    for kwargs, field in [
        ({"scope": "", "binding": "inbox", "event_type": "t"}, "scope"),
        ({"scope": "acme", "binding": "", "event_type": "t"}, "binding"),
        ({"scope": "acme", "binding": "inbox", "event_type": "core.work.created"}, "input.type"),
        ({"scope": "acme", "binding": "inbox", "event_type": "t", "subject": 3}, "input.subject"),
        ({"scope": "acme", "binding": "inbox", "event_type": "t", "data": float("nan")}, "input.data"),
    ]:
        with pytest.raises(WorkControlInvalid) as invalid:
            controls.work_create(**kwargs, user="a", clock=clock)
        assert invalid.value.field == field, kwargs
    assert stored() == before


@pytest.mark.django_db
def test_r30_rebind_makes_the_binding_the_one_the_work_runs_on_next(clock, live):
    work = running_work(clock)
    result = controls.work_rebind(work_id=work.pk, binding="plain", user="alice", clock=clock)
    work.refresh_from_db()
    assert (work.rebind_binding, work.rebind_after_attempt, work.retry_binding) == ("plain", 1, "")
    assert (result.previous_binding, result.binding) == ("triage", "plain")
    control = assert_control_event(result, "rebind_work", work, "alice")
    assert (control.data["binding"], control.data["previous"]) == ("plain", "triage")
    assert addressed_binding(read_work_views([work.pk])[work.pk]) == "plain"

    # Operator input sent now is queued on the new binding (R30).
    sent = controls.work_input_send(work_id=work.pk, event_type="operator.note", user="alice", clock=clock)
    drain(router(clock))
    record = RouteRecord.objects.get(event_id=sent.input_seq)
    assert (record.reason, record.binding) == ("addressed", "plain")


@pytest.mark.django_db
def test_r30_rebind_of_a_parked_work_moves_its_retry_and_pending_input(clock, live):
    work = parked_work(clock)
    queued = WorkInputFactory(work=work, binding="triage")
    controls.work_rebind(work_id=work.pk, binding="plain", user="alice", clock=clock)
    work.refresh_from_db()
    queued.refresh_from_db()
    assert (work.retry_binding, work.rebind_binding, queued.binding) == ("plain", "plain", "plain")
    assert addressed_binding(read_work_views([work.pk])[work.pk]) == "plain"


@pytest.mark.django_db
def test_r30_rebind_to_an_unknown_binding_or_of_terminal_work_is_refused_and_stores_nothing(clock, live):
    work = running_work(clock)
    ended = WorkFactory(scope="acme", status=WorkStatus.COMPLETED)
    before = stored()
    with pytest.raises(
        WorkControlRefused, match=r"unknown binding 'ghost'.*bindings there: inbox, plain, triage"
    ):
        controls.work_rebind(work_id=work.pk, binding="ghost", user="alice", clock=clock)
    with pytest.raises(WorkControlRefused, match="terminal Work cannot be rebound"):
        controls.work_rebind(work_id=ended.pk, binding="plain", user="alice", clock=clock)
    with pytest.raises(WorkControlInvalid):
        controls.work_rebind(work_id=work.pk, binding="  ", user="alice", clock=clock)
    assert stored() == before
    work.refresh_from_db()
    assert (work.rebind_binding, work.version) == ("", 1)


# --- JSON API ----------------------------------------------------------------------------------


def api_calls(work_id: int) -> dict[str, tuple[str, dict | None]]:
    """Each control's URL and a body it takes."""
    return {
        "cancel_work": (reverse("api-work-cancel", args=[work_id]), None),
        "retry_work": (reverse("api-work-retry", args=[work_id]), None),
        "send_input": (reverse("api-work-send", args=[work_id]), {"type": "operator.note", "data": {"n": 1}}),
        "create_work": (
            reverse("api-work"),
            {"scope": "acme", "binding": "inbox", "input": {"type": "operator.task"}},
        ),
        "rebind_work": (reverse("api-work-rebind", args=[work_id]), {"binding": "plain"}),
    }


@pytest.mark.django_db
@pytest.mark.parametrize("action", CONTROLS)
def test_r48_r30_api_work_controls_need_a_token_and_their_own_permission(client, clock, live, action):
    work = parked_work(clock)
    url, body = api_calls(work.pk)[action]
    assert api(client, "POST", url, body=body).status_code == 401
    token, secret = api_token_with_secret(user__username="dave")
    grant(token.user, *(c for c in CONTROLS if c != action))  # every other control's permission
    before = stored()
    refused = api(client, "POST", url, secret, body)
    assert refused.status_code == 403, refused.content
    assert refused.json()["error"] == "forbidden" and f"worklife.{action}" in refused.json()["message"]
    assert stored() == before

    grant(token.user, action)
    response = api(client, "POST", url, secret, body)
    assert response.status_code == (201 if action == "create_work" else 200), response.content
    result = response.json()
    assert (result["action"], result["by"]) == (action, "dave") and result["message"]
    assert [e.seq for e in control_events(action)] == [result["control_seq"]]


@pytest.mark.django_db
def test_r48_cancel_through_the_api_commits_a_control_event(client, clock, live):
    work = running_work(clock)
    token, secret = api_token_with_secret(user__username="erin")
    grant(token.user, "cancel_work")
    response = api(client, "POST", reverse("api-work-cancel", args=[work.pk]), secret)
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["work_id"], body["status"], body["attempts_cancelled"]) == (work.pk, "cancelled", 1)
    control = Event.objects.get(seq=body["control_seq"])
    assert control.type == "core.manual.cancel_work" and control.data == {"work": work.pk, "by": "erin"}

    again = api(client, "POST", reverse("api-work-cancel", args=[work.pk]), secret)
    assert again.status_code == 409
    assert again.json() == {
        "error": "wrong_state",
        "message": f"Work {work.pk} is already cancelled: only live Work can be cancelled",
        "action": "cancel_work",
        "work_id": work.pk,
        "status": "cancelled",
    }
    missing = api(client, "POST", reverse("api-work-cancel", args=[999999]), secret)
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"
    assert (
        client.get(
            reverse("api-work-cancel", args=[work.pk]), headers={"Authorization": f"Bearer {secret}"}
        ).status_code
        == 405
    )
    assert len(control_events("cancel_work")) == 1


@pytest.mark.django_db
def test_r30_send_create_and_rebind_through_the_api(client, clock, live):
    token, secret = api_token_with_secret(user__username="frank")
    grant(token.user, "create_work", "send_input", "rebind_work", "retry_work")
    created = api(
        client,
        "POST",
        reverse("api-work"),
        secret,
        {
            "scope": "acme",
            "binding": "triage",
            "input": {"type": "operator.task", "data": {"pr": 7}, "subject": "s"},
        },
    )
    assert created.status_code == 201, created.content
    work_id = created.json()["work_id"]
    assert created["Location"] == reverse("api-work-detail", args=[work_id])
    first = Event.objects.get(seq=created.json()["input_seq"])
    assert (first.data, first.subject, first.work_id) == ({"pr": 7}, "s", work_id)

    sent = api(client, "POST", reverse("api-work-send", args=[work_id]), secret, {"type": "operator.note"})
    assert sent.status_code == 200 and sent.json()["input_seq"] > first.seq
    rebound = api(client, "POST", reverse("api-work-rebind", args=[work_id]), secret, {"binding": "plain"})
    assert rebound.status_code == 200 and rebound.json()["previous_binding"] == "triage"
    retry = api(client, "POST", reverse("api-work-retry", args=[work_id]), secret)
    assert retry.status_code == 409 and retry.json()["error"] == "wrong_state"
    assert "neither parked nor backing off" in retry.json()["message"]

    drain(router(clock))
    reasons = list(
        RouteRecord.objects.filter(work_id=work_id, policy="queue")
        .order_by("event_id")
        .values_list("reason", "binding")
    )
    assert reasons == [("addressed", "plain"), ("addressed", "plain")]  # rebound before routing

    detail = api(client, "GET", reverse("api-work-detail", args=[work_id]), secret)
    assert detail.status_code == 200
    body = detail.json()
    assert (body["id"], body["rebind_binding"], body["trigger_seq"], body["attempts"]) == (
        work_id,
        "plain",
        first.seq,
        [],
    )
    listed = api(client, "GET", reverse("api-work") + "?scope=acme&limit=1", secret).json()
    assert [w["id"] for w in listed["work"]] == [work_id] and listed["next_before"] is None
    missing = api(client, "GET", reverse("api-work-detail", args=[999999]), secret)
    assert missing.status_code == 404


@pytest.mark.django_db
@pytest.mark.parametrize(
    "action,body,status,error,field",
    [
        ("send_input", {"type": "core.manual.x"}, 400, "invalid_input", "type"),
        ("send_input", {"data": {}}, 400, "invalid_input", "type"),
        ("send_input", {"type": "a", "extra": 1}, 400, "invalid_input", "extra"),
        ("send_input", [1], 400, "invalid_input", None),
        ("create_work", {"scope": "acme", "binding": "inbox"}, 400, "invalid_input", "input"),
        (
            "create_work",
            {"scope": "acme", "binding": "inbox", "input": {"type": "core"}},
            400,
            "invalid_input",
            "input.type",
        ),
        (
            "create_work",
            {"scope": "acme", "binding": "inbox", "input": {"type": "t", "x": 1}},
            400,
            "invalid_input",
            "input.x",
        ),
        (
            "create_work",
            {"scope": "nowhere", "binding": "inbox", "input": {"type": "t"}},
            409,
            "unknown_scope",
            None,
        ),
        (
            "create_work",
            {"scope": "acme", "binding": "ghost", "input": {"type": "t"}},
            409,
            "unknown_binding",
            None,
        ),
        ("rebind_work", {}, 400, "invalid_input", "binding"),
        ("rebind_work", {"binding": "ghost"}, 409, "unknown_binding", None),
    ],
)
def test_r30_api_bad_input_is_400_naming_the_field_and_refusals_are_409_storing_nothing(
    client, clock, live, action, body, status, error, field
):
    work = running_work(clock)
    token, secret = api_token_with_secret(user__username="gina")
    grant(token.user, *CONTROLS)
    url = api_calls(work.pk)[action][0]
    before = stored()
    response = api(client, "POST", url, secret, body)
    assert response.status_code == status, response.content
    payload = response.json()
    assert payload["error"] == error and payload["message"]
    if field is not None:
        assert payload["field"] == field
    assert stored() == before


@pytest.mark.django_db
def test_api_work_list_refuses_a_bad_filter_naming_it(client, clock, live):
    token, secret = api_token_with_secret(user__username="hana")
    for query, field in [("?status=sleeping", "status"), ("?limit=0", "limit"), ("?before=x", "before")]:
        response = api(client, "GET", reverse("api-work") + query, secret)
        assert response.status_code == 400 and response.json()["field"] == field, query


# --- CLI -----------------------------------------------------------------------------------------


def work_command(*args, stdin=None):
    out = io.StringIO()
    call_command("work", *args, stdout=out, stderr=io.StringIO(), **({"stdin": stdin} if stdin else {}))
    return out.getvalue()


@pytest.mark.django_db
def test_r48_cli_cancel_records_the_actor_without_a_permission_check(clock, live):
    work = running_work(clock)
    UserFactory(username="ivan")  # no permission at all: the CLI is trusted host access
    out = work_command("cancel", str(work.pk), "--as", "ivan")
    assert out.startswith(f"Work {work.pk} cancelled by ivan")
    [control] = control_events("cancel_work")
    assert control.data["by"] == "ivan" and RouteRecord.objects.get(event=control).decided_by == "ivan"

    with pytest.raises(
        CommandError, match=rf"refused, nothing was changed: Work {work.pk} is already cancelled"
    ):
        work_command("cancel", str(work.pk))
    out = io.StringIO()
    with pytest.raises(CommandError, match="ID: no Work has id 999999"):
        call_command("work", "cancel", "999999", "--json", stdout=out)
    assert json.loads(out.getvalue())["error"] == "not_found"
    with pytest.raises(CommandError, match="--as: no user named 'ghost'"):
        work_command("retry", str(work.pk), "--as", "ghost")
    assert len(control_events()) == 1


@pytest.mark.django_db
def test_r30_cli_create_send_rebind_and_retry(clock, live):
    created = json.loads(
        work_command(
            "create",
            "--scope",
            "acme",
            "--binding",
            "inbox",
            "--type",
            "operator.task",
            "--data",
            '{"pr": 7}',
            "--json",
        )
    )
    work_id = created["work_id"]
    assert (created["action"], created["by"], created["binding"]) == ("create_work", "cli", "inbox")
    assert Event.objects.get(seq=created["input_seq"]).data == {"pr": 7}

    out = work_command(
        "send", str(work_id), "--type", "operator.note", "--data-file", "-", stdin=io.StringIO('"hi"')
    )
    assert out.startswith("Input #") and f"sent to Work {work_id} by cli" in out
    rebound = json.loads(work_command("rebind", str(work_id), "plain", "--json"))
    assert (rebound["previous_binding"], rebound["binding"]) == ("inbox", "plain")

    parked = parked_work(clock)
    out = work_command("retry", str(parked.pk))
    assert out.startswith(f"Work {parked.pk} retried by cli")
    assert [e.type for e in control_events()] == [
        "core.manual.create_work",
        "core.manual.send_input",
        "core.manual.rebind_work",
        "core.manual.retry_work",
    ]

    listed = work_command("list", "--scope", "acme", "--limit", "1").splitlines()
    assert listed[0].startswith(f"Work {parked.pk}  ready  scope acme  binding triage")
    assert listed[1] == f"More: add --before {parked.pk} for the next page."
    listed = work_command("list", "--before", str(parked.pk))
    assert listed.startswith(f"Work {work_id}  ready  scope acme  binding inbox") and listed.endswith(
        "by cli\n"
    )
    got = work_command("get", str(work_id))
    assert "rebound: plain after attempt 0" in got and f"trigger: #{created['input_seq']}" in got
    assert json.loads(work_command("get", str(work_id), "--json"))["rebind_binding"] == "plain"


@pytest.mark.django_db
def test_w5_cli_work_list_marks_parked_and_backing_off_work_as_the_console_does(clock, live):
    """``work list`` and ``work get`` say what holds a Work back, as the console's Work list
    does: a parked Work looked plainly "ready" before."""
    from datetime import timedelta

    from causal.clock import system_clock

    parked = parked_work(clock)
    backing = WorkFactory(
        scope="acme", binding="triage", failures=2, retry_at=system_clock() + timedelta(hours=1)
    )
    waited = WorkFactory(
        scope="acme", binding="triage", failures=1, retry_at=system_clock() - timedelta(hours=1)
    )
    done = WorkFactory(scope="acme", status=WorkStatus.COMPLETED, parked_at=clock())
    lines = {line.split("  ")[0]: line for line in work_command("list", "--scope", "acme").splitlines()}
    assert lines[f"Work {parked.pk}"].startswith(f"Work {parked.pk}  ready (parked)  scope acme")
    assert re.match(
        rf"Work {backing.pk}  ready \(backing off until \S+ \(2 failures\)\)  scope acme",
        lines[f"Work {backing.pk}"],
    )
    assert lines[f"Work {waited.pk}"].startswith(f"Work {waited.pk}  ready  scope acme")
    assert lines[f"Work {done.pk}"].startswith(f"Work {done.pk}  completed  scope acme")
    got = work_command("get", str(parked.pk)).splitlines()
    assert got[0].startswith(f"Work {parked.pk}  ready (parked)") and "after 5 failures" in got[1]


@pytest.mark.django_db
def test_r48_r30_cli_refusals_exit_non_zero_name_the_problem_and_store_nothing(clock, live):
    work = WorkFactory(scope="acme", status=WorkStatus.COMPLETED)
    ready = WorkFactory(scope="acme")
    before = stored()
    cases = [
        (("send", str(work.pk), "--type", "operator.note"), "terminal Work takes no more input"),
        (("send", str(ready.pk), "--type", "core.x"), "--type: type 'core.x' is reserved"),
        (("send", str(ready.pk), "--type", "t", "--data", "{nope"), "--data: invalid JSON"),
        (("retry", str(ready.pk)), "neither parked nor backing off"),
        (("rebind", str(ready.pk), "ghost"), "unknown binding 'ghost'"),
        (("create", "--scope", "nowhere", "--binding", "inbox", "--type", "t"), "unknown scope 'nowhere'"),
        (("create", "--scope", "acme", "--binding", "ghost", "--type", "t"), "unknown binding 'ghost'"),
        (("list", "--status", "sleeping"), "--status: unknown status"),
    ]
    for args, message in cases:
        with pytest.raises(CommandError, match=re.escape(message)):
            work_command(*args)
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("work", "rebind", str(ready.pk), "ghost", "--json", stdout=out)
    assert json.loads(out.getvalue())["error"] == "unknown_binding"
    assert stored() == before


# --- console -------------------------------------------------------------------------------------


@pytest.fixture
def operator():
    return grant(UserFactory(username="operator"), *CONTROLS)


def section(body: str) -> str:
    match = re.search(r'<section id="work-controls".*?</section>', body, re.S)
    assert match, f"no controls section in {body[:2000]}"
    return match.group(0)


@pytest.mark.django_db
def test_d4_work_page_offers_the_controls_by_state_and_permission(client, console, clock, live):
    work = parked_work(clock)
    page = section(console.get(reverse("work-detail", args=[work.pk])).content.decode())
    for name in ("work-cancel", "work-retry", "work-send", "work-rebind"):
        assert f'hx-post="{reverse(name, args=[work.pk])}"' in page, name
    # Without JavaScript: links to the confirmation pages, and plain POST forms.
    assert f'href="{reverse("work-cancel", args=[work.pk])}"' in page
    assert f'<form method="post" action="{reverse("work-send", args=[work.pk])}"' in page
    assert 'hx-prompt="Cancel Work' in page and 'hx-target="#work-controls"' in page
    assert f'href="{reverse("work-create")}?scope=acme&amp;binding=triage"' in page

    running = running_work(clock)
    page = section(console.get(reverse("work-detail", args=[running.pk])).content.decode())
    assert (
        reverse("work-cancel", args=[running.pk]) in page
        and reverse("work-retry", args=[running.pk]) not in page
    )
    ended = WorkFactory(scope="acme", status=WorkStatus.CANCELLED)
    page = section(console.get(reverse("work-detail", args=[ended.pk])).content.decode())
    assert "hx-post" not in page

    client.force_login(grant(UserFactory(username="viewer")))
    page = section(client.get(reverse("work-detail", args=[work.pk])).content.decode())
    assert "hx-post" not in page and "work/new" not in page


@pytest.mark.django_db
def test_d4_r48_console_cancel_with_htmx_swaps_the_controls_and_the_work_state(console, clock, live):
    work = running_work(clock)
    response = console.post(reverse("work-cancel", args=[work.pk]), HTTP_HX_TARGET="work-controls", **HTMX)
    assert response.status_code == 200
    body = response.content.decode()
    assert body.strip().startswith('<section id="work-controls"')
    assert f"Work {work.pk} cancelled by operator" in section(body)
    assert "hx-post" not in section(body)  # terminal: no more controls
    # The Work's state, out of band as the live update sends it.
    assert re.search(r'<section id="work-summary" hx-swap-oob="true">.*badge-cancelled', body, re.S)
    assert "HX-Request" in response["Vary"]
    work.refresh_from_db()
    assert work.status == WorkStatus.CANCELLED

    again = console.post(reverse("work-cancel", args=[work.pk]), **HTMX)
    assert again.status_code == 409
    refused = section(again.content.decode())
    assert f"Work {work.pk} is already cancelled: only live Work can be cancelled" in refused
    assert 'role="alert"' in refused and "work-summary" not in again.content.decode()
    assert len(control_events("cancel_work")) == 1


@pytest.mark.django_db
def test_d4_r48_console_cancel_without_javascript_confirms_then_redirects_back(console, clock, live):
    work = running_work(clock)
    url = reverse("work-cancel", args=[work.pk])
    confirm = console.get(url)
    assert confirm.status_code == 200
    body = confirm.content.decode()
    assert f'<form method="post" action="{url}" id="control-form"' in body and "csrfmiddlewaretoken" in body
    work.refresh_from_db()
    assert work.status == WorkStatus.RUNNING and not control_events()  # a GET changes nothing

    done = console.post(url)
    assert done.status_code == 302 and done["Location"] == reverse("work-detail", args=[work.pk])
    page = console.get(done["Location"]).content.decode()
    assert f"Work {work.pk} cancelled by operator" in section(page)  # what it did, once

    stale = console.get(url)
    assert stale.status_code == 409 and "control-form" not in stale.content.decode()
    assert "only live Work can be cancelled" in stale.content.decode()
    refused = console.post(url)
    assert refused.status_code == 409
    assert f"Work {work.pk} is already cancelled: only live Work can be cancelled" in refused.content.decode()
    assert len(control_events("cancel_work")) == 1


@pytest.mark.django_db
def test_d4_w5_console_retry_with_and_without_javascript(console, clock, live):
    work = parked_work(clock)
    response = console.post(reverse("work-retry", args=[work.pk]), **HTMX)
    assert response.status_code == 200
    assert f"Work {work.pk} retried by operator" in section(response.content.decode())
    # No longer parked: a second retry is refused, with the server's message both ways.
    htmx = console.post(reverse("work-retry", args=[work.pk]), **HTMX)
    assert htmx.status_code == 409 and "neither parked nor backing off" in section(htmx.content.decode())
    plain = console.post(reverse("work-retry", args=[work.pk]))
    assert plain.status_code == 409 and "neither parked nor backing off" in plain.content.decode()
    assert len(control_events("retry_work")) == 1


@pytest.mark.django_db
@pytest.mark.parametrize(("case", "fields", "retryable"), RETRY_CASES, ids=[c[0] for c in RETRY_CASES])
def test_the_console_offers_retry_exactly_where_the_retry_control_takes_it(
    console, clock, live, case, fields, retryable
):
    """One retry rule: the Work page's Retry button, the console's confirmation page and the
    retry control agree on every Work (``Work.is_retryable``)."""
    work = WorkFactory(scope="acme", **fields)
    url = reverse("work-retry", args=[work.pk])
    offered = f'href="{url}"' in console.get(reverse("work-detail", args=[work.pk])).content.decode()
    confirmable = console.get(url).status_code == 200
    try:
        controls.work_retry(work_id=work.pk, user="alice", clock=clock)
    except WorkControlRefused:
        taken = False
    else:
        taken = True
    assert offered is confirmable is taken is retryable


@pytest.mark.django_db
def test_d4_r30_console_send_input_with_and_without_javascript(console, clock, live):
    work = running_work(clock)
    url = reverse("work-send", args=[work.pk])
    response = console.post(url, {"type": "operator.note", "data": '{"text": "hi"}', "subject": ""}, **HTMX)
    assert response.status_code == 200
    assert f"sent to Work {work.pk} by operator" in section(response.content.decode())
    done = console.post(url, {"type": "operator.note", "data": ""})
    assert done.status_code == 302 and done["Location"] == reverse("work-detail", args=[work.pk])
    sent = Event.objects.filter(source="core.manual", type="operator.note").order_by("seq")
    assert [(e.data, e.work_id) for e in sent] == [({"text": "hi"}, work.pk), (None, work.pk)]

    before = stored()
    bad = console.post(url, {"type": "operator.note", "data": "{nope"}, **HTMX)
    assert bad.status_code == 400
    refused = section(bad.content.decode())
    assert "data: invalid JSON" in refused and "{nope" in refused  # what was typed stays
    bad_plain = console.post(url, {"type": "core.thing", "data": ""})
    assert bad_plain.status_code == 400 and "reserved for core Events" in bad_plain.content.decode()
    assert 'value="core.thing"' in bad_plain.content.decode()
    assert stored() == before

    # Terminal Work: the form page says why and offers no form.
    ended = WorkFactory(scope="acme", status=WorkStatus.CANCELLED)
    blocked = console.get(reverse("work-send", args=[ended.pk]))
    assert blocked.status_code == 409 and "control-form" not in blocked.content.decode()
    assert "terminal Work takes no more controls" in blocked.content.decode()


@pytest.mark.django_db
def test_d4_r30_console_rebind_refusal_shows_the_server_message_with_and_without_javascript(
    console, clock, live
):
    work = running_work(clock)
    url = reverse("work-rebind", args=[work.pk])
    form = console.get(url)
    assert form.status_code == 200 and 'name="binding"' in form.content.decode()
    before = stored()
    htmx = console.post(url, {"binding": "ghost"}, **HTMX)
    assert htmx.status_code == 409
    assert "unknown binding &#x27;ghost&#x27;: not in scope acme" in section(htmx.content.decode())
    plain = console.post(url, {"binding": "ghost"})
    assert plain.status_code == 409
    assert (
        "unknown binding &#x27;ghost&#x27;" in plain.content.decode()
        and 'value="ghost"' in plain.content.decode()
    )
    assert stored() == before

    done = console.post(url, {"binding": "plain"})
    assert done.status_code == 302
    work.refresh_from_db()
    assert work.rebind_binding == "plain"


@pytest.mark.django_db
def test_d4_r30_console_create_work_with_and_without_javascript(console, clock, live):
    form = console.get(reverse("work-create") + "?scope=acme&binding=inbox")
    assert form.status_code == 200
    assert 'value="acme"' in form.content.decode() and 'value="inbox"' in form.content.decode()
    data = {"scope": "acme", "binding": "inbox", "type": "operator.task", "data": '{"pr": 7}'}
    done = console.post(reverse("work-create"), data)
    created = Work.objects.get(created_by="operator")
    assert done.status_code == 302 and done["Location"] == reverse("work-detail", args=[created.pk])
    htmx = console.post(reverse("work-create"), data, **HTMX)
    assert htmx.status_code == 200 and htmx["HX-Redirect"].startswith("/work/")

    before = stored()
    refused = console.post(reverse("work-create"), {**data, "binding": "ghost"}, **HTMX)
    assert refused.status_code == 409
    body = refused.content.decode()
    assert (
        body.strip().startswith('<section id="work-control"') and "unknown binding &#x27;ghost&#x27;" in body
    )
    plain = console.post(reverse("work-create"), {**data, "scope": "nowhere"})
    assert plain.status_code == 409 and "unknown scope &#x27;nowhere&#x27;" in plain.content.decode()
    assert stored() == before


@pytest.mark.django_db
@pytest.mark.parametrize("action", CONTROLS)
def test_d4_console_work_controls_need_sign_in_their_permission_and_csrf(clock, live, action):
    work = parked_work(clock)
    url = (
        reverse("work-create")
        if action == "create_work"
        else reverse(
            {
                "cancel_work": "work-cancel",
                "retry_work": "work-retry",
                "send_input": "work-send",
                "rebind_work": "work-rebind",
            }[action],
            args=[work.pk],
        )
    )
    body = {"scope": "acme", "binding": "plain", "type": "operator.note", "data": ""}
    anonymous = Client(enforce_csrf_checks=True)
    response = anonymous.get(url)
    assert response.status_code == 302 and response["Location"].startswith(f"{reverse('login')}?next=")

    viewer = Client(enforce_csrf_checks=True)
    viewer.force_login(grant(UserFactory(username="viewer"), *(c for c in CONTROLS if c != action)))
    viewer.get(reverse("console-home"))  # sets the CSRF cookie
    token = viewer.cookies["csrftoken"].value
    before = stored()
    assert viewer.get(url).status_code == 403
    assert viewer.post(url, body, HTTP_X_CSRFTOKEN=token, **HTMX).status_code == 403

    permitted = Client(enforce_csrf_checks=True)
    permitted.force_login(grant(UserFactory(username="permitted"), action))
    permitted.get(reverse("console-home"))
    assert permitted.post(url, body, **HTMX).status_code == 403  # no CSRF token
    assert stored() == before
    token = permitted.cookies["csrftoken"].value
    ok = permitted.post(url, body, HTTP_X_CSRFTOKEN=token, **HTMX)
    assert ok.status_code == 200, ok.content
    assert len(control_events(action)) == 1


# --- concurrency -------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_r48_r49_concurrent_cancel_and_send_never_leave_input_sent_after_the_cancel(clock, live):
    work = running_work(clock)
    barrier = threading.Barrier(3)
    results: dict[str, object] = {}

    def act(name, call):
        try:
            barrier.wait(5)
            results[name] = call()
        except WorkControlRefused as refused:
            results[name] = refused
        finally:
            connection.close()

    calls = {
        "cancel": lambda: controls.work_cancel(work_id=work.pk, user="alice", clock=clock),
        "again": lambda: controls.work_cancel(work_id=work.pk, user="bob", clock=clock),
        "send": lambda: controls.work_input_send(
            work_id=work.pk, event_type="operator.note", user="carol", clock=clock
        ),
    }
    threads = [threading.Thread(target=act, args=(name, call)) for name, call in calls.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    cancels = [results["cancel"], results["again"]]
    assert sorted(type(r).__name__ for r in cancels) == ["WorkControlRefused", "WorkControlResult"]
    assert len(control_events("cancel_work")) == 1
    cancel_seq = control_events("cancel_work")[0].seq
    sent = Event.objects.filter(source="core.manual", type="operator.note")
    if isinstance(results["send"], WorkControlRefused):
        assert not sent.exists() and not control_events("send_input")
    else:  # sent before the cancel committed: the router checkpoints it as terminal (R49)
        assert sent.get().seq < cancel_seq and len(control_events("send_input")) == 1
        drain(router(clock))
        assert RouteRecord.objects.get(event=sent.get()).reason == "terminal"


# --- operator input is held to acceptance's JSON limits -----------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("levels", [65, 10_000])
def test_operator_input_refuses_deep_json_with_400_not_500(console, clock, live, levels):
    work = running_work(clock)
    before = stored()
    deep = "[" * levels + "]" * levels
    response = console.post(reverse("work-send", args=[work.pk]), {"type": "operator.note", "data": deep})
    assert response.status_code == 400 and "more than 64 levels deep" in response.content.decode()
    with pytest.raises(
        CommandError, match="--data: invalid JSON: the JSON nests arrays and objects more than 64"
    ):
        work_command("send", str(work.pk), "--type", "operator.note", "--data", deep)
    assert stored() == before


@pytest.mark.django_db
def test_api_work_list_filters_by_binding_status_parked_and_key_like_the_console(client, clock):
    parked = parked_work(clock)
    running = running_work(clock)
    other = WorkFactory(scope="acme", binding="plain")
    CorrelationKeyFactory(work=other, key="order:7")
    CorrelationKeyFactory(work=running, key="order:8")
    token, secret = api_token_with_secret()
    url = reverse("api-work")

    def ids(**params) -> list[int]:
        response = client.get(url, params, headers={"Authorization": f"Bearer {secret}"})
        assert response.status_code == 200, response.content
        return [row["id"] for row in response.json()["work"]]

    assert ids() == [other.pk, running.pk, parked.pk]
    assert ids(status="parked") == [parked.pk]
    assert ids(status="ready") == [other.pk]  # parked Work is not ready
    assert ids(binding="triage") == [running.pk, parked.pk]
    assert ids(binding="triage", status="running") == [running.pk]
    assert ids(key="order:7") == [other.pk]
    assert ids(key="order:7", scope="elsewhere") == []
    assert ids(key="order:8", binding="plain") == []


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("params", "field"),
    [({"status": "sleeping"}, "status"), ({"binding": "b" * 129}, "binding"), ({"key": "k\x00"}, "key")],
)
def test_api_work_list_refuses_a_bad_binding_status_or_key_filter_naming_it(client, params, field):
    token, secret = api_token_with_secret()
    response = client.get(reverse("api-work"), params, headers={"Authorization": f"Bearer {secret}"})
    assert response.status_code == 400, response.content
    assert response.json()["field"] == field


# --- a cancel's reason: the service, the API, the CLI and the console keep it with the control
# Event, and the Work's history and the Event page show it ---------------------------------------

CANCEL_REASON = "duplicate of Work 7, handled there"


@pytest.fixture
def applied(clock):
    return apply(clock)


def control_data(seq: int) -> dict:
    return Event.objects.get(seq=seq).data


@pytest.mark.django_db
@pytest.mark.usefixtures("applied")
def test_the_cancel_service_keeps_the_reason_with_the_control_event(clock):
    work = parked_work(clock)

    result = controls.work_cancel(work_id=work.pk, user="ada", clock=clock, reason=f"  {CANCEL_REASON}\n")

    assert control_data(result.control_seq)["reason"] == CANCEL_REASON
    assert result.reason == CANCEL_REASON and f"cancelled by ada: {CANCEL_REASON}" in result.message
    other = parked_work(clock)
    plain = controls.work_cancel(work_id=other.pk, user="ada", clock=clock)
    assert "reason" not in control_data(plain.control_seq) and plain.reason == ""
    with pytest.raises(WorkControlInvalid, match="reason: at most 500"):
        controls.work_cancel(work_id=parked_work(clock).pk, user="ada", clock=clock, reason="x" * 501)


@pytest.mark.django_db
@pytest.mark.usefixtures("applied")
def test_the_api_cancel_takes_an_optional_reason(client, clock):
    token, secret = api_token_with_secret(user__username="dave")
    grant(token.user, "cancel_work")
    headers = {"Authorization": f"Bearer {secret}"}
    url = reverse("api-work-cancel", args=[parked_work(clock).pk])

    answer = client.post(
        url, json.dumps({"reason": CANCEL_REASON}), content_type="application/json", headers=headers
    )

    assert answer.status_code == 200, answer.content
    assert (
        answer.json()["reason"] == CANCEL_REASON
        and control_data(answer.json()["control_seq"])["reason"] == CANCEL_REASON
    )
    bare = client.post(reverse("api-work-cancel", args=[parked_work(clock).pk]), headers=headers)
    assert bare.status_code == 200 and bare.json()["reason"] == ""
    wrong = client.post(
        reverse("api-work-cancel", args=[parked_work(clock).pk]),
        json.dumps({"why": CANCEL_REASON}),
        content_type="application/json",
        headers=headers,
    )
    assert wrong.status_code == 400 and wrong.json()["field"] == "why"


@pytest.mark.django_db
@pytest.mark.usefixtures("applied")
def test_the_cli_cancel_takes_a_reason(clock):
    work = parked_work(clock)
    out = io.StringIO()

    call_command("work", "cancel", str(work.pk), "--reason", CANCEL_REASON, "--json", stdout=out)

    assert control_data(json.loads(out.getvalue())["control_seq"])["reason"] == CANCEL_REASON


@pytest.mark.django_db
@pytest.mark.usefixtures("applied")
def test_the_console_asks_why_a_work_is_cancelled_and_the_history_shows_it(client, clock):
    client.force_login(grant(UserFactory(username="operator"), *CONTROLS))
    work = parked_work(clock)
    page = client.get(reverse("work-detail", args=[work.pk])).content.decode()
    assert 'hx-prompt="Cancel Work' in page and "Why (optional)?" in page

    client.post(
        reverse("work-cancel", args=[work.pk]),
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="work-controls",
        HTTP_HX_PROMPT=CANCEL_REASON,
    )

    history = client.get(reverse("work-detail", args=[work.pk])).content.decode()
    assert f'<q class="control-reason">{CANCEL_REASON}</q>' in history
    (control,) = Event.objects.filter(type="core.manual.cancel_work")
    event_page = client.get(reverse("event-detail", args=[control.seq])).content.decode()
    assert f"used the control cancel_work on Work #{work.pk}: \u201c{CANCEL_REASON}\u201d" in event_page


@pytest.mark.django_db
@pytest.mark.usefixtures("applied")
def test_the_cancel_confirmation_page_without_javascript_has_a_reason_field(client, clock):
    client.force_login(grant(UserFactory(username="operator"), *CONTROLS))
    work = parked_work(clock)
    form = client.get(reverse("work-cancel", args=[work.pk])).content.decode()
    assert 'name="reason"' in form

    client.post(reverse("work-cancel", args=[work.pk]), {"reason": CANCEL_REASON})

    (control,) = Event.objects.filter(type="core.manual.cancel_work")
    assert control.data["reason"] == CANCEL_REASON
