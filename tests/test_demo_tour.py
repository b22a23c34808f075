"""The README tour says what really happens: its steps, run as it writes them
(demo/send's deliveries through the receivers, the route loop, the work loop running the demo's
triage command), end as its text says."""

from __future__ import annotations

import html
import io
import re
import shlex
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command

from causal.models import Event
from routing.models import RouteRecord
from tests.routing.factories import UserFactory, apply_config
from tests.support import demo_send_module
from worklife.models import Attempt, Work

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ROOT = Path(settings.BASE_DIR)
README = (ROOT / "README.md").read_text(encoding="utf-8")
TOUR = README[README.index("## A short tour") : README.index("## How routing works")]
QUIET = {"stdout": io.StringIO(), "stderr": io.StringIO()}


def tour_send_command() -> list[Path]:
    """The deliveries of the tour's ``demo/send`` command, in its order."""
    match = re.search(r"`demo/send ((?:demo/deliveries/\S+\.json\s*)+)`", TOUR)
    assert match, "the tour shows no demo/send command"
    return [ROOT / name for name in match.group(1).split()]


def demo_send(client, monkeypatch, *paths: Path) -> list[int]:
    """POST each delivery as ``demo/send`` does (signed with the demo secret); their seqs."""
    monkeypatch.setenv("CONDUIT_DEMO_HOOK_SECRET", "demo-secret-for-the-tour")
    send = demo_send_module()
    seqs = []
    for path in paths:
        body = path.read_bytes()
        headers = {
            **dict(send.saved_headers(path)),
            **send.signed(path.parent.name, body, send.demo_secret()),
        }
        content_type = headers.pop("Content-Type", "application/json")
        response = client.post(f"/hooks/{path.parent.name}", body, content_type=content_type, headers=headers)
        assert response.status_code == 201, response.content
        seqs.extend(item["seq"] for item in response.json()["events"])
    return seqs


def route_and_run() -> None:
    call_command("route_loop", "--drain", **QUIET)
    call_command("work_loop", "--drain", **QUIET)


@pytest.fixture
def demo(clock, monkeypatch, settings, tmp_path):
    monkeypatch.chdir(ROOT)  # the triage command runs `python3 -m demo.agents`
    # The receivers read the secret file make run writes; demo/send, the same secret.
    settings.CONDUIT_SECRETS_DIR = tmp_path
    (tmp_path / "demo-hook-secret").write_text("demo-secret-for-the-tour\n")
    apply_config((ROOT / "demo" / "conduit.yaml").read_text(encoding="utf-8"), clock)


def test_the_tours_three_deliveries_start_one_work_that_completes_as_the_tour_says(demo, client, monkeypatch):
    """The pull request's three deliveries, sent together as the tour sends them, start one Work;
    one or two attempts of triage handle the three Events and the Work completes."""
    paths = tour_send_command()
    assert [path.name for path in paths] == ["pr-opened.json", "pr-synchronize.json", "pr-comment.json"]
    assert "one or two attempts handle the three Events" in " ".join(TOUR.split())

    seqs = demo_send(client, monkeypatch, *paths)
    route_and_run()

    work = Work.objects.get()
    assert work.status == "completed"
    assert {r.work_id for r in RouteRecord.objects.filter(event_id__in=seqs)} == {work.id}
    attempts = list(Attempt.objects.filter(work=work).order_by("number"))
    assert 1 <= len(attempts) <= 2
    handled = [item for attempt in attempts for item in attempt.result["handled"]]
    types = [Event.objects.get(seq=seq).type for seq in seqs]
    assert handled == [f"{type} #{seq}" for type, seq in zip(types, seqs, strict=True)]


def test_tour_input_sent_after_the_work_completed_is_dropped_as_the_tour_quotes(demo, client, monkeypatch):
    """Sent after the pull request's Work completed, its later delivery is dropped, and its
    Event page says so in the words the tour quotes."""
    quoted = re.search(r'"(Work #1 had already completed at …, so this input [^"]+)"', " ".join(TOUR.split()))
    assert quoted, "the tour quotes no Event page"
    opened, synchronize, _ = tour_send_command()

    demo_send(client, monkeypatch, opened)
    route_and_run()
    work = Work.objects.get()
    assert work.status == "completed"
    (late,) = demo_send(client, monkeypatch, synchronize)
    call_command("route_loop", "--drain", **QUIET)

    record = RouteRecord.objects.get(event_id=late)
    assert (record.policy, record.reason, record.work_id) == ("drop", "terminal", work.id)
    client.force_login(UserFactory())
    page = client.get(f"/events/{late}/").content.decode()
    said = html.unescape(
        re.sub(r"<[^>]+>", "", re.search(r'id="event-route-why"[^>]*>(.*?)</p>', page, re.S)[1])
    )
    # The tour's Work #1 is the first Work of a fresh database; ids here go on across tests.
    pattern = (
        re.escape(quoted[1])
        .replace("…", r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")
        .replace(r"Work\ \#1", f"Work #{work.id}")
    )
    assert re.fullmatch(pattern + r"\.", said), said


def test_the_tours_pause_holds_the_chat_agents_until_resumed_as_it_says(demo, client, monkeypatch):
    """The tour's pause command, run as written, holds the chat thread's Work (its input queues;
    the Work list's ``paused`` filter finds it, marked with who and why) until the tour's resume
    command, after which it runs and completes."""
    flat = " ".join(TOUR.split())
    pause = re.search(r"`manage\.py (pause binding acme responder [^`]+)`", flat)
    resume = re.search(r"`manage\.py (resume binding acme responder)`", flat)
    assert pause and resume, "the tour shows no pause and resume"
    call_command(*shlex.split(pause[1]), **QUIET)
    (seq,) = demo_send(client, monkeypatch, ROOT / "demo/deliveries/slack/slack-message.json")
    route_and_run()
    work = Work.objects.get()
    assert work.status == "ready" and not Attempt.objects.filter(work=work).exists()
    listed = io.StringIO()
    call_command("work", "list", "--status", "paused", stdout=listed)
    assert f"Work {work.pk}  ready (paused by cli at " in listed.getvalue()
    assert ": incident 42 (until " in listed.getvalue()
    call_command(*shlex.split(resume[1]), **QUIET)
    route_and_run()
    work.refresh_from_db()
    assert work.status == "completed"
    assert [item for a in Attempt.objects.filter(work=work) for item in a.result["handled"]] == [
        f"slack.message #{seq}"
    ]
