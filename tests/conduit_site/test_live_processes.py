"""Live updates across real processes: a change a command-line process commits (it exits at
once) reaches the websockets of a console served by another process within 2 s, and a long run
of such changes leaves live updates working, with no error in the server's log."""

from __future__ import annotations

import time

import pytest

from infra.live import live_head
from tests.conduit_site.livekit import open_websocket, read_until, served_console, session_cookie
from tests.routing.factories import UserFactory, apply_config
from tests.support import run_manage
from tests.worklife.factories import WorkFactory
from worklife.models import Work

pytestmark = pytest.mark.django_db(transaction=True)

# What the soak's other process runs: Work created and cancelled through the services the
# command line calls, each change its own transaction, as fast as it can.
SOAK = """
from causal.clock import system_clock
from controls.work import work_cancel, work_create

for n in range({pairs}):
    created = work_create(
        scope="acme", binding="inbox", event_type="soak.tick", data={{"n": n}}, user="alice", clock=system_clock
    )
    work_cancel(work_id=created.work_id, user="alice", clock=system_clock)
print("done")
"""


@pytest.fixture
def operator_client(client):
    apply_config()
    client.force_login(UserFactory(username="alice", is_superuser=True))
    return client


def test_a_work_cancel_run_from_the_command_line_reaches_the_open_work_page_and_list_within_2_s(
    operator_client, tmp_path
):
    work = WorkFactory(scope="acme", binding="inbox", status="ready")
    cookie = session_cookie(operator_client)
    with served_console(tmp_path) as port:
        page = open_websocket(port, f"/ws/work/{work.pk}/?outbox={live_head()}", cookie)
        listing = open_websocket(port, f"/ws/work/?outbox={live_head()}", cookie)
        time.sleep(0.5)  # the server's reader has read the outbox's head

        cancelled = run_manage("work", "cancel", str(work.pk), "--as", "alice", CONDUIT_VAR_DIR=str(tmp_path))
        exited = time.monotonic()
        assert cancelled.returncode == 0, cancelled.stderr
        # The command committed and exited before the server sent anything: no thread of it
        # is left to publish.
        frame = read_until(page, "badge-cancelled", timeout=2.0)
        assert frame is not None, "the Work page was not told within 2 s"
        assert '<section id="work-summary" hx-swap-oob="true">' in frame
        assert read_until(
            listing, f'id="work-{work.pk}"', timeout=max(2.0 - (time.monotonic() - exited), 0.01)
        )
        page.close()
        listing.close()
    assert "Traceback" not in (tmp_path / "daphne.log").read_text()


def test_a_thousand_command_line_changes_leave_live_updates_working_without_a_disk_error(
    operator_client, tmp_path
):
    cookie = session_cookie(operator_client)
    with served_console(tmp_path) as port:
        listing = open_websocket(port, f"/ws/work/?outbox={live_head()}", cookie)
        time.sleep(0.5)
        soak = run_manage("shell", "-c", SOAK.format(pairs=500), CONDUIT_VAR_DIR=str(tmp_path), timeout=600)
        assert soak.returncode == 0 and "done" in soak.stdout, soak.stderr
        assert Work.objects.filter(status="cancelled").count() == 500
        # The list heard of the changes as they came (at most a render a second) ...
        assert read_until(listing, 'id="work-rows"', timeout=2.0)

        # ... and live updates still work: the next command's change shows within 2 s.
        work = WorkFactory(scope="acme", binding="inbox", status="ready")
        page = open_websocket(port, f"/ws/work/{work.pk}/?outbox={live_head()}", cookie)
        time.sleep(0.3)
        cancelled = run_manage("work", "cancel", str(work.pk), "--as", "alice", CONDUIT_VAR_DIR=str(tmp_path))
        assert cancelled.returncode == 0, cancelled.stderr
        assert read_until(page, "badge-cancelled", timeout=2.0), "no live update after the soak"
        page.close()
        listing.close()
    log = (tmp_path / "daphne.log").read_text()
    assert "disk I/O error" not in log and "Traceback" not in log, log[-2000:]
