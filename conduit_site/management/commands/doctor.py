"""``manage.py doctor``: the health checks (R23). Its exit status is for scripts and monitors:
0 every check passed, 1 a check warns, 2 doctor could not run (the database unreachable or not
migrated, a bad argument)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import Error as DatabaseError

from causal.clock import system_clock
from conduit_site.doctor import doctor
from infra.cli import json_argument, print_json

# The exit statuses (docs/operations.md).
ALL_PASSED = 0
A_CHECK_WARNS = 1
CANNOT_RUN = 2


class Command(BaseCommand):
    help = (
        "Check Conduit's health: Events still unrouted ten minutes after acceptance (with their failure "
        "counts, last error code, next retry and what they wait behind), a route loop without a "
        "heartbeat in the last 60 seconds while Events are unrouted, abandoned handler calls, roots "
        "refused by the causal limits in the last hour, a work loop without a heartbeat in the last 60 "
        "seconds while Work is ready to run, and parked Work. Exit status: 0 when every check passes, "
        "1 when a check warns, 2 when doctor cannot run (the database cannot be read, a bad argument)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        json_argument(
            parser,
            'Print the report as JSON ({"ok": …, "at": …, "checks": [...]}, as GET /api/doctor '
            "answers) on standard output.",
        )
        parser.add_argument(
            "--exit-code",
            action="store_true",
            help="Accepted and ignored, for scripts that name the exit status they rely on: doctor exits 0 "
            "(every check passed), 1 (a check warns) or 2 (it cannot run) with or without it.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = doctor(clock=system_clock)
        except DatabaseError as error:
            # The error's first line names what failed (no such table, connection refused).
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise CommandError(
                f"doctor: cannot read the database ({reason}); is DATABASE_URL right and "
                "'manage.py migrate' run?",
                returncode=CANNOT_RUN,
            ) from error
        if options["json"]:
            print_json(self, report.as_dict())
        else:
            for check in report.checks:
                self.stdout.write(f"[{check.status}] {check.name}: {check.summary}")
                for item in check.items:
                    self.stdout.write(f"    {item.text}")
                if check.total > len(check.items):
                    self.stdout.write(f"    … {check.total - len(check.items)} more")
        if not report.ok:
            names = ", ".join(check.name for check in report.warnings)
            raise CommandError(
                f"doctor: {len(report.warnings)} check(s) warn: {names}", returncode=A_CHECK_WARNS
            )
