"""In Chromium, two tabs (the Work list and the Events list) of a console served by its own
process, and a terminal: each ``manage.py work create``, ``work cancel`` and ``events replay``
shows on both pages within 2 s of the command's exit, round after round, without a reload."""

from __future__ import annotations

import json
import os
import time

import pytest
from django.urls import reverse

from tests.browser.browserkit import operator, signed_in
from tests.causal.factories import EventFactory
from tests.conduit_site.livekit import served_console
from tests.routing.factories import RouteRecordFactory, apply_config
from tests.support import run_manage

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Rounds of the three commands: 10 by default (about 20 s a round on a busy 2-core machine);
# the acceptance run sets CONDUIT_LIVE_ROUNDS=50.
ROUNDS = int(os.environ.get("CONDUIT_LIVE_ROUNDS", "10"))
# A change shows on every open page within this many seconds of the command's exit.
WITHIN = 2.0


def command(var_dir, *args: str) -> tuple[dict, float]:
    """Run ``manage.py ARGS --json`` as the terminal would; its answer and when it exited."""
    done = run_manage(*args, "--as", "operator", "--json", CONDUIT_VAR_DIR=str(var_dir))
    exited = time.monotonic()
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout), exited


def shows(page, selector: str, exited: float, what: str) -> None:
    """``selector`` is on ``page`` no later than WITHIN seconds after ``exited``."""
    left = WITHIN - (time.monotonic() - exited)
    assert left > 0, f"{what}: already {WITHIN} s since the command exited"
    page.wait_for_selector(selector, timeout=left * 1000)


def test_two_tabs_show_every_command_line_change_within_2_s_round_after_round(browser, tmp_path):
    operator()
    apply_config()
    settled = EventFactory(scope="acme", type="chat.message", route_state="routed")
    RouteRecordFactory(event=settled, policy="drop")
    with served_console(tmp_path) as port:
        base = f"http://127.0.0.1:{port}"
        works = signed_in(browser, base)
        works.goto(base + reverse("work-list") + "?scope=acme")
        events = works.context.new_page()
        events.errors = []
        events.on("pageerror", lambda error: events.errors.append(str(error)))
        events.goto(base + reverse("event-list") + "?scope=acme")
        for page in (works, events):
            page.wait_for_function("() => document.querySelector('[ws-connect]')")
            page.evaluate("window.notReloaded = true")
        time.sleep(1.0)  # both sockets are open

        for round_ in range(ROUNDS):
            created, exited = command(
                tmp_path, "work", "create", "--scope", "acme", "--binding", "inbox", "--type", "chat.note"
            )
            work_id = created["work_id"]
            shows(works, f"#work-{work_id}", exited, f"round {round_}: work create on the Work list")
            shows(
                events,
                f"#event-{created['input_seq']}",
                exited,
                f"round {round_}: work create on the Events list",
            )

            _, exited = command(tmp_path, "work", "cancel", str(work_id))
            shows(works, f"#work-{work_id} .badge-cancelled", exited, f"round {round_}: work cancel")

            replayed, exited = command(tmp_path, "events", "replay", str(settled.seq))
            (copy,) = [item["copy_seq"] for item in replayed["outcomes"]]
            shows(events, f"#event-{copy}", exited, f"round {round_}: events replay on the Events list")

        for page in (works, events):
            assert page.evaluate("window.notReloaded === true")
            assert page.errors == []
        works.screenshot(path=str(tmp_path / "work-list-after-commands.png"), full_page=True)
    log = (tmp_path / "daphne.log").read_text()
    assert "Traceback" not in log and "disk I/O error" not in log, log[-2000:]
