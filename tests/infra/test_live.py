"""The live-update outbox: a change's row commits with its transaction or not at all, positions
only grow, a reader finds what committed after its position and the positions it saw missing,
old rows are pruned; group names and websocket paths; the channel layer the settings choose."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from channels_redis.core import RedisChannelLayer
from django.db import transaction

from infra.live import (
    EVENTS_GROUP,
    WORK_GROUP,
    events_ws_path,
    group_name_for_work,
    live_backlog,
    live_changes_after,
    live_changes_prune,
    live_head,
    pages_changed_on_commit,
    work_changed_on_commit,
    work_ws_path,
    ws_path_at,
)
from infra.models import LiveChange
from tests.infra.factories import LiveChangeFactory

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_d4_group_names_hold_only_ids():
    assert group_name_for_work(12) == "work.12"
    assert EVENTS_GROUP == "console.events"
    for bad in (0, -1, "12", 1.5, True, None):
        with pytest.raises(ValueError, match="work_id"):
            group_name_for_work(bad)
    assert work_ws_path(12) == "/ws/work/12/"
    assert events_ws_path({"scope": "acme/web", "type": "", "route_state": "unrouted"}) == (
        "/ws/events/?scope=acme%2Fweb&route_state=unrouted"
    )
    assert ws_path_at("/ws/work/12/", 40) == "/ws/work/12/?outbox=40"
    assert ws_path_at("/ws/events/?scope=acme", 0) == "/ws/events/?scope=acme&outbox=0"


@pytest.mark.django_db(transaction=True)
def test_a_change_is_in_the_outbox_once_its_transaction_commits_and_never_after_a_rollback():
    with transaction.atomic():
        work_changed_on_commit([7, 3, 7])
    with pytest.raises(RuntimeError), transaction.atomic():
        work_changed_on_commit([8])
        raise RuntimeError("rolled back")
    # Outside a transaction the row commits at once.
    pages_changed_on_commit(groups=[EVENTS_GROUP], events=[5])

    rows = list(LiveChange.objects.order_by("pk").values_list("groups", "works", "events"))
    assert rows == [([WORK_GROUP], [3, 7], []), ([EVENTS_GROUP], [], [5])]
    changes = live_changes_after(0)
    assert [sorted(change.groups) for change in changes] == [
        [WORK_GROUP, "work.3", "work.7"],
        [EVENTS_GROUP, "event.5"],
    ]


@pytest.mark.django_db(transaction=True)
def test_outbox_positions_only_grow_and_a_reader_finds_what_committed_after_its_position():
    positions = []
    for work_id in range(1, 21):
        with transaction.atomic():
            work_changed_on_commit([work_id])
        positions.append(live_head())
    assert positions == sorted(positions) and len(set(positions)) == 20
    middle = positions[9]
    after = live_changes_after(middle)
    assert [change.position for change in after] == positions[10:]
    # The positions a reader saw missing are read again with the rows after its position.
    assert [change.position for change in live_changes_after(positions[-1], also=[positions[2]])] == [
        positions[2]
    ]
    assert live_changes_after(positions[-1]) == []
    assert [c.position for c in live_changes_after(0, limit=5)] == positions[:5]


@pytest.mark.django_db(transaction=True)
def test_temporary_work_ids_and_empty_changes_record_nothing():
    with transaction.atomic():
        work_changed_on_commit([-1, -2, None])
        pages_changed_on_commit(works=[], events=[])
    assert not LiveChange.objects.exists()
    with transaction.atomic():
        work_changed_on_commit([-1, 4])
    assert list(LiveChange.objects.values_list("works", flat=True)) == [[4]]


@pytest.mark.django_db(transaction=True)
def test_a_bad_group_name_is_refused_and_nothing_is_recorded():
    pages_changed_on_commit(groups=[EVENTS_GROUP])
    with pytest.raises(ValueError, match="group"):
        pages_changed_on_commit(groups=["no spaces"])
    with pytest.raises(ValueError, match="group"):
        pages_changed_on_commit(groups=["work 5!"])
    assert list(LiveChange.objects.values_list("groups", "works", "events")) == [([EVENTS_GROUP], [], [])]


@pytest.mark.django_db(transaction=True)
def test_old_outbox_rows_are_pruned_in_batches_and_the_backlog_says_how_old_the_oldest_unread_is():
    now = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
    old = LiveChangeFactory.create_batch(7, at=now - timedelta(hours=2))
    young = LiveChangeFactory.create_batch(2, at=now - timedelta(seconds=30))
    backlog = live_backlog(old[-1].pk)
    assert backlog.head == young[-1].pk
    assert backlog.seconds(now) == 30.0
    assert live_backlog(young[-1].pk).seconds(now) == 0.0

    assert live_changes_prune(before=now - timedelta(hours=1), batch=3) == 7
    assert list(LiveChange.objects.order_by("pk").values_list("pk", flat=True)) == [row.pk for row in young]
    assert live_changes_prune(before=now - timedelta(hours=1)) == 0


def settings_layer(env: dict) -> dict:
    code = (
        "import json; from conduit_site import settings; "
        "print(json.dumps(settings.CHANNEL_LAYERS['default'], default=str))"
    )
    return json.loads(
        subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, check=True, text=True
        ).stdout
    )


def test_d4_settings_choose_the_in_memory_layer_or_redis_with_a_socket_timeout_past_its_blocking_pop(
    tmp_path,
):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "CONDUIT_VAR_DIR": str(tmp_path)}
    env.pop("REDIS_URL", None)
    # No file that several processes write: each web process's websockets are its own.
    assert settings_layer(env) == {"BACKEND": "channels.layers.InMemoryChannelLayer"}
    assert not list(tmp_path.glob("channels*"))

    env["REDIS_URL"] = "redis://127.0.0.1:6379/0"
    redis = settings_layer(env)
    assert redis["BACKEND"] == "channels_redis.core.RedisChannelLayer"
    (host,) = redis["CONFIG"]["hosts"]
    assert host["address"] == "redis://127.0.0.1:6379/0"
    # redis-py 8 defaults to a 5 s read timeout, which would abort every idle BZPOPMIN.
    assert host["socket_timeout"] > RedisChannelLayer.brpop_timeout
