"""Live-update plumbing: group names, publishing after commit, and the channel layer the
settings choose (REDIS_URL or the embedded SQLite file)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels_redis.core import RedisChannelLayer
from django.db import transaction

from infra.live import (
    EVENTS_GROUP,
    UPDATE_TYPE,
    events_ws_path,
    group_name_for_work,
    publish_on_commit,
    work_ws_path,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def layer(settings, tmp_path):
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "infra.layers.SQLiteChannelLayer",
            "CONFIG": {"path": str(tmp_path / "channels.sqlite3"), "poll_interval": 0.01},
        }
    }
    return get_channel_layer()


def members_receive(layer, group: str, publish) -> list[dict]:
    """Join ``group`` with one channel, run ``publish``, return what arrived."""

    async def join():
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        return channel

    async def drain(channel):
        got = []
        while True:
            try:
                got.append(await asyncio.wait_for(layer.receive(channel), 0.3))
            except TimeoutError:
                return got

    channel = async_to_sync(join)()
    publish()
    return async_to_sync(drain)(channel)


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


@pytest.mark.django_db(transaction=True)
def test_d4_publish_waits_for_commit_and_skips_rollback(layer):
    def publish():
        with transaction.atomic():
            publish_on_commit("work.5", {"work_id": 5, "seq": 1})
        with pytest.raises(RuntimeError), transaction.atomic():
            publish_on_commit("work.5", {"work_id": 5, "seq": 2})
            raise RuntimeError("rolled back")
        # Outside a transaction it is sent at once.
        publish_on_commit("work.5", {"work_id": 5, "seq": 3})

    got = members_receive(layer, "work.5", publish)
    assert got == [
        {"type": UPDATE_TYPE, "group": "work.5", "payload": {"work_id": 5, "seq": 1}},
        {"type": UPDATE_TYPE, "group": "work.5", "payload": {"work_id": 5, "seq": 3}},
    ]


@pytest.mark.django_db(transaction=True)
def test_d4_a_bad_group_is_refused_at_once_and_a_failed_send_never_breaks_the_commit(settings, caplog):
    with pytest.raises(ValueError, match="group"):
        publish_on_commit("work 5!", {"work_id": 5})
    # A channel layer that cannot be reached: the commit stands, the failure is logged.
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "infra.layers.SQLiteChannelLayer",
            "CONFIG": {"path": "/proc/no-such-dir/channels.sqlite3"},
        }
    }
    with transaction.atomic():
        publish_on_commit(EVENTS_GROUP, {"seq": 1})
    assert "on_commit" in caplog.text


def test_d4_settings_choose_redis_with_a_socket_timeout_past_its_blocking_pop(tmp_path):
    code = (
        "import json; from conduit_site import settings; "
        "print(json.dumps(settings.CHANNEL_LAYERS['default'], default=str))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "CONDUIT_VAR_DIR": str(tmp_path)}
    env.pop("REDIS_URL", None)
    embedded = json.loads(
        subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, check=True, text=True
        ).stdout
    )
    assert embedded["BACKEND"] == "infra.layers.SQLiteChannelLayer"
    assert embedded["CONFIG"]["path"] == str(tmp_path / "channels.sqlite3")

    env["REDIS_URL"] = "redis://127.0.0.1:6379/0"
    redis = json.loads(
        subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, check=True, text=True
        ).stdout
    )
    assert redis["BACKEND"] == "channels_redis.core.RedisChannelLayer"
    (host,) = redis["CONFIG"]["hosts"]
    assert host["address"] == "redis://127.0.0.1:6379/0"
    # redis-py 8 defaults to a 5 s read timeout, which would abort every idle BZPOPMIN.
    assert host["socket_timeout"] > RedisChannelLayer.brpop_timeout
