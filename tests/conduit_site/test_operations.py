"""/healthz, /readyz and /metrics, as probes and scrapers call them; the
metrics of real routed Events and attempts, parsed by prometheus_client's own parser; the
metrics of several processes added up (multiprocess folder, and a real ``serve``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from causal.models import Event
from routing.config.services import config_apply
from routing.engine.heartbeat import HEARTBEATS_NAMESPACE
from tests.causal.factories import KVFactory
from tests.routing.factories import api_token_with_secret
from tests.routing.routerkit import accept, drain_loop
from tests.support import child_env, run_manage
from tests.worklife.enginekit import runner, step_until
from tests.worklife.factories import WorkFactory
from worklife.heartbeat import HEARTBEATS_NAMESPACE as WORK_HEARTBEATS_NAMESPACE
from worklife.models import Work

ROOT = Path(django_settings.BASE_DIR)
TOKEN = "metrics-token-for-tests"

# A scope whose Events start Work that completes (py), fails and parks (boom), match no route
# (ops.none), or whose route is given up on at once (scripted, data.behaviour = invalid).
DOCUMENT = json.dumps(
    {
        "version": 1,
        "scopes": [
            {
                "path": "ops",
                "bindings": {
                    "py": {"executor": "python", "settings": {"target": "tests.worklife.targets:noop"}},
                    "boom": {"executor": "python", "settings": {"target": "tests.worklife.targets:boom"}},
                },
                "routes": [
                    {
                        "slot": "py",
                        "handler": "match",
                        "params": {"type": "ops.py", "keys": ["py:{data.key}"]},
                        "binding": "py",
                    },
                    {
                        "slot": "boom",
                        "handler": "match",
                        "params": {"type": "ops.boom", "keys": ["boom:{data.key}"]},
                        "binding": "boom",
                    },
                    {
                        "slot": "scripted",
                        "handler": "scripted",
                        "params": {"prefix": "ops.scripted"},
                        "binding": "py",
                    },
                ],
            }
        ],
    }
)


# The same without the test handler, for processes that run with the default settings.
PLAIN_DOCUMENT = json.dumps(
    {
        "version": 1,
        "scopes": [
            {
                **json.loads(DOCUMENT)["scopes"][0],
                "routes": [r for r in json.loads(DOCUMENT)["scopes"][0]["routes"] if r["handler"] == "match"],
            }
        ],
    }
)


@pytest.fixture(autouse=True)
def handlers(test_handlers):
    """The scripted test handler is registered (the document's last route)."""


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of an exposition, parsed by prometheus_client's parser: (name, labels) -> value."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(found: dict, name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


def scrape(client) -> dict:
    response = client.get("/metrics", headers={"authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    return samples(response.content.decode())


@pytest.fixture
def metrics_on(settings):
    settings.CONDUIT_METRICS = True
    settings.CONDUIT_METRICS_TOKEN = TOKEN


def fresh_heartbeats(*, route_age: float = 1.0, work_age: float = 1.0) -> None:
    """A route loop's and a work loop's heartbeat rows, ``*_age`` seconds old (real time)."""
    now = timezone.now()
    KVFactory(namespace=HEARTBEATS_NAMESPACE, key="host-a:1", updated_at=now - timedelta(seconds=route_age))
    KVFactory(
        namespace=WORK_HEARTBEATS_NAMESPACE,
        key="host-a:2",
        value={"stopped": False},
        updated_at=now - timedelta(seconds=work_age),
    )


# --- /healthz --------------------------------------------------------------------------------


def test_healthz_answers_with_no_database_session_or_allowed_host(client):
    # No django_db mark: any database access here would raise.
    response = client.get("/healthz", headers={"host": "10.1.2.3:8000"})  # not in ALLOWED_HOSTS

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert response["Cache-Control"] == "no-store"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert "Set-Cookie" not in response and not response.cookies
    assert "Content-Security-Policy" not in response  # answered before the CSP middleware


def test_healthz_is_not_redirected_to_https_in_production(client, settings):
    settings.SECURE_SSL_REDIRECT = True

    assert client.get("/healthz").status_code == 200
    assert client.get("/login/").status_code == 301  # the rest still is


def test_post_to_an_operations_endpoint_is_refused(client):
    response = client.post("/healthz")

    assert response.status_code == 405 and response["Allow"] == "GET, HEAD"


def test_healthz_answers_and_readyz_names_the_database_when_the_database_is_down():
    """In a process whose database does not answer (nothing listens on its port)."""
    script = textwrap.dedent(
        """
        import json, django
        django.setup()
        from django.test import Client
        client = Client()
        health = client.get("/healthz")
        ready = client.get("/readyz")
        print(json.dumps([health.status_code, health.json(), ready.status_code, ready.json()]))
        """
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "conduit_site.settings",
        "DATABASE_URL": "postgres://conduit@127.0.0.1:1/nowhere",
    }
    env.pop("TEST_DATABASE_NAME", None)

    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )

    assert result.returncode == 0, result.stderr
    health_status, health, ready_status, ready = json.loads(result.stdout.strip().splitlines()[-1])
    assert (health_status, health) == (200, {"status": "ok"})
    assert ready_status == 503 and ready["status"] == "unready"
    checks = {check["name"]: check for check in ready["checks"]}
    assert list(checks) == ["database", "migrations", "configuration", "route_loop", "work_loop"]
    assert checks["database"] == {"name": "database", "ok": False, "detail": "the database does not answer"}
    assert all(
        not c["ok"] and c["detail"].startswith("not checked") for n, c in checks.items() if n != "database"
    )
    assert "127.0.0.1" not in result.stdout and "nowhere" not in result.stdout  # no detail leaks


# --- /readyz ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_readyz_is_ready_with_a_live_configuration_and_fresh_loop_heartbeats(client, clock):
    config_apply(document=DOCUMENT, clock=clock)
    fresh_heartbeats()

    response = client.get("/readyz", headers={"host": "10.1.2.3"})

    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["status"] == "ready"
    assert [(c["name"], c["ok"]) for c in body["checks"]] == [
        ("database", True),
        ("migrations", True),
        ("configuration", True),
        ("route_loop", True),
        ("work_loop", True),
    ]
    assert response["Cache-Control"] == "no-store"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("route_age", "work_age", "failing"),
    [(61, 1, "route_loop"), (1, 61, "work_loop"), (3600, 3600, "route_loop,work_loop")],
)
def test_readyz_turns_503_when_a_loops_heartbeat_is_stale(client, clock, route_age, work_age, failing):
    config_apply(document=DOCUMENT, clock=clock)
    fresh_heartbeats(route_age=route_age, work_age=work_age)

    response = client.get("/readyz")

    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unready"
    assert sorted(c["name"] for c in body["checks"] if not c["ok"]) == failing.split(",")
    stale = next(c for c in body["checks"] if not c["ok"])
    assert "heartbeat newer than 60 s" in stale["detail"]
    assert "host-a" not in response.content.decode()  # the heartbeats' keys name hosts and pids


@pytest.mark.django_db
def test_readyz_turns_503_when_a_stopped_work_loop_left_the_only_heartbeat(client, clock):
    config_apply(document=DOCUMENT, clock=clock)
    KVFactory(namespace=HEARTBEATS_NAMESPACE, key="h:1", updated_at=timezone.now())
    KVFactory(
        namespace=WORK_HEARTBEATS_NAMESPACE, key="h:2", value={"stopped": True}, updated_at=timezone.now()
    )

    body = client.get("/readyz").json()

    assert [c["name"] for c in body["checks"] if not c["ok"]] == ["work_loop"]


@pytest.mark.django_db
def test_readyz_without_a_configuration_and_with_an_excluded_check(client):
    KVFactory(namespace=HEARTBEATS_NAMESPACE, key="h:1", updated_at=timezone.now())

    unready = client.get("/readyz")
    excluded = client.get("/readyz?exclude=work_loop,configuration")
    unknown = client.get("/readyz?exclude=work-loop")

    assert unready.status_code == 503
    assert {c["name"]: c["detail"] for c in unready.json()["checks"] if not c["ok"]} == {
        "configuration": "no configuration has been applied",
        "work_loop": "no work loop has a heartbeat newer than 60 s",
    }
    assert excluded.status_code == 200
    assert [c["name"] for c in excluded.json()["checks"]] == ["database", "migrations", "route_loop"]
    assert unknown.status_code == 400 and "work-loop" in unknown.json()["error"]


@pytest.mark.django_db
def test_readyz_counts_unapplied_migrations(client, clock, monkeypatch):
    config_apply(document=DOCUMENT, clock=clock)
    fresh_heartbeats()
    from django.db.migrations.executor import MigrationExecutor

    monkeypatch.setattr(
        MigrationExecutor, "migration_plan", lambda self, targets: [("a", False), ("b", False)]
    )

    body = client.get("/readyz").json()

    assert [(c["name"], c["detail"]) for c in body["checks"] if not c["ok"]] == [
        ("migrations", "2 migrations are not applied")
    ]


# --- /metrics: the switch and the token --------------------------------------------------------


@pytest.mark.django_db
def test_metrics_are_off_by_default_a_404(client):
    response = client.get("/metrics")

    assert response.status_code == 404


@pytest.mark.django_db
def test_metrics_with_a_token_refuse_a_scrape_without_it(client, metrics_on):
    missing = client.get("/metrics")
    wrong = client.get("/metrics", headers={"authorization": "Bearer not-the-token"})
    basic = client.get("/metrics", headers={"authorization": f"Basic {TOKEN}"})
    right = client.get("/metrics", headers={"authorization": f"Bearer {TOKEN}", "host": "10.1.2.3:8000"})

    assert [missing.status_code, wrong.status_code, basic.status_code] == [401, 401, 401]
    assert missing["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert right.status_code == 200 and right["Cache-Control"] == "no-store"
    assert "conduit_database_up 1.0" in right.content.decode()


@pytest.mark.django_db
def test_metrics_on_without_a_token_are_open(client, settings):
    settings.CONDUIT_METRICS = True
    settings.CONDUIT_METRICS_TOKEN = ""

    assert client.get("/metrics").status_code == 200


@pytest.mark.django_db
def test_metrics_gauges_read_the_backlog_heartbeats_and_parked_work(client, clock, metrics_on):
    config_apply(document=DOCUMENT, clock=clock)
    for n in range(3):
        accept(clock, "ops.none", {"n": n}, scope="ops")
    fresh_heartbeats(route_age=5, work_age=90)

    found = scrape(client)

    assert value(found, "conduit_events_unrouted") == 3
    assert value(found, "conduit_events_unrouted_oldest_seconds") > 0
    assert 5 <= value(found, "conduit_loop_heartbeat_age_seconds", loop="route_loop") < 60
    assert value(found, "conduit_loop_heartbeat_age_seconds", loop="work_loop") >= 90
    assert value(found, "conduit_loops_alive", loop="route_loop") == 1
    assert value(found, "conduit_loops_alive", loop="work_loop") == 0
    assert value(found, "conduit_work_parked") == 0 and value(found, "conduit_attempts_running") == 0


# --- /metrics: real routed Events and attempts ----------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_metrics_count_real_routed_events_and_attempts(client, clock, settings, metrics_on, test_handlers):
    settings.CONDUIT_MAX_ATTEMPTS = 1  # boom's first failure parks its Work
    config_apply(document=DOCUMENT, clock=clock)
    before = scrape(client)
    events_before = Event.objects.count()

    for key in ("a", "b"):
        accept(clock, "ops.py", {"key": key}, scope="ops")
    accept(clock, "ops.boom", {"key": "c"}, scope="ops")
    accept(clock, "ops.none", {}, scope="ops")
    accept(clock, "ops.scripted", {"behaviour": "invalid"}, scope="ops")
    clock.advance(seconds=0.03)  # each Event's route latency
    drain_loop(clock)
    work = runner(clock)
    try:
        step_until(
            work, lambda: not Work.objects.exclude(status="completed").filter(parked_at__isnull=True).exists()
        )
    finally:
        work.shutdown(grace=0)
    after = scrape(client)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("conduit_events_accepted_total", scope="ops") == Event.objects.count() - events_before == 5
    assert delta("conduit_events_routed_total", scope="ops", policy="start") == 3
    assert delta("conduit_events_routed_total", scope="ops", policy="unmatched") == 1
    assert delta("conduit_events_routed_total", scope="ops", policy="failed") == 1  # dead-lettered
    assert delta("conduit_route_failures_total", code="handler_invalid") == 1
    assert delta("conduit_route_latency_seconds_count") == 4  # the routed ones, not the given up
    assert delta("conduit_route_latency_seconds_bucket", le="0.025") == 0
    assert delta("conduit_route_latency_seconds_bucket", le="0.05") == 4
    assert delta("conduit_route_latency_seconds_sum") == pytest.approx(4 * 0.03, abs=1e-3)
    assert delta("conduit_attempts_started_total", scope="ops", binding="py") == 2
    assert delta("conduit_attempts_completed_total", scope="ops", binding="py") == 2
    assert delta("conduit_attempt_duration_seconds_count", scope="ops", binding="py") == 2
    assert delta("conduit_attempts_started_total", scope="ops", binding="boom") == 1
    assert delta("conduit_attempts_failed_total", scope="ops", binding="boom") == 1
    assert delta("conduit_attempts_parked_total", scope="ops", binding="boom") == 1
    assert value(after, "conduit_events_unrouted") == 0
    assert value(after, "conduit_work_parked") == 1
    # Labels name scopes, bindings, policies, codes and buckets: never an Event's id or seq.
    labels = {pair for (name, pairs) in after if name.startswith("conduit_") for pair in pairs}
    assert {name for name, _ in labels} <= {
        "scope",
        "policy",
        "code",
        "binding",
        "le",
        "loop",
        "kind",
        "route",
    }
    assert not {v for _, v in labels} & set(Event.objects.values_list("envelope_id", flat=True))


@pytest.mark.django_db(transaction=True)
def test_metrics_count_the_events_a_route_dropped_over_its_rate_limit_by_route(client, clock, metrics_on):
    document = json.loads(DOCUMENT)
    document["scopes"][0]["routes"][0]["rate_limit"] = {"limit": 2, "period": "1m"}
    config_apply(document=json.dumps(document), clock=clock)
    before = scrape(client)
    for key in "abcde":
        accept(clock, "ops.py", {"key": key}, scope="ops")
    drain_loop(clock)
    after = scrape(client)
    dropped = value(after, "conduit_events_rate_limited_total", scope="ops", route="py") - value(
        before, "conduit_events_rate_limited_total", scope="ops", route="py"
    )
    assert dropped == 3


@pytest.mark.django_db(transaction=True)
def test_the_api_gives_an_event_dropped_over_a_rate_limit_its_reason(client, clock, reader_auth):
    document = json.loads(DOCUMENT)
    document["scopes"][0]["routes"][0]["rate_limit"] = {"limit": 1, "period": "1m", "key": "{data.key}"}
    config_apply(document=json.dumps(document), clock=clock)
    taken, dropped = (accept(clock, "ops.py", {"key": "a"}, scope="ops") for _ in range(2))
    drain_loop(clock)
    first = client.get(f"/api/events/{taken.seq}/route", headers=reader_auth).json()
    route = client.get(f"/api/events/{dropped.seq}/route", headers=reader_auth).json()
    assert first["policy"] == "start"
    # The drop names the Work the Event was for: it shows in that Work's history.
    assert (route["policy"], route["route"], route["work"]) == ("drop", "py", first["work"])
    assert route["reason"] == "rate limited: route 'py' in ops is over its rate limit 1 per 60 s (key a)"


@pytest.mark.django_db(transaction=True)
def test_causal_refusals_are_counted_by_kind(client, clock, settings, metrics_on):
    from causal.limits import Causal, CausalRefused, Limits
    from causal.services import Envelope

    config_apply(document=DOCUMENT, clock=clock)
    root = accept(clock, "ops.root", {}, scope="ops")
    causal = Causal(clock, Limits(max_depth=0, rate_per_minute=10))
    before = scrape(client)

    with pytest.raises(CausalRefused):
        causal.derive(
            parent=root, envelope=Envelope(id="d1", source="tests", type="ops.derived", scope="ops", data={})
        )

    after = scrape(client)
    assert (
        value(after, "conduit_causal_refusals_total", kind="depth_exceeded")
        - value(before, "conduit_causal_refusals_total", kind="depth_exceeded")
        == 1
    )


# --- several processes ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_metrics_add_up_every_process_of_the_multiprocess_folder(
    client, clock, metrics_on, tmp_path, monkeypatch
):
    config_apply(document=PLAIN_DOCUMENT, clock=clock)
    folder = tmp_path / "metrics"
    lines = [
        json.dumps(
            {"specversion": "1.0", "id": f"m{n}", "source": "tests", "type": "ops.none", "scope": "ops"}
        )
        for n in range(5)
    ]
    env = {"CONDUIT_METRICS": "on", "PROMETHEUS_MULTIPROC_DIR": str(folder)}
    # Two processes accept (3, then 2 Events), a third routes them all.
    for chunk in (lines[:3], lines[3:]):
        accepted = run_manage("events", "accept", "-", stdin="\n".join(chunk) + "\n", **env)
        assert accepted.returncode == 0, accepted.stderr
    routed = run_manage("route_loop", "--drain", **env)
    assert routed.returncode == 0, routed.stderr
    assert len(list(folder.glob("*.db"))) >= 3  # each process wrote its own file
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(folder))

    found = scrape(client)

    assert value(found, "conduit_events_accepted_total", scope="ops") == 5
    assert value(found, "conduit_events_routed_total", scope="ops", policy="unmatched") == 5
    assert value(found, "conduit_events_unrouted") == 0


def test_serve_empties_its_metrics_folder_and_keeps_one_given_to_it(tmp_path, settings, monkeypatch):
    from infra.metrics import MULTIPROC_ENV, prepare_children_directory

    settings.CONDUIT_METRICS = False
    assert prepare_children_directory(tmp_path) == {}
    settings.CONDUIT_METRICS = True
    monkeypatch.delenv(MULTIPROC_ENV, raising=False)
    stale = tmp_path / "metrics" / "counter_123.db"
    stale.parent.mkdir()
    stale.write_bytes(b"old")

    env = prepare_children_directory(tmp_path)

    assert env == {MULTIPROC_ENV: str(tmp_path / "metrics")}
    assert not stale.exists() and (tmp_path / "metrics").stat().st_mode & 0o077 == 0
    given = tmp_path / "given"
    given.mkdir()
    (given / "counter_9.db").write_bytes(b"a unit's")
    monkeypatch.setenv(MULTIPROC_ENV, str(given))
    assert prepare_children_directory(tmp_path) == {MULTIPROC_ENV: str(given)}
    assert (given / "counter_9.db").exists()  # its owner empties it, not serve


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http(url: str, *, data: bytes | None = None, headers: dict | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_serve_adds_up_its_web_processes_and_loops(tmp_path, clock):
    """``serve --workers 2`` with a metrics token: Events posted to the API (either web process
    answers), routed by the route loop and run by the work loop; every scrape, whichever web
    process answers it, shows every process's counts; /healthz and /readyz answer."""
    config_apply(document=PLAIN_DOCUMENT, clock=clock)
    _, api_secret = api_token_with_secret(user__permissions=("routing.accept_event",))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--workers", "2", "--port", str(port)],
        cwd=ROOT,
        env=child_env(CONDUIT_VAR_DIR=str(tmp_path), CONDUIT_METRICS_TOKEN=TOKEN, LOG_LEVEL="WARNING"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert "Conduit console" in server.stdout.readline()
        for n in range(6):
            event = {"specversion": "1.0", "id": f"s{n}", "source": "tests", "type": "ops.py", "scope": "ops"}
            event["data"] = {"key": f"k{n}"}
            status, body = http(
                f"{base}/api/events",
                data=json.dumps(event).encode(),
                headers={"Authorization": f"Bearer {api_secret}", "Content-Type": "application/json"},
            )
            assert status == 201, body
        deadline = time.monotonic() + 90
        while Work.objects.filter(status="completed").count() < 6 or http(f"{base}/readyz")[0] != 200:
            assert time.monotonic() < deadline, http(f"{base}/readyz")
            time.sleep(0.2)
        assert http(f"{base}/healthz") == (200, b'{"status": "ok"}')
        scrapes = []
        for _ in range(6):
            status, body = http(f"{base}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
            assert status == 200
            scrapes.append(samples(body.decode()))
        assert http(f"{base}/metrics")[0] == 401
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    for found in scrapes:
        assert value(found, "conduit_events_accepted_total", scope="ops") == 6
        assert value(found, "conduit_events_routed_total", scope="ops", policy="start") == 6
        assert value(found, "conduit_attempts_completed_total", scope="ops", binding="py") == 6
        assert value(found, "conduit_loops_alive", loop="work_loop") == 1
    assert server.returncode == 0
    assert list((tmp_path / "metrics").glob("counter_*.db"))  # serve's folder, under the var folder


def test_check_deploy_warns_about_metrics_served_without_a_token(settings):
    from django.core import checks

    settings.CONDUIT_METRICS, settings.CONDUIT_METRICS_TOKEN = True, ""
    open_ = [
        m.id
        for m in checks.run_checks(tags=[checks.Tags.security], include_deployment_checks=True)
        if m.id.startswith("conduit.")
    ]
    settings.CONDUIT_METRICS_TOKEN = TOKEN
    tokened = [
        m.id
        for m in checks.run_checks(tags=[checks.Tags.security], include_deployment_checks=True)
        if m.id.startswith("conduit.")
    ]

    assert open_ == ["conduit.W001"] and tokened == []


@pytest.mark.django_db(transaction=True)
def test_hosts_sharing_a_metrics_folder_each_write_files_of_their_own(
    client, clock, metrics_on, tmp_path, monkeypatch
):
    """Containers share one metrics volume (compose.yaml) and each one's first process may have
    the same pid: the files are named by host and pid, and /metrics adds up every host's."""
    config_apply(document=PLAIN_DOCUMENT, clock=clock)
    folder = tmp_path / "metrics"
    for host in ("route-loop-1", "route-loop-2"):
        line = json.dumps(
            {"specversion": "1.0", "id": host, "source": "tests", "type": "ops.none", "scope": "ops"}
        )
        env = {"CONDUIT_METRICS": "on", "PROMETHEUS_MULTIPROC_DIR": str(folder), "CONDUIT_HOSTNAME": host}
        accepted = run_manage("events", "accept", "-", stdin=line + "\n", **env)
        assert accepted.returncode == 0, accepted.stderr
    names = sorted(path.name for path in folder.glob("*.db"))
    assert {name.split("_", 1)[1].rsplit("-", 1)[0] for name in names} == {"route-loop-1", "route-loop-2"}, (
        names
    )
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(folder))

    assert value(scrape(client), "conduit_events_accepted_total", scope="ops") == 2


@pytest.mark.django_db
def test_metrics_count_the_work_flow_control_holds_by_kind(client, metrics_on):
    later = timezone.now() + timedelta(minutes=5)
    WorkFactory.create_batch(2, hold_kind="concurrency", hold_reason="at its limit", held_until=later)
    WorkFactory(hold_kind="debounce", hold_reason="debounced", held_until=later)
    WorkFactory(
        hold_kind="throttle", hold_reason="throttled", held_until=timezone.now() - timedelta(seconds=1)
    )

    found = scrape(client)

    assert value(found, "conduit_work_flow_held", kind="concurrency") == 2
    assert value(found, "conduit_work_flow_held", kind="debounce") == 1
    assert value(found, "conduit_work_flow_held", kind="throttle") == 0  # its hold is over
    assert ("conduit_work_flow_held", frozenset({("kind", "batch")})) in found


@pytest.mark.django_db
def test_metrics_count_what_pauses_hold_by_kind(client, metrics_on):
    from causal.clock import system_clock
    from tests.worklife.factories import WorkFactory
    from worklife.models import PauseKind
    from worklife.pauses import PauseTarget, pause_create

    WorkFactory(scope="acme/web", binding="triage")
    WorkFactory(scope="other", binding="triage")
    pause_create(
        target=PauseTarget(PauseKind.SCOPE, "acme"),
        paused_by="alice",
        reason="",
        until=None,
        clock=system_clock,
    )
    found = scrape(client)
    assert value(found, "conduit_work_flow_held", kind="pause") == 1
    assert value(found, "conduit_events_held_by_pause") == 0
    assert value(found, "conduit_pauses_in_force", kind="scope") == 1
