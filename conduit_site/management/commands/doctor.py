"""``manage.py doctor``: the health checks (R23), exiting non-zero when one warns."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from causal.clock import system_clock
from conduit_site.doctor import doctor


class Command(BaseCommand):
    help = (
        "Check Conduit's health: Events still unrouted ten minutes after acceptance (with their failure "
        "counts, last error code, next retry and what they wait behind), a route loop without a "
        "heartbeat in the last 60 seconds while Events are unrouted, abandoned handler calls, roots "
        "refused by the causal limits in the last hour, a work loop without a heartbeat in the last 60 "
        "seconds while Work is ready to run, and parked Work. Exits with status 1 when any check warns."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--json",
            action="store_true",
            help='Print the report as JSON ({"ok": …, "at": …, "checks": [...]}, as GET /api/doctor '
            "answers) on standard output.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        report = doctor(clock=system_clock)
        if options["json"]:
            self.stdout.write(json.dumps(report.as_dict(), ensure_ascii=False))
        else:
            for check in report.checks:
                self.stdout.write(f"[{check.status}] {check.name}: {check.summary}")
                for item in check.items:
                    self.stdout.write(f"    {item.text}")
                if check.total > len(check.items):
                    self.stdout.write(f"    … {check.total - len(check.items)} more")
        if not report.ok:
            names = ", ".join(check.name for check in report.warnings)
            raise CommandError(f"doctor: {len(report.warnings)} check(s) warn: {names}", returncode=1)
