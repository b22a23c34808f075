"""The deployment guide's files (docs/deploy.md): the compose file, the systemd
units, the Dockerfile and the proxy's configuration run commands that exist, with arguments their
parsers take, and set only settings Conduit reads."""

from __future__ import annotations

import configparser
import http.server
import ipaddress
import json
import re
import select
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlencode

import pytest
import yaml
from django.core.management import get_commands, load_command_class
from django.test import RequestFactory, override_settings

from conduit_site.proxies import client_ip

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
UNITS = DEPLOY / "systemd"
# Where the units expect the checkout (docs/deploy.md); verified against this checkout.
INSTALLED = "/srv/conduit"
SETTINGS_SOURCE = (ROOT / "conduit_site" / "settings.py").read_text()
# Read by a library or by serve rather than by settings.py.
OTHER_ENVIRONMENT = {"PROMETHEUS_MULTIPROC_DIR"}
PASSWORD = "a-long-console-password-1"
WRONG = "not-the-password-9"


def parse_command(argv: list[str]) -> None:
    """``argv`` (a manage.py command and its arguments) is a command its parser accepts."""
    name, *arguments = argv
    commands = get_commands()
    assert name in commands, f"manage.py has no command {name!r}"
    command = load_command_class(commands[name], name)
    command.create_parser("manage.py", name).parse_args(arguments)


def assert_setting(name: str) -> None:
    assert name in OTHER_ENVIRONMENT or re.search(rf"[\"']{name}[\"']", SETTINGS_SOURCE), (
        f"{name} is not a setting conduit_site/settings.py reads"
    )


# --- compose.yaml --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


def conduit_services(compose: dict) -> dict[str, dict]:
    return {name: s for name, s in compose["services"].items() if s.get("image") == "conduit:latest"}


def test_compose_runs_postgres_redis_web_two_route_and_two_work_loops_behind_caddy(compose):
    services = compose["services"]
    assert {"postgres", "redis", "migrate", "web", "caddy"} <= set(services)
    conduit = conduit_services(compose)
    commands = [s["command"][0] for s in conduit.values()]
    assert commands.count("route_loop") == 2
    assert commands.count("work_loop") == 2
    assert services["web"]["command"][0] == "serve"
    assert services["migrate"]["command"][0] == "migrate"
    for name, service in conduit.items():
        parse_command(service["command"])
        if name != "migrate":
            assert service["restart"] == "always", name
            assert service["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}, name


def test_each_compose_container_has_a_hostname_of_its_own(compose):
    conduit = conduit_services(compose)
    names = [s["environment"]["CONDUIT_HOSTNAME"] for s in conduit.values()]
    assert len(set(names)) == len(names) == len(conduit)
    for name, service in conduit.items():
        assert service["hostname"] == service["environment"]["CONDUIT_HOSTNAME"], name


def test_compose_sets_only_conduit_s_settings_and_names_its_own_services(compose):
    services = compose["services"]
    for service in conduit_services(compose).values():
        environment = service["environment"]
        for name in environment:
            assert_setting(name)
        assert environment["CONDUIT_ENV"] == "production"
        for url in (environment["DATABASE_URL"], environment["REDIS_URL"]):
            host = re.match(r"^\w+://(?:[^@/]*@)?([\w.-]+)", url).group(1)
            assert host in services, url
    assert (
        services["postgres"]["environment"]["POSTGRES_DB"] in services["web"]["environment"]["DATABASE_URL"]
    )


# --- the proxy -----------------------------------------------------------------------------------


def caddy_upstreams() -> list[str]:
    text = (DEPLOY / "Caddyfile").read_text()
    lines = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    for line in lines:
        # Headers that would keep a client's own X-Forwarded-For, or replace Caddy's.
        assert "trusted_proxies" not in line and "X-Forwarded-For" not in line, line
    return [
        word for line in lines if line.startswith("reverse_proxy") for word in line.split()[1:] if word != "{"
    ]


def test_caddy_proxies_to_the_web_service_on_its_port(compose):
    serve = compose["services"]["web"]["command"]
    port = serve[serve.index("--port") + 1]
    assert caddy_upstreams() == [f"web:{port}"]
    mounted = [v.split(":")[0] for v in compose["services"]["caddy"]["volumes"]]
    assert "./deploy/Caddyfile" in mounted
    assert (ROOT / "deploy" / "Caddyfile").exists()


def test_the_trusted_proxy_setting_names_caddy_and_no_other_container(compose):
    caddy = compose["services"]["caddy"]["networks"]["conduit"]["ipv4_address"]
    subnet = ipaddress.ip_network(compose["networks"]["conduit"]["ipam"]["config"][0]["subnet"])
    assert ipaddress.ip_address(caddy) in subnet
    trusted = compose["services"]["web"]["environment"]["CONDUIT_TRUSTED_PROXIES"]
    other = str(next(a for a in subnet.hosts() if str(a) != caddy))
    factory = RequestFactory()
    with override_settings(CONDUIT_TRUSTED_PROXIES=[p.strip() for p in trusted.split(",")]):
        # Through Caddy (which sets X-Forwarded-For), the client's address is read; a forged
        # entry on the left is not.
        through = factory.get("/", REMOTE_ADDR=caddy, HTTP_X_FORWARDED_FOR="198.51.100.9, 203.0.113.7")
        assert client_ip(through) == "203.0.113.7"
        # Another container of the network is no proxy: its header is ignored.
        direct = factory.get("/", REMOTE_ADDR=other, HTTP_X_FORWARDED_FOR="203.0.113.7")
        assert client_ip(direct) == other
    # Caddy and the web hold the proxy's secret; no loop does.
    services = compose["services"]
    holders = {name for name, s in services.items() if "CONDUIT_PROXY_SECRET" in s.get("environment", {})}
    assert holders == {"web", "caddy"}
    assert (
        services["web"]["environment"]["CONDUIT_PROXY_SECRET"]
        == services["caddy"]["environment"]["CONDUIT_PROXY_SECRET"]
    )


class _Recorder(http.server.BaseHTTPRequestHandler):
    """The upstream: answers 200 and keeps each request's headers."""

    seen: list[dict[str, str]] = []

    def do_GET(self):  # noqa: N802 - the handler's method name
        self.seen.append(dict(self.headers.items()))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen, what: str, log: Path) -> None:
    for _ in range(300):
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        if process.poll() is not None:
            pytest.fail(f"{what} stopped: {log.read_text()[-3000:]}")
        threading.Event().wait(0.1)
    pytest.fail(f"{what} did not listen")


def adapted_caddyfile(directory: Path) -> dict:
    """deploy/Caddyfile as Caddy reads it (its JSON configuration)."""
    caddy = shutil.which("caddy")
    assert caddy, "caddy is missing: install Debian's caddy package (.ci/run does)"
    environment = {"PATH": "/usr/bin:/bin", "HOME": str(directory), "XDG_DATA_HOME": str(directory)}
    adapted = subprocess.run(
        [caddy, "adapt", "--config", str(DEPLOY / "Caddyfile"), "--adapter", "caddyfile"],
        capture_output=True,
        text=True,
        env=environment,
        check=True,
        timeout=60,
    )
    return json.loads(adapted.stdout)


@contextmanager
def caddy_in_front(directory: Path, upstream_port: int, **environment: str) -> Iterator[int]:
    """deploy/Caddyfile run by Caddy, its listener moved to a loopback port (yielded) and its
    upstream to ``upstream_port``; ``environment`` is Caddy's (CONDUIT_PROXY_SECRET)."""
    config = adapted_caddyfile(directory)
    [server] = config["apps"]["http"]["servers"].values()
    assert server["listen"] == [":443"]
    listen = free_port()
    server["listen"] = [f"127.0.0.1:{listen}"]
    server["automatic_https"] = {"disable": True}
    text = json.dumps(config)
    assert text.count('"dial": "web:8000"') == 1
    text = text.replace('"dial": "web:8000"', f'"dial": "127.0.0.1:{upstream_port}"')
    text = text.replace('"host": ["localhost"]', '"host": ["127.0.0.1"]')
    config = json.loads(text)
    config["admin"] = {"disabled": True}
    (directory / "caddy.json").write_text(json.dumps(config))
    log = directory / "caddy.log"
    process = subprocess.Popen(
        [shutil.which("caddy"), "run", "--config", str(directory / "caddy.json")],
        env={"PATH": "/usr/bin:/bin", "HOME": str(directory), "XDG_DATA_HOME": str(directory), **environment},
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),  # a file: a pipe nobody reads would fill and stop Caddy
    )
    try:
        wait_for_port(listen, process, "Caddy", log)
        yield listen
    finally:
        process.terminate()
        process.wait(timeout=10)


def raw_request(port: int, head: str, *, source: str = "127.0.0.2", body: bytes = b"") -> bytes:
    """``head`` (a request line and headers, without the blank line) and ``body`` sent as they
    are (no client library cleans the path) to ``port`` from ``source``; the whole answer."""
    data = head.encode() + b"\r\nConnection: close\r\n\r\n" + body
    chunks = []
    with socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0)) as c:
        # A proxy that refuses a body answers and closes before reading the rest: stop sending once
        # an answer is waiting, so that the rest does not make the proxy reset the connection
        # before the answer is read.
        try:
            for start in range(0, len(data), 65536):
                if select.select([c], [], [], 0)[0]:
                    break
                c.sendall(data[start : start + 65536])
        except (BrokenPipeError, ConnectionResetError):
            pass  # the peer stopped reading; its answer may be waiting
        try:
            while chunk := c.recv(65536):
                chunks.append(chunk)
        except ConnectionResetError:
            pass  # what it answered before the reset is kept
    return b"".join(chunks)


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def test_caddy_sends_the_client_address_conduit_reads_and_keeps_metrics_inside(tmp_path):
    """deploy/Caddyfile run by Caddy, its listener and upstream moved to loopback ports: a client
    (at 127.0.0.2) that forges X-Forwarded-For and X-Conduit-Proxy is still seen at its own
    address by ``client_ip`` with Caddy's address and secret trusted, and /metrics is answered
    404 by Caddy."""
    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    try:
        with caddy_in_front(tmp_path, upstream.server_port, CONDUIT_PROXY_SECRET=PROXY_SECRET) as listen:

            def get(path: str) -> int:
                return status_of(
                    raw_request(
                        listen,
                        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Forwarded-For: 203.0.113.66\r\n"
                        "X-Conduit-Proxy: forged\r\nDaphne-Root-Path: /login",
                    )
                )

            # Caddy's own rule, whatever the upstream would answer: no spelling reaches it.
            for spelling in METRICS_SPELLINGS:
                assert get(spelling) == 404, spelling
            assert _Recorder.seen == []
            assert get("/login/") == 200
    finally:
        upstream.shutdown()
    [headers] = _Recorder.seen
    forwarded = headers["X-Forwarded-For"]
    assert headers["X-Forwarded-Proto"] == "http"  # https behind its TLS
    assert headers["X-Conduit-Proxy"] == PROXY_SECRET
    assert "Daphne-Root-Path" not in headers
    request = RequestFactory().get(
        "/",
        REMOTE_ADDR="127.0.0.1",
        HTTP_X_FORWARDED_FOR=forwarded,
        HTTP_X_CONDUIT_PROXY=headers["X-Conduit-Proxy"],
    )
    with override_settings(
        CONDUIT_TRUSTED_PROXIES=env_file()["CONDUIT_TRUSTED_PROXIES"].split(","),
        CONDUIT_PROXY_SECRET=PROXY_SECRET,
    ):
        assert client_ip(request) == "127.0.0.2", forwarded


def test_caddy_times_out_slow_requests_and_idle_connections():
    [server] = adapted_caddyfile_cached()["apps"]["http"]["servers"].values()
    seconds = 1_000_000_000
    assert server["read_header_timeout"] == 10 * seconds
    assert server["read_timeout"] == 30 * seconds
    assert server["idle_timeout"] == 120 * seconds


_ADAPTED: list[dict] = []


def adapted_caddyfile_cached() -> dict:
    if not _ADAPTED:
        with tempfile.TemporaryDirectory() as directory:
            _ADAPTED.append(adapted_caddyfile(Path(directory)))
    return _ADAPTED[0]


# --- Conduit behind the real Caddy ---------------------------------------------------------------

PROXY_SECRET = "a-proxy-secret-for-the-tests"
METRICS_TOKEN = "a-metrics-token-for-the-tests"
# Every spelling of /metrics a client could try through the proxy.
METRICS_SPELLINGS = [
    "/metrics",
    "/metrics/",
    "/metrics//",
    "/metrics%2F",
    "/metrics%2f",
    "//metrics",
    "/METRICS",
    "/Metrics/",
    "/metrics?x",
    "/metrics/?x=1",
    "/./metrics",
    "/%2E/metrics",
    "/x/../metrics",
    "/%6detrics",
    "/metric%73",
    "/metrics;x",
    "/metrics%00",
    "/metrics.txt",
    "http://127.0.0.1/metrics",
]


@pytest.fixture(scope="module")
def edge(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[tuple[int, int]]:
    """A real Conduit web process (``serve --no-router``) on the test database, with metrics on
    and a token, the local proxy trusted with its secret; and deploy/Caddyfile's Caddy in front
    of it: (Caddy's port, Conduit's port)."""
    from tests.support import child_env

    directory = tmp_path_factory.mktemp("edge")
    with django_db_blocker.unblock():
        environment = child_env(
            CONDUIT_VAR_DIR=str(directory / "var"),
            CONDUIT_METRICS_TOKEN=METRICS_TOKEN,
            CONDUIT_TRUSTED_PROXIES="127.0.0.1,::1",
            CONDUIT_PROXY_SECRET=PROXY_SECRET,
            LOG_LEVEL="WARNING",
        )
    port = free_port()
    log = directory / "serve.log"
    web = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--no-router", "--workers", "1", "--port", str(port)],
        cwd=ROOT,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
    )
    try:
        wait_for_port(port, web, "Conduit", log)
        with caddy_in_front(directory, port, CONDUIT_PROXY_SECRET=PROXY_SECRET) as listen:
            yield listen, port
    finally:
        web.terminate()
        try:
            web.wait(timeout=30)
        except subprocess.TimeoutExpired:
            web.kill()
            web.wait()


def scrape(port: int, path: str, **headers: str) -> bytes:
    lines = "".join(f"\r\n{name}: {value}" for name, value in headers.items())
    return raw_request(
        port, f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {METRICS_TOKEN}{lines}"
    )


def test_caddy_refuses_every_spelling_of_metrics_while_a_direct_scrape_reads_it(edge):
    """With the token (a leaked one, say), no spelling of /metrics gets the exposition through
    Caddy, nor a client's Daphne-Root-Path that would move the path Conduit routes; a scraper
    that reaches the web process directly reads it."""
    caddy, web = edge
    direct = scrape(web, "/metrics")
    assert status_of(direct) == 200 and b"# TYPE conduit_" in direct, direct[:300]
    for spelling in METRICS_SPELLINGS:
        answer = scrape(caddy, spelling)
        assert status_of(answer) == 404, (spelling, answer[:300])
        assert b"# TYPE" not in answer, spelling
    for root in ("/x", "/x/"):
        answer = scrape(caddy, "/x/metrics", **{"Daphne-Root-Path": root})
        assert status_of(answer) == 404, (root, answer[:300])


def test_conduit_answers_metrics_at_its_exact_path_alone(edge):
    """Directly, too, only ``/metrics`` (percent-decoded, with any query) is the exposition: the
    spellings that a proxy's rule could miss are 404s."""
    _, web = edge
    answered = [s for s in METRICS_SPELLINGS if status_of(scrape(web, s)) == 200]
    assert sorted(answered) == sorted(["/metrics", "/metrics?x", "/%6detrics", "/metric%73"])
    assert status_of(scrape(web, "/x/metrics", **{"Daphne-Root-Path": "/x"})) == 404


def sign_in(port: int, password: str, *, source: str, **headers: str) -> int:
    """A sign-in as the console's form sends it (its CSRF cookie and token first): the status."""
    extra = "".join(f"\r\n{name}: {value}" for name, value in headers.items())
    page = raw_request(port, f"GET /login/ HTTP/1.1\r\nHost: 127.0.0.1{extra}", source=source)
    cookie = re.search(rb"csrftoken=([^;]+)", page).group(1).decode()
    token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1).decode()
    body = urlencode({"csrfmiddlewaretoken": token, "username": "operator", "password": password}).encode()
    answer = raw_request(
        port,
        f"POST /login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: csrftoken={cookie}\r\n"
        f"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {len(body)}{extra}",
        source=source,
        body=body,
    )
    return status_of(answer)


@pytest.mark.django_db(transaction=True)
def test_a_local_process_that_skips_the_proxy_cannot_choose_its_sign_in_address(edge, settings):
    """A process of the proxy's host that connects to the web process directly (its peer is
    127.0.0.1, a trusted proxy's address) and writes X-Forwarded-For without the proxy's secret
    is counted at its own address: five wrong passwords under five forged addresses lock
    127.0.0.1 out. Through Caddy, clients are still told apart by their own addresses."""
    from axes.models import AccessAttempt

    from tests.routing.factories import UserFactory

    caddy, web = edge
    user = UserFactory(username="operator")
    user.set_password(PASSWORD)
    user.save()
    limit = settings.AXES_FAILURE_LIMIT
    statuses = [
        sign_in(
            web,
            WRONG,
            source="127.0.0.1",
            **{"X-Forwarded-For": f"192.0.2.{n + 1}", "X-Conduit-Proxy": "a-guess"},
        )
        for n in range(limit)
    ]
    # The last failure reaches the limit: that answer is the lockout already.
    assert statuses == [200] * (limit - 1) + [429]
    assert sign_in(web, PASSWORD, source="127.0.0.1", **{"X-Forwarded-For": "192.0.2.99"}) == 429
    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {"127.0.0.1"}
    # Through Caddy (its peer is 127.0.0.1 too) each client is its own address.
    statuses = [
        sign_in(caddy, WRONG, source="127.0.0.2", **{"X-Forwarded-For": "127.0.0.3"}) for _ in range(limit)
    ]
    assert statuses == [200] * (limit - 1) + [429]
    assert sign_in(caddy, PASSWORD, source="127.0.0.2") == 429
    assert sign_in(caddy, PASSWORD, source="127.0.0.3") == 302
    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {"127.0.0.1", "127.0.0.2"}


def test_caddy_refuses_a_body_over_its_path_s_limit_before_conduit_reads_it(edge):
    """A declared length over the path's limit is answered 413 at once, with the body never
    sent; a chunked body that grows past it is cut off with 413; a body within it is Conduit's
    to answer."""
    caddy, _ = edge
    limits = {"/hooks/gh": 262144, "/api/events": 262144, "/api/setup/validate": 2098176, "/login/": 2621440}
    for path, limit in limits.items():
        for declared in (limit + 1, 1_000_000_000):
            started = time.monotonic()
            answer = raw_request(
                caddy, f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {declared}", body=b"{"
            )
            assert status_of(answer) == 413, (path, declared, answer[:300])
            assert not answered_by_conduit(answer), path
            assert time.monotonic() - started < 5
        over = b"x" * (limit + 1)
        chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(over), over)
        answer = raw_request(
            caddy, f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked", body=chunked
        )
        # Caddy streams a chunked body on and cuts it off at the limit (413). An API body without
        # a token may meet Conduit's web server first, which refuses it unread (401) and lingers,
        # dropping the rest, so that Caddy, still streaming, reads the answer and passes it on.
        expected = {413, 401} if path.startswith("/api/") else {413}
        assert status_of(answer) in expected, (path, answer[:300])
    # Within the limit the request reaches Conduit, which answers for itself.
    answer = raw_request(caddy, "POST /hooks/gh HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2", body=b"{}")
    assert answered_by_conduit(answer), answer[:300]


def test_caddy_passes_on_conduit_s_refusal_of_an_api_body_sent_without_a_token(edge):
    """An API body without a token, within Caddy's limit, is refused by Conduit before it is
    read (401); Conduit drops the rest instead of resetting the connection, so Caddy, still
    streaming the body, reads the answer and passes it on (a reset made it a 502)."""
    caddy, _ = edge
    body = b"x" * 200_000
    for encoding in ("Transfer-Encoding: chunked", f"Content-Length: {len(body)}"):
        sent = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if "chunked" in encoding else body
        statuses = [
            status_of(
                raw_request(caddy, f"POST /api/events HTTP/1.1\r\nHost: 127.0.0.1\r\n{encoding}", body=sent)
            )
            for _ in range(20)
        ]
        assert statuses == [401] * 20, (encoding, statuses)


def answered_by_conduit(answer: bytes) -> bool:
    """Conduit names every request it answers (X-Request-ID); Caddy's own answers do not."""
    return b"\r\nx-request-id:" in answer.split(b"\r\n\r\n", 1)[0].lower()


def test_the_systemd_web_listens_where_the_local_proxy_is_trusted():
    environment = env_file()
    web = unit("conduit-web.service")["Service"]["ExecStart"][0]
    argv = shlex.split(web)
    host = argv[argv.index("--host") + 1]
    assert host == "127.0.0.1"
    trusted = environment["CONDUIT_TRUSTED_PROXIES"].split(",")
    assert "127.0.0.1" in trusted
    # The proxy's secret is the web's and Caddy's alone: no loop reads it.
    assert "CONDUIT_PROXY_SECRET" not in environment
    assert env_file("proxy.env").keys() == {"CONDUIT_PROXY_SECRET"}
    caddy = configparser.RawConfigParser()
    caddy.optionxform = str  # type: ignore[assignment,method-assign]
    caddy.read_string((DEPLOY / "caddy.conf").read_text())
    assert caddy["Service"]["EnvironmentFile"] == "/etc/conduit/proxy.env"


def env_file(name: str = "conduit.env") -> dict[str, str]:
    out = {}
    for line in (DEPLOY / name).read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, value = line.partition("=")
            out[name] = value
    return out


def test_the_environment_file_sets_only_conduit_s_settings():
    environment = env_file()
    assert environment["CONDUIT_ENV"] == "production"
    for name in (*environment, *env_file("proxy.env")):
        assert_setting(name)


# --- systemd -------------------------------------------------------------------------------------


def unit(name: str) -> dict[str, dict[str, list[str]]]:
    """A unit file's sections, each key with its values in order (keys may repeat)."""
    parser = configparser.RawConfigParser(strict=False, dict_type=_MultiDict, empty_lines_in_values=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string((UNITS / name).read_text())
    return {section: {k: v.split("\n") for k, v in parser.items(section)} for section in parser.sections()}


class _MultiDict(dict):
    """configparser keeps a repeated key's values, one a line (ExecStart= may repeat)."""

    def __setitem__(self, key, value):
        if isinstance(value, list) and key in self:
            self[key].extend(value)
            return
        super().__setitem__(key, value)


UNIT_COMMANDS = {
    "conduit-web.service": "serve",
    "conduit-route-loop.service": "route_loop",
    "conduit-work-loop.service": "work_loop",
}


def test_the_units_run_manage_py_commands_and_restart_always():
    python = f"{INSTALLED}/.venv/bin/python"
    migrate = unit("conduit-migrate.service")
    assert [shlex.split(c)[2] for c in migrate["Service"]["ExecStart"]] == ["migrate", "collectstatic"]
    for line in migrate["Service"]["ExecStart"]:
        parse_command(shlex.split(line)[2:])
    for name, command in UNIT_COMMANDS.items():
        service = unit(name)
        [line] = service["Service"]["ExecStart"]
        argv = shlex.split(line)
        assert argv[:3] == [python, "manage.py", command], name
        parse_command(argv[2:])
        assert service["Service"]["Restart"] == ["always"], name
        assert service["Service"]["WorkingDirectory"] == [INSTALLED], name
        files = ["/etc/conduit/conduit.env"] + (["/etc/conduit/proxy.env"] if command == "serve" else [])
        assert service["Service"]["EnvironmentFile"] == files, name
        assert int(service["Service"]["LimitNOFILE"][0]) >= 65536, name
        # Nothing serves before the migrations ran.
        assert "conduit-migrate.service" in service["Unit"]["Requires"][0].split(), name
        assert "conduit-migrate.service" in service["Unit"]["After"][0].split(), name
    wanted = unit("conduit.target")["Unit"]["Wants"][0].split()
    assert sorted(wanted) == sorted(p.name for p in UNITS.glob("*.service"))


def test_systemd_analyze_verifies_the_units(tmp_path):
    """The units as installed at ``/srv/conduit``, pointed at this checkout and this Python."""
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: install Debian's systemd package (.ci/run does)"
    for path in UNITS.iterdir():
        text = path.read_text().replace(f"{INSTALLED}/.venv/bin/python", sys.executable)
        (tmp_path / path.name).write_text(text.replace(INSTALLED, str(ROOT)))
    units = sorted(str(p) for p in tmp_path.iterdir())
    result = subprocess.run([analyze, "verify", *units], capture_output=True, text=True, timeout=60)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # A misspelt key or value is only a warning ("…, ignoring"): none is allowed.
    problems = [line for line in output.splitlines() if "conduit" in line]
    assert not problems, output


# --- Dockerfile ----------------------------------------------------------------------------------


def dockerfile() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            instruction, _, rest = line.strip().partition(" ")
            out.append((instruction.upper(), rest.strip()))
    return out


def test_the_dockerfile_copies_what_exists_and_every_package_conduit_imports():
    instructions = dockerfile()
    ignored = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines() if line.strip()]
    copied = []
    for instruction, rest in instructions:
        if instruction == "COPY":
            *sources, _ = rest.split()
            for source in sources:
                assert (ROOT / source).exists(), f"COPY {source}: no such file"
                assert source not in ignored, f"COPY {source}: .dockerignore leaves it out"
                copied.append(source.rstrip("/"))
    packages = {
        p.parent.name
        for p in ROOT.glob("*/__init__.py")
        if p.parent.name not in {"tests", "bench", "demo", "mutants"}
    }
    assert packages <= set(copied), packages - set(copied)
    assert {"manage.py", "templates", "static", "requirements.txt"} <= set(copied)
    installs = [rest for instruction, rest in instructions if instruction == "RUN" and "pip install" in rest]
    assert installs and all("--require-hashes -r requirements.txt" in r for r in installs)
    assert copied.index("requirements.txt") < copied.index("manage.py")
    base = next(rest for instruction, rest in instructions if instruction == "FROM")
    assert re.match(r"python:3\.1[23]-", base), base


def test_the_image_s_entry_point_runs_a_manage_py_command():
    instructions = dict(dockerfile())
    entry = yaml.safe_load(instructions["ENTRYPOINT"])
    command = yaml.safe_load(instructions["CMD"])
    assert entry == ["python", "manage.py"]
    parse_command(command)
    workdir = instructions["WORKDIR"]
    environment = instructions["ENV"]
    assert f"PATH={workdir}/.venv/bin:" in environment
    for name in re.findall(r"(\w+)=", environment):
        if name not in {"PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED", "PATH"}:
            assert_setting(name)


def test_the_image_s_files_collect_its_static_files(tmp_path):
    """The Dockerfile's build steps that run Conduit (collectstatic), with its ENV, in a folder
    holding only what it copies: the image's files are enough for production's settings."""
    instructions = dockerfile()
    app = tmp_path / "app"
    app.mkdir()
    for instruction, rest in instructions:
        if instruction == "COPY":
            *sources, _ = rest.split()
            for source in sources:
                if (ROOT / source).is_dir():
                    shutil.copytree(ROOT / source, app / source, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    shutil.copy(ROOT / source, app / source)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    (bin_dir / "python").chmod(0o755)
    environment = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    image_env = dict(re.findall(r"(\w+)=(\S+)", dict(instructions)["ENV"]))
    environment.update({k: v for k, v in image_env.items() if k != "PATH"})
    assert environment["CONDUIT_VAR_DIR"] == "/var/lib/conduit"
    environment["CONDUIT_VAR_DIR"] = str(tmp_path / "var")
    steps = [rest for instruction, rest in instructions if instruction == "RUN" and "manage.py" in rest]
    assert steps
    for step in steps:
        result = subprocess.run(
            ["sh", "-c", step], cwd=app, env=environment, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "var" / "staticfiles" / "staticfiles.json").is_file()


# --- the guide -----------------------------------------------------------------------------------


def test_the_guide_names_files_commands_and_settings_that_exist():
    guide = (ROOT / "docs" / "deploy.md").read_text()
    for link in re.findall(r"\]\((\.\./[^)#]+)", guide):
        assert (ROOT / "docs" / link).resolve().exists(), link
    for path in ("compose.yaml", "Dockerfile", "deploy/Caddyfile", "deploy/conduit.env"):
        assert path in guide and (ROOT / path).exists(), path
    commands = get_commands()
    for name in re.findall(r"manage\.py (\w+)", guide):
        assert name in commands, f"docs/deploy.md names manage.py {name}"
    for name in set(re.findall(r"`(CONDUIT_[A-Z_]+)", guide)):
        assert_setting(name)


def test_caddy_drops_a_client_that_sends_its_headers_a_byte_at_a_time(edge):
    """A client that trickles its request line and headers (a byte every 2 s) is cut off at the
    header timeout (10 s) instead of holding its connection for ever; meanwhile others are
    answered."""
    caddy, _ = edge
    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"x" * 100
    with socket.create_connection(("127.0.0.1", caddy), timeout=30) as slow:
        started = time.monotonic()
        closed = None
        for byte in head:
            if time.monotonic() - started > 20:
                break
            try:
                slow.sendall(bytes([byte]))
            except OSError:
                closed = time.monotonic() - started
                break
            assert status_of(raw_request(caddy, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1")) == 200
            slow.settimeout(2)
            try:
                if slow.recv(1024) == b"":
                    closed = time.monotonic() - started
                    break
            except TimeoutError:
                pass
            except OSError:  # reset: Caddy closed with bytes of ours unread
                closed = time.monotonic() - started
                break
    assert closed is not None and 9 <= closed <= 16, closed
