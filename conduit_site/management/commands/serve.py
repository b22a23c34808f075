"""``manage.py serve``: the console (daphne), the router loop (``route_loop``) and the Work
engine (``work_loop``) together."""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
from collections.abc import Mapping

from django.conf import settings
from django.core.management import get_commands
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.db.migrations.executor import MigrationExecutor

from causal.clock import system_clock
from conduit_site.supervision.restarts import restart_record
from conduit_site.supervision.supervisor import START_ATTEMPTS, STARTUP_SECONDS, Child, Supervisor
from infra import metrics
from worklife.executors.isolation import make_undumpable

ASGI_APPLICATION = "conduit_site.asgi:application"
# daphne's command line with request bodies bounded before they are read (conduit_site/edge.py).
WEB_SERVER = ("-m", "conduit_site.edge")


def url_for(host: str, port: int) -> str:
    """The console URL for a bind address (IPv6 literals in brackets)."""
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port}/"


def probe_host(host: str) -> str:
    """Where to connect to check that a server bound to ``host`` is listening."""
    host = host.strip("[]")
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def ensure_can_listen(host: str, port: int) -> None:
    """Raise :class:`CommandError` unless ``host:port`` can be listened on right now.

    Daphne would log the failure and exit, but the readiness probe could meanwhile reach
    whatever already listens there and announce the wrong server.
    """
    address = host.strip("[]")
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError as error:
            raise CommandError(
                f"--host/--port: cannot listen on {host}:{port}: {error.strerror or error}"
            ) from error


def listening_sockets(host: str, port: int, count: int) -> list[socket.socket]:
    """``count`` TCP sockets listening on ``host:port``, one for each daphne process
    (``SO_REUSEPORT``): the kernel spreads new connections over them. On one shared socket the
    process that happened to be waiting in ``accept`` took most keep-alive connections, and
    the other idled while it was saturated."""
    listeners: list[socket.socket] = []
    try:
        for _ in range(count):
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listeners.append(listener)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            listener.bind((host, port))
            listener.listen(1024)
            listener.set_inheritable(True)
    except OSError as error:
        for listener in listeners:
            listener.close()
        raise CommandError(
            f"--host/--port: cannot listen on {host}:{port}: {error.strerror or error}"
        ) from error
    return listeners


def fd_endpoint(listener: socket.socket) -> str:
    """The twisted endpoint string with which daphne serves on an inherited listening socket
    (its ``fd`` endpoint adopts IPv4 sockets only)."""
    return f"fd:fileno={listener.fileno()}"


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (or ``localhost``): only this machine can connect."""
    address = host.strip("[]")
    if address.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def debug_for_host(host: str, environ: Mapping[str, str]) -> tuple[dict[str, str], str | None]:
    """What the children's environment needs so that ``DEBUG`` is never on by default where other
    machines can connect, and the warning to print: ``(updates, warning)``.

    On a loopback address nothing changes. Elsewhere, an unset ``DEBUG`` becomes ``false``; an
    explicit ``DEBUG=true`` is kept (the operator asked for it) with a warning.
    """
    if is_loopback(host):
        return {}, None
    value = environ.get("DEBUG")
    if value is None:
        return {"DEBUG": "false"}, None
    if value.strip().lower() in {"1", "true", "yes", "on"}:
        return {}, (
            f"DEBUG is on (DEBUG={value}) while serving on {host}, which other machines can reach: "
            "error pages show settings and source. Unset DEBUG unless this is what you want."
        )
    return {}, None


# The most web server processes serve starts without --workers.
MAX_DEFAULT_WORKERS = 4


def default_workers(host: str) -> int:
    """One web server process per CPU this process may run on (at most
    ``MAX_DEFAULT_WORKERS``): one Python process serves requests on one core at a time.
    One on an IPv6 host, where daphne cannot adopt the sockets several processes need."""
    if ":" in host:
        return 1
    return max(1, min(MAX_DEFAULT_WORKERS, os.process_cpu_count() or 1))


class Command(BaseCommand):
    help = (
        "Serve the console (daphne, HTTP and websockets), run the router loop (manage.py "
        "route_loop) and the Work engine (manage.py work_loop) as child processes. Prints the "
        "console URL once it answers and restarts a child that exits (after 1 s, doubling to "
        f"30 s). Stops on SIGINT/SIGTERM (forwarded to the children; a second one kills them), or "
        f"when a child cannot start: it exits with a status within {STARTUP_SECONDS:g} s of each "
        f"of its first {START_ATTEMPTS} starts."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--host",
            default="127.0.0.1",
            help="Address the console binds to (default 127.0.0.1). On an address other machines "
            "can reach, DEBUG is off unless DEBUG is set explicitly.",
        )
        parser.add_argument(
            "--port", type=int, default=8000, help="Port the console listens on (default 8000)."
        )
        parser.add_argument(
            "--no-router",
            action="store_true",
            help="Serve only the console; do not start manage.py route_loop (nor work_loop).",
        )
        parser.add_argument(
            "--no-work",
            action="store_true",
            help="Do not start manage.py work_loop: Work is routed but nothing runs it.",
        )
        parser.add_argument(
            "--slots",
            type=int,
            default=8,
            help="Attempts the work_loop runs at once (manage.py work_loop --slots). Default 8.",
        )
        parser.add_argument(
            "--workers",
            type=int,
            default=None,
            help="Web server processes (daphne), each on its own listening socket of the port; "
            "each runs the console and the API, so requests are served in parallel. Default: one "
            f"per CPU this process may use, at most {MAX_DEFAULT_WORKERS} (one on an IPv6 --host).",
        )
        parser.add_argument(
            "--stop-timeout",
            type=float,
            default=10.0,
            help="Seconds to wait for the children to stop after a signal before killing them (default 10).",
        )

    def handle(self, *args, **options) -> None:
        # Its environment holds the server's secrets: a Work's process of the same user (a work
        # loop not run as root) may not read it (worklife/executors/isolation.py).
        make_undumpable()
        host: str = options["host"].strip()
        port: int = options["port"]
        if not host:
            raise CommandError("--host: must not be empty")
        if not 1 <= port <= 65535:
            raise CommandError(f"--port: must be between 1 and 65535, got {port}")
        if options["slots"] < 1:
            raise CommandError(f"--slots: must be at least 1, got {options['slots']}")
        if options["workers"] is None:
            options["workers"] = default_workers(host)
        if options["workers"] < 1:
            raise CommandError(f"--workers: must be at least 1, got {options['workers']}")
        if options["workers"] > 1 and ":" in host:
            raise CommandError(
                "--workers: several web server processes need an IPv4 --host (daphne adopts IPv4 sockets only)"
            )
        if options["stop_timeout"] <= 0:
            raise CommandError(f"--stop-timeout: must be positive, got {options['stop_timeout']}")
        with_router = not options["no_router"]
        if with_router and "route_loop" not in get_commands():
            raise CommandError(
                "the router cannot start: this checkout has no 'route_loop' management command. "
                "Serve the console alone with --no-router."
            )
        ensure_can_listen(host, port)
        self._warn_unapplied_migrations()
        debug_env, debug_warning = debug_for_host(host, os.environ)
        if debug_warning:
            self.stderr.write(debug_warning)
        # With metrics on, the children count into one folder that /metrics adds up.
        debug_env.update(metrics.prepare_children_directory(settings.VAR_DIR))

        listeners: list[socket.socket] = []
        if options["workers"] == 1:
            children = [
                Child(
                    name="daphne",
                    argv=[sys.executable, *WEB_SERVER, "-b", host, "-p", str(port), ASGI_APPLICATION],
                )
            ]
        else:
            listeners = listening_sockets(host, port, options["workers"])
            children = [
                Child(
                    name=f"daphne-{number}",
                    argv=[sys.executable, *WEB_SERVER, "-e", fd_endpoint(listener), ASGI_APPLICATION],
                    pass_fds=(listener.fileno(),),
                )
                for number, listener in enumerate(listeners, start=1)
            ]
        if with_router:
            children.append(
                Child(
                    name="route_loop",
                    argv=[sys.executable, str(settings.BASE_DIR / "manage.py"), "route_loop"],
                )
            )
        with_work = with_router and not options["no_work"]
        if with_work:
            children.append(
                Child(
                    name="work_loop",
                    argv=[
                        sys.executable,
                        str(settings.BASE_DIR / "manage.py"),
                        "work_loop",
                        "--slots",
                        str(options["slots"]),
                        # Running attempts get most of the stop timeout to finish.
                        "--stop-grace",
                        f"{options['stop_timeout'] * 0.6:g}",
                    ],
                )
            )
        try:
            supervisor = Supervisor(
                self,
                children,
                stop_timeout=options["stop_timeout"],
                env=debug_env,
                on_restart=self._record_restart,
            )
            returncode = supervisor.run(url=url_for(host, port), probe=(probe_host(host), port))
        finally:
            for listener in listeners:
                listener.close()
        if returncode:
            raise CommandError("stopped because a child process failed (see above)", returncode=returncode)

    def _record_restart(self, child: Child) -> None:
        """Record a restart for doctor and the console's banner; a database that cannot be
        written now must not stop the supervision."""
        connection = connections[DEFAULT_DB_ALIAS]
        try:
            restart_record(
                child=child.name, status=child.returncode or 0, restarts=child.restarts, clock=system_clock
            )
        except DatabaseError as error:
            self.stderr.write(f"could not record the restart of {child.name}: {error}")
        finally:
            # The supervisor holds no connection between restarts.
            connection.close()

    def _warn_unapplied_migrations(self) -> None:
        connection = connections[DEFAULT_DB_ALIAS]
        try:
            executor = MigrationExecutor(connection)
            plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
        except DatabaseError as error:
            where = f"{connection.vendor} database {connection.settings_dict.get('NAME')!s}"
            raise CommandError(f"cannot read the {where} (DATABASE_URL): {error}") from error
        finally:
            # The children open their own connections; the supervisor holds none.
            connection.close()
        if plan:
            self.stderr.write(
                f"{len(plan)} migration(s) are not applied; run 'manage.py migrate' first "
                "(the console and the router may fail until then)."
            )
