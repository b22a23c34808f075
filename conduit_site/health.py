"""Readiness: whether Conduit as a whole can do its work now (``GET /readyz``).

Each check is a plain function returning a :class:`ReadyCheck`; :func:`readiness` runs them
in order. What a check says is safe to show anyone who can reach the endpoint: a name, ``ok``
and a short reason, never a host name, a process id, a path, SQL or a database's error text.

- ``database``: a connection answers ``SELECT 1``;
- ``migrations``: every migration of this code is applied;
- ``configuration``: a configuration has been applied (the router has routes to use);
- ``route_loop``, ``work_loop``: a loop of each kind has a heartbeat newer than doctor's
  limit (:data:`conduit_site.doctor.HEARTBEAT_STALE`, read as the console's banner reads
  them: :func:`conduit_site.doctor.loops_alive`).

When the database does not answer, the checks that read it are not run and say so.
Liveness (``GET /healthz``) checks none of this: it answers whenever the process does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import DEFAULT_DB_ALIAS, connections
from django.db import Error as DatabaseError
from django.db.migrations.executor import MigrationExecutor

from conduit_site.doctor import HEARTBEAT_STALE, duration, loops_alive
from routing.config.selectors import live_generation_id

CHECKS = ("database", "migrations", "configuration", "route_loop", "work_loop")


@dataclass(frozen=True, slots=True)
class ReadyCheck:
    name: str
    ok: bool
    detail: str

    def as_dict(self) -> dict:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


def check_database() -> ReadyCheck:
    """The database answers a query."""
    try:
        with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError:
        return ReadyCheck("database", False, "the database does not answer")
    return ReadyCheck("database", True, "the database answers")


def check_migrations() -> ReadyCheck:
    """Every migration this code has is applied."""
    executor = MigrationExecutor(connections[DEFAULT_DB_ALIAS])
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if plan:
        return ReadyCheck(
            "migrations", False, f"{len(plan)} migration{'s are' if len(plan) != 1 else ' is'} not applied"
        )
    return ReadyCheck("migrations", True, "every migration is applied")


def check_configuration() -> ReadyCheck:
    """A configuration is live."""
    if live_generation_id() is None:
        return ReadyCheck("configuration", False, "no configuration has been applied")
    return ReadyCheck("configuration", True, "a configuration is live")


def check_loops(*, now: datetime) -> list[ReadyCheck]:
    """A route loop and a work loop each have a fresh heartbeat (one query)."""
    alive = loops_alive(now=now)
    limit = duration(HEARTBEAT_STALE.total_seconds())
    return [
        ReadyCheck(
            name,
            ok,
            f"a {kind} has a heartbeat newer than {limit}"
            if ok
            else f"no {kind} has a heartbeat newer than {limit}",
        )
        for name, kind, ok in (
            ("route_loop", "route loop", alive.route_loop),
            ("work_loop", "work loop", alive.work_loop),
        )
    ]


def readiness(*, now: datetime, exclude: frozenset[str] = frozenset()) -> list[ReadyCheck]:
    """Every check but those named in ``exclude`` (a deployment without a work loop leaves
    ``work_loop`` out), in :data:`CHECKS` order."""
    database = check_database()
    if not database.ok:
        checks = [database] + [
            ReadyCheck(name, False, "not checked: the database does not answer") for name in CHECKS[1:]
        ]
    else:
        checks = [database]
        for names, check in (
            (("migrations",), lambda: [check_migrations()]),
            (("configuration",), lambda: [check_configuration()]),
            (("route_loop", "work_loop"), lambda: check_loops(now=now)),
        ):
            if all(name in exclude for name in names):
                continue
            try:
                checks.extend(check())
            except DatabaseError:
                # Its tables are missing (never migrated), or the database went away meanwhile.
                checks.extend(ReadyCheck(name, False, "the database cannot be read") for name in names)
    return [check for check in checks if check.name not in exclude]
