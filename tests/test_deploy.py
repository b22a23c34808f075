"""The deployment guide's files (docs/deploy.md): the compose file, the systemd
units, the Dockerfile and the proxy's configuration run commands that exist, with arguments their
parsers take, and set only settings Conduit reads."""

from __future__ import annotations

import configparser
import http.server
import ipaddress
import json
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

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
    return [word for line in lines if line.startswith("reverse_proxy") for word in line.split()[1:]]


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


def test_caddy_sends_the_client_address_conduit_reads_and_keeps_metrics_inside(tmp_path):
    """deploy/Caddyfile run by Caddy, its listener and upstream moved to loopback ports: a client
    (at 127.0.0.2) that forges X-Forwarded-For is still seen at its own address by
    ``client_ip`` with Caddy's address trusted, and /metrics is answered 404 by Caddy."""
    caddy = shutil.which("caddy")
    assert caddy, "caddy is missing: install Debian's caddy package (.ci/run does)"
    environment = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path)}
    adapted = subprocess.run(
        [caddy, "adapt", "--config", str(DEPLOY / "Caddyfile"), "--adapter", "caddyfile"],
        capture_output=True,
        text=True,
        env=environment,
        check=True,
        timeout=60,
    )
    config = json.loads(adapted.stdout)
    [server] = config["apps"]["http"]["servers"].values()
    assert server["listen"] == [":443"]
    listen, upstream = free_port(), http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    server["listen"] = [f"127.0.0.1:{listen}"]
    server["automatic_https"] = {"disable": True}
    text = json.dumps(config)
    assert text.count('"dial": "web:8000"') == 1
    text = text.replace('"dial": "web:8000"', f'"dial": "127.0.0.1:{upstream.server_port}"')
    text = text.replace('"host": ["localhost"]', '"host": ["127.0.0.1"]')
    config = json.loads(text)
    config["admin"] = {"disabled": True}
    (tmp_path / "caddy.json").write_text(json.dumps(config))
    process = subprocess.Popen(
        [caddy, "run", "--config", str(tmp_path / "caddy.json")],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        for _ in range(100):
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", listen)) == 0:
                    break
            if process.poll() is not None:
                pytest.fail(f"Caddy stopped: {process.stderr.read().decode()[-2000:]}")
            threading.Event().wait(0.1)
        else:
            pytest.fail("Caddy did not listen")

        def get(path: str) -> int:
            with socket.create_connection(
                ("127.0.0.1", listen), timeout=10, source_address=("127.0.0.2", 0)
            ) as c:
                c.sendall(
                    f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Forwarded-For: 203.0.113.66\r\n"
                    "Connection: close\r\n\r\n".encode()
                )
                return int(c.makefile("rb").readline().split()[1])

        assert get("/metrics") == 404
        assert _Recorder.seen == []
        assert get("/login/") == 200
    finally:
        process.terminate()
        process.wait(timeout=10)
        upstream.shutdown()
    [headers] = _Recorder.seen
    forwarded = headers["X-Forwarded-For"]
    assert headers["X-Forwarded-Proto"] == "http"  # https behind its TLS
    request = RequestFactory().get("/", REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR=forwarded)
    with override_settings(CONDUIT_TRUSTED_PROXIES=env_file()["CONDUIT_TRUSTED_PROXIES"].split(",")):
        assert client_ip(request) == "127.0.0.2", forwarded


def test_the_systemd_web_listens_where_the_local_proxy_is_trusted():
    environment = env_file()
    web = unit("conduit-web.service")["Service"]["ExecStart"][0]
    argv = shlex.split(web)
    host = argv[argv.index("--host") + 1]
    assert host == "127.0.0.1"
    trusted = environment["CONDUIT_TRUSTED_PROXIES"].split(",")
    assert "127.0.0.1" in trusted


def env_file() -> dict[str, str]:
    out = {}
    for line in (DEPLOY / "conduit.env").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, value = line.partition("=")
            out[name] = value
    return out


def test_the_environment_file_sets_only_conduit_s_settings():
    environment = env_file()
    assert environment["CONDUIT_ENV"] == "production"
    for name in environment:
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
        assert service["Service"]["EnvironmentFile"] == ["/etc/conduit/conduit.env"], name
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
