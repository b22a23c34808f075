"""Replay a settled Event as a copy routed under the live configuration, through
the service, the JSON API, the CLI and the console (the Event page with htmx and without
JavaScript, and several at once), with its lineage and its permission."""

from __future__ import annotations

import json
import re
import threading

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.urls import reverse

from causal.models import Event, RouteState
from conduit_site.api import controls as api_controls
from conduit_site.console.views import controls as control_views
from conduit_site.console.views import replay as replay_views
from controls import events as controls
from controls import replay
from controls.jobs import bulk_job_run
from controls.models import BulkJob
from routing.acceptance.envelopes import EnvelopeInvalid
from routing.acceptance.services import event_accept
from routing.access.roles import ROLE_PERMISSIONS, TOKEN_SCOPES, Role, token_allows
from routing.models import RouteRecord
from tests.controls.controlkit import HTMX, events_command
from tests.routing import sample_handlers
from tests.routing.factories import UserFactory, api_token_with_secret, user_with_role
from tests.routing.routerkit import DOCUMENT, accept, apply, drain, router, state
from worklife.models import Work

# The configuration after the fix: a route for alerts, which the live one had none for.
FIXED = DOCUMENT.replace(
    """      - slot: noise""",
    """      - slot: alerts
        handler: match
        params: {type: "alert.*", keys: ["alert:{data.id}"]}
        binding: plain
        policy: queue
      - slot: noise""",
)


@pytest.fixture(autouse=True)
def handlers(test_handlers):
    """Every test here routes with the test handlers registered (tests/conftest.py)."""


@pytest.fixture(autouse=True)
def fake_clocks(clock, monkeypatch):
    monkeypatch.setattr(api_controls, "clock", clock)
    monkeypatch.setattr(control_views, "clock", clock)
    monkeypatch.setattr(replay_views, "clock", clock)


def control_events():
    return list(Event.objects.filter(source="core.manual", type="core.manual.replay_event").order_by("seq"))


def unmatched_alert(clock, *, id="a1", number=1):
    """An alert the live configuration has no route for: routed as unmatched."""
    alert = accept(clock, "alert.fired", {"id": number}, id=id)
    r = router(clock)
    drain(r)
    r.close()
    assert RouteRecord.objects.get(event=alert).policy == "unmatched"
    return alert


def route_all(clock):
    r = router(clock)
    drain(r)
    r.close()


# --- the service ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_replay_after_the_fix_accepts_a_copy_that_starts_the_work(clock, live):
    alert = unmatched_alert(clock)
    apply(clock, FIXED)
    clock.advance(5)

    result = replay.event_replay(seq=alert.seq, user=UserFactory(username="alice"), clock=clock)

    copy = Event.objects.get(seq=result.copy_seq)
    assert (result.action, result.outcome, result.route_state, result.by) == (
        "replay_event",
        "replayed",
        "routed",
        "alice",
    )
    assert "replayed by alice as the copy" in result.message
    # The same envelope and source under the reserved id, with the original's parent.
    assert (copy.envelope_id, copy.source, copy.type, copy.scope, copy.data) == (
        f"replay/{alert.envelope_id}/1",
        alert.source,
        alert.type,
        alert.scope,
        alert.data,
    )
    assert (copy.parent_id, copy.accepted_by, copy.route_state) == (alert.parent_id, "alice", "unrouted")
    # The original and its record are left as they are; the control Event names both.
    assert state(alert) == RouteState.ROUTED and RouteRecord.objects.get(event=alert).policy == "unmatched"
    (control,) = control_events()
    assert control.seq == result.control_seq
    assert control.data == {
        "event": alert.seq,
        "envelope_id": alert.envelope_id,
        "source": alert.source,
        "copy": copy.seq,
        "copy_id": copy.envelope_id,
        "by": "alice",
    }
    assert RouteRecord.objects.get(event=control).policy == "control"

    route_all(clock)

    record = RouteRecord.objects.get(event=copy)
    assert (record.route, record.policy) == ("alerts", "start")
    assert Work.objects.get(pk=record.work_id).binding == "plain"
    # Lineage both ways.
    assert replay.replay_original(copy) == alert.seq
    assert replay.replay_copies(alert) == [copy.seq]
    assert replay.replay_original(alert) is None


@pytest.mark.django_db
def test_replay_takes_any_settled_event_and_numbers_its_copies(clock, live):
    sample_handlers.BROKEN.add("broken")
    noise = accept(clock, "noise.ping", id="noise")
    opened = accept(clock, "github.pull_request.opened", {"repo": "acme/api", "number": 1}, id="pr")
    route_all(clock)
    failed = accept(clock, "x.thing", {}, id="broken")
    for _ in range(8):
        route_all(clock)
        clock.advance(400)
    assert state(failed) == RouteState.FAILED

    copies = [
        replay.event_replay(seq=e.seq, user="cli", clock=clock).copy_seq for e in (noise, opened, failed)
    ]
    again = replay.event_replay(seq=noise.seq, user="cli", clock=clock).copy_seq

    ids = dict(Event.objects.filter(seq__in=[*copies, again]).values_list("seq", "envelope_id"))
    assert [ids[s] for s in copies] == ["replay/noise/1", "replay/pr/1", "replay/broken/1"]
    assert ids[again] == "replay/noise/2"
    assert replay.replay_copies(noise) == [copies[0], again]
    # A copy can be replayed in turn; its copy names it, not the first original.
    route_all(clock)
    second = replay.event_replay(seq=again, user="cli", clock=clock).copy_seq
    assert Event.objects.get(seq=second).envelope_id == "replay/replay/noise/2/1"
    assert replay.replay_original(Event.objects.get(seq=second)) == again


@pytest.mark.django_db
def test_replay_lineage_tells_an_events_copies_from_lookalikes(clock, live):
    plain = accept(clock, "noise.ping", id="x")
    longer = accept(clock, "noise.ping", id="x/1")
    route_all(clock)
    other = replay.event_replay(seq=longer.seq, user="cli", clock=clock).copy_seq  # replay/x/1/1
    mine = replay.event_replay(seq=plain.seq, user="cli", clock=clock).copy_seq

    assert Event.objects.get(seq=mine).envelope_id == "replay/x/1"
    assert replay.replay_copies(plain) == [mine] and replay.replay_copies(longer) == [other]
    assert replay.replay_original(Event.objects.get(seq=other)) == longer.seq


@pytest.mark.django_db
def test_replay_refuses_unrouted_and_conduits_own_events_and_unknown_seqs(clock, live):
    waiting = accept(clock, "noise.ping", id="waiting")
    with pytest.raises(controls.ControlRefused, match="is not routed yet"):
        replay.event_replay(seq=waiting.seq, user="cli", clock=clock)
    route_all(clock)
    copy = replay.event_replay(seq=waiting.seq, user="cli", clock=clock)
    (control,) = control_events()
    with pytest.raises(controls.ControlRefused, match="one Conduit wrote for itself"):
        replay.event_replay(seq=control.seq, user="cli", clock=clock)
    with pytest.raises(Event.DoesNotExist):
        replay.event_replay(seq=999999, user="cli", clock=clock)
    assert len(control_events()) == 1 and copy.copy_seq


@pytest.mark.django_db
@pytest.mark.parametrize("envelope_id", ["replay/a1/1", "Replay/x/2", "REPLAY/y"])
def test_replay_ids_are_refused_from_outside(clock, live, envelope_id):
    payload = {
        "specversion": "1.0",
        "id": envelope_id,
        "source": "tests",
        "type": "alert.fired",
        "scope": "acme",
    }
    with pytest.raises(EnvelopeInvalid) as refused:
        event_accept(payload=payload, clock=clock)
    assert refused.value.field == "id" and "'replay/'" in refused.value.message
    assert not Event.objects.exists()


@pytest.mark.django_db
def test_replay_of_several_reports_each_and_is_bounded(clock, live, django_assert_max_num_queries):
    first = unmatched_alert(clock, id="b1", number=1)
    second = unmatched_alert(clock, id="b2", number=2)
    waiting = accept(clock, "noise.ping", id="w")

    batch = replay.events_replay(
        seqs=[first.seq, waiting.seq, 999999, second.seq, first.seq], user="bob", clock=clock
    )

    assert [(o.seq, o.status) for o in batch.outcomes] == [
        (first.seq, 200),
        (waiting.seq, 409),
        (999999, 404),
        (second.seq, 200),
    ]
    assert batch.summary.startswith("replayed 2, refused 2 (")
    assert len(control_events()) == 2
    body = batch.as_dict()
    assert body["done"] == 2 and body["outcomes"][0]["copy_seq"] == batch.outcomes[0].copy_seq

    with pytest.raises(replay.ReplayInvalid, match="at most 10,000 Events"):
        replay.events_replay(seqs=list(range(1, replay.REPLAY_LIMIT + 2)), user="bob", clock=clock)
    with pytest.raises(replay.ReplayInvalid, match="at least one"):
        replay.events_replay(seqs=[], user="bob", clock=clock)
    assert len(control_events()) == 2
    # Each replay costs the same few queries, whatever the history (PostgreSQL wakes the web
    # processes' outbox readers with one more statement, a NOTIFY, than SQLite does).
    third = unmatched_alert(clock, id="b3", number=3)
    with django_assert_max_num_queries(21):
        replay.event_replay(seq=third.seq, user="bob", clock=clock)


@pytest.mark.django_db(transaction=True)
def test_concurrent_replays_of_one_event_number_their_copies_apart(clock, live):
    noise = accept(clock, "noise.ping", id="contested")
    route_all(clock)
    barrier = threading.Barrier(3)
    results: list[object] = []

    def replay_it(name):
        try:
            barrier.wait(5)
            results.append(replay.event_replay(seq=noise.seq, user=name, clock=clock))
        finally:
            connection.close()

    threads = [threading.Thread(target=replay_it, args=(name,)) for name in ("alice", "bob", "carol")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(results) == 3 and len({r.copy_seq for r in results}) == 3
    ids = sorted(
        Event.objects.filter(seq__in=[r.copy_seq for r in results]).values_list("envelope_id", flat=True)
    )
    assert ids == ["replay/contested/1", "replay/contested/2", "replay/contested/3"]
    assert len(control_events()) == 3


# --- permission -----------------------------------------------------------------------------------


def test_replay_is_an_operators_permission_and_a_token_scope():
    assert "routing.replay_event" in ROLE_PERMISSIONS[Role.OPERATOR]
    assert "routing.replay_event" in ROLE_PERMISSIONS[Role.ADMIN]
    assert "routing.replay_event" not in ROLE_PERMISSIONS[Role.VIEWER]
    assert TOKEN_SCOPES["replay"] == controls.PERMISSIONS[controls.REPLAY_EVENT] == "routing.replay_event"
    assert token_allows(["replay"], "routing.replay_event")
    assert not token_allows(["reroute"], "routing.replay_event")


# --- JSON API -------------------------------------------------------------------------------------


def api_post(client, url, secret=None, body=None):
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    if body is None:
        return client.post(url, headers=headers)
    return client.post(url, data=json.dumps(body), content_type="application/json", headers=headers)


@pytest.mark.django_db
def test_api_replay_one_and_several_need_the_replay_permission(client, clock, live):
    alert = unmatched_alert(clock)
    other = unmatched_alert(clock, id="a2", number=2)
    one, several = reverse("api-event-replay", args=[alert.seq]), reverse("api-events-replay")
    assert api_post(client, one).status_code == 401
    viewer = user_with_role("viewer", username="vera")
    _, viewer_secret = api_token_with_secret(user=viewer)
    refused = api_post(client, one, viewer_secret)
    assert refused.status_code == 403 and "routing.replay_event" in refused.json()["message"]
    operator = user_with_role("operator", username="otto")
    _, narrowed = api_token_with_secret(user=operator, scopes=["reroute"])
    assert api_post(client, one, narrowed).status_code == 403
    _, secret = api_token_with_secret(user=operator, name="replayer", scopes=["replay"])
    assert not control_events()

    response = api_post(client, one, secret)
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["action"], body["outcome"], body["seq"], body["by"]) == (
        "replay_event",
        "replayed",
        alert.seq,
        "otto",
    )
    assert Event.objects.get(seq=body["copy_seq"]).envelope_id == "replay/a1/1"

    # 7.0 is the integer 7 in JSON (and in the OpenAPI document's integer).
    batch = api_post(client, several, secret, {"seqs": [float(other.seq), 999999], "count": 2})
    assert batch.status_code == 202, batch.content
    assert (batch.json()["kind"], batch.json()["total"], batch.json()["created_by"]) == (
        "replay_event",
        2,
        "otto",
    )
    bulk_job_run(job_id=batch.json()["id"], clock=clock)
    _, viewing = api_token_with_secret(user=operator, name="watcher")
    shown = client.get(batch["Location"], headers={"Authorization": f"Bearer {viewing}"}).json()
    assert [(i["target"], i["outcome"]) for i in shown["items"]] == [
        (other.seq, "done"),
        (999999, "not_found"),
    ]
    uncounted = api_post(client, several, secret, {"seqs": [other.seq]})
    assert uncounted.status_code == 400 and uncounted.json()["field"] == "count"
    miscounted = api_post(client, several, secret, {"seqs": [other.seq], "count": 2})
    assert miscounted.status_code == 409 and miscounted.json()["count"] == 1
    for bad in ({"seqs": []}, {"seqs": ["1"]}, {"seqs": False}, {"seqs": [2**63]}, {"ids": [1]}, [1]):
        invalid = api_post(client, several, secret, bad)
        assert invalid.status_code == 400 and invalid.json()["error"] == "invalid_replay", bad
    too_many = api_post(client, several, secret, {"seqs": list(range(1, replay.REPLAY_LIMIT + 2))})
    assert too_many.status_code == 400 and "at most 10,000" in too_many.json()["message"]
    waiting = accept(clock, "noise.ping", id="w")
    conflict = api_post(client, reverse("api-event-replay", args=[waiting.seq]), secret)
    assert conflict.status_code == 409 and conflict.json()["error"] == "wrong_state"
    assert len(control_events()) == 2


# --- CLI ----------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_cli_events_replay_records_the_actor_and_exits_non_zero_on_a_refusal(clock, live):
    first = unmatched_alert(clock)
    second = unmatched_alert(clock, id="a2", number=2)
    UserFactory(username="frank")  # no permission: the CLI is trusted host access

    out = events_command("replay", str(first.seq), str(second.seq), "--as", "frank")
    lines = out.strip().splitlines()
    assert lines[0].startswith(f"Event #{first.seq} replayed by frank as the copy #")
    assert lines[1].startswith(f"Event #{second.seq} replayed by frank")

    body = json.loads(events_command("replay", str(first.seq), "--json"))
    assert (body["done"], body["by"], body["outcomes"][0]["ok"]) == (1, "cli", True)
    assert Event.objects.get(seq=body["outcomes"][0]["copy_seq"]).envelope_id == "replay/a1/2"

    waiting = accept(clock, "noise.ping", id="w")
    with pytest.raises(
        CommandError, match=r"refused 1 of 1: replayed 0, refused 1 \(#\d+: Event #\d+ is not routed"
    ):
        events_command("replay", str(waiting.seq))
    assert len(control_events()) == 3


def test_cli_events_replay_help_says_what_it_does(capsys):
    with pytest.raises(SystemExit):
        call_command("events", "replay", "--help")
    text = capsys.readouterr().out
    assert "usage:" in text and "replay/<original id>/<n>" in text and "--as USER" in text
    assert "10,000" in text


# --- console --------------------------------------------------------------------------------------


@pytest.fixture
def operator():
    return user_with_role("operator", username="olga")


@pytest.mark.django_db
def test_event_page_replay_with_htmx_shows_the_copy_and_its_lineage(console, clock, live):
    alert = unmatched_alert(clock)
    apply(clock, FIXED)
    page = console.get(reverse("event-detail", args=[alert.seq])).content.decode()
    section = re.search(r'<section id="event-route">(.*?)</section>', page, re.S).group(1)
    assert f'hx-post="{reverse("event-replay", args=[alert.seq])}"' in section
    assert f'href="{reverse("event-replay", args=[alert.seq])}?next=' in section  # works without JavaScript

    response = console.post(reverse("event-replay", args=[alert.seq]), HTTP_HX_TARGET="event-route", **HTMX)

    assert response.status_code == 200
    body = response.content.decode()
    assert body.strip().startswith('<section id="event-route">')
    copy_seq = control_events()[0].data["copy"]
    assert f"Event #{alert.seq} replayed by olga as the copy #{copy_seq}" in body
    assert f'<dd id="event-replays"><a href="/events/{copy_seq}/">#{copy_seq}</a></dd>' in body  # out of band
    route_all(clock)
    copy_page = console.get(reverse("event-detail", args=[copy_seq])).content.decode()
    assert (
        f'<span class="muted" id="event-replay-of">replay of <a href="/events/{alert.seq}/">#{alert.seq}</a>'
        in copy_page
    )
    assert "<dt>replay of</dt>" in copy_page and "<strong>start</strong>" in copy_page


@pytest.mark.django_db
def test_event_page_replay_without_javascript_confirms_then_redirects(console, clock, live):
    alert = unmatched_alert(clock)
    url = reverse("event-replay", args=[alert.seq])
    confirm = console.get(url)
    assert confirm.status_code == 200
    assert f'<form method="post" action="{url}" id="control-form">' in confirm.content.decode()
    assert not control_events()  # a GET changes nothing

    done = console.post(url)
    assert done.status_code == 302 and done["Location"] == reverse("event-detail", args=[alert.seq])
    assert len(control_events()) == 1
    waiting = accept(clock, "noise.ping", id="w")
    stale = console.get(reverse("event-replay", args=[waiting.seq]))
    assert stale.status_code == 409 and "only a settled Event can be replayed" in stale.content.decode()


@pytest.mark.django_db
def test_console_replays_several_after_a_confirmation(console, clock, live):
    first = unmatched_alert(clock)
    second = unmatched_alert(clock, id="a2", number=2)
    url = reverse("events-replay")
    seqs = f"{first.seq}, {second.seq}"

    confirm = console.post(url, {"seqs": seqs, "label": "unmatched → start"})
    assert confirm.status_code == 200
    page = confirm.content.decode()
    assert "Replay 2 Events" in page and 'name="confirm" value="1"' in page
    assert not control_events()

    uncounted = console.post(url, {"seqs": seqs, "confirm": "1"})
    assert (
        uncounted.status_code == 400 and "needs the number of Events confirmed" in uncounted.content.decode()
    )
    miscounted = console.post(url, {"seqs": seqs, "count": "3", "confirm": "1"})
    assert miscounted.status_code == 409 and "not the 3 you were shown" in miscounted.content.decode()
    done = console.post(url, {"seqs": seqs, "count": "2", "confirm": "1"})
    assert done.status_code == 302
    job = BulkJob.objects.get()
    bulk_job_run(job_id=job.pk, clock=clock)
    assert "2 of 2 Events: 2 done, 0 refused" in console.get(done["Location"]).content.decode()
    assert len(control_events()) == 2
    assert console.post(url, {"seqs": "1, x"}).status_code == 400


@pytest.mark.django_db
def test_replay_controls_need_their_permission(clock, live):
    alert = unmatched_alert(clock)
    viewer = Client()
    viewer.force_login(user_with_role("viewer", username="vic"))
    page = viewer.get(reverse("event-detail", args=[alert.seq])).content.decode()
    assert reverse("event-replay", args=[alert.seq]) not in page
    assert viewer.post(reverse("event-replay", args=[alert.seq])).status_code == 403
    assert viewer.post(reverse("events-replay"), {"seqs": str(alert.seq), "confirm": "1"}).status_code == 403
    assert not control_events()


@pytest.mark.django_db
def test_the_event_pages_queries_do_not_grow_with_replays(console, clock, live):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    alert = unmatched_alert(clock)
    url = reverse("event-detail", args=[alert.seq])

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert console.get(url).status_code == 200
        return len(captured.captured_queries)

    replay.event_replay(seq=alert.seq, user="cli", clock=clock)
    one = queries()
    for _ in range(4):
        replay.event_replay(seq=alert.seq, user="cli", clock=clock)
    assert queries() == one


@pytest.mark.django_db
def test_impact_preview_groups_offer_to_replay_their_events(client, clock, monkeypatch):
    from conduit_site.console.views import impact as impact_views
    from routing.models import ImpactRun
    from routing.setup.candidates import candidate_apply
    from routing.setup.impact_runs import impact_run_execute
    from tests.routing.factories import CHANGED, apply_config

    monkeypatch.setattr(
        impact_views, "launch", lambda run_id, clock: impact_run_execute(run_id=run_id, clock=clock)
    )
    apply_config()
    alerts = [accept(clock, "alert.fired", {"id": n}, id=f"g{n}", scope="acme") for n in range(3)]
    route_all(clock)
    candidate = apply_config(CHANGED, candidate=True)
    client.force_login(user_with_role("admin", username="ada"))

    page = client.post(reverse("candidate-impact", args=[candidate.pk]), {"events": "10"}, follow=True)
    assert "impact-replay" not in page.content.decode()  # not before Apply
    # Nor by posting the form by hand: the copies would route as before.
    early = {"run": str(ImpactRun.objects.get().pk), "group": "unmatched → start", "route": "alerts"}
    for confirm in ({}, {"count": "3", "confirm": "1"}):
        refused = client.post(reverse("events-replay"), {**early, **confirm})
        assert refused.status_code == 400 and "is not applied" in refused.content.decode()
    assert not BulkJob.objects.exists() and not control_events()
    candidate_apply(candidate_id=candidate.pk, clock=clock, applied_by="ada")
    run_url = reverse("impact-run", args=[ImpactRun.objects.get().pk])
    body = client.get(run_url).content.decode()

    form = re.search(
        r'<form method="post" action="/events/replay/" class="inline-form impact-replay">(.*?)</form>',
        body,
        re.S,
    )
    assert form, body[-3000:]
    assert 'name="group" value="unmatched → start"' in form.group(
        1
    ) and 'name="route" value="alerts"' in form.group(1)
    assert "Replay these 3" in form.group(1)
    fields = dict(re.findall(r'name="(run|group|route)" value="([^"]*)"', form.group(1)))

    confirm = client.post(reverse("events-replay"), fields)
    assert "Replay 3 Events" in confirm.content.decode() and not control_events()
    assert 'name="count" value="3"' in confirm.content.decode()
    done = client.post(reverse("events-replay"), {**fields, "count": "3", "confirm": "1"})
    assert done.status_code == 302
    bulk_job_run(job_id=BulkJob.objects.get().pk, clock=clock)
    assert [e.data["event"] for e in control_events()] == [a.seq for a in reversed(alerts)]
    missing = client.post(reverse("events-replay"), {**fields, "group": "drop → start"})
    assert missing.status_code == 400 and "has no group" in missing.content.decode()
    viewer = Client()
    viewer.force_login(user_with_role("viewer", username="vic"))
    page = viewer.get(run_url).content.decode()
    assert "impact-replay" not in page and "needs routing.replay_event" in page
