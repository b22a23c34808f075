"""``manage.py causal``: the causal limits from the command line.

- ``causal prune --older-than DAYS [--dry-run]``: retention (R57), see ``causal.retention``;
- ``causal root SEQ``: a root's limits in force, its tokens this minute and its refusals.
"""

from __future__ import annotations

from argparse import ArgumentTypeError
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from causal.clock import system_clock
from causal.limits import pin_key
from causal.models import CausalDiagnostic, Event
from causal.retention import MIN_RETENTION, retention_prune
from causal.selectors import root_limits_status

DEFAULT_RETENTION_DAYS = 30
ROOT_RECENT_REFUSALS = 10


def positive_days(value: str) -> int:
    """An argparse type: a whole number of days, at least the minimum retention."""
    try:
        days = int(value)
    except ValueError:
        raise ArgumentTypeError(f"expected a whole number of days, got {value!r}") from None
    if days < MIN_RETENTION.days:
        raise ArgumentTypeError(f"must be at least {MIN_RETENTION.days} day, got {days}")
    return days


class Command(BaseCommand):
    help = "Inspect and maintain the causal limits: prune expired buckets and old diagnostics, show a root."

    def add_arguments(self, parser: CommandParser) -> None:
        subparsers = parser.add_subparsers(
            dest="subcommand", metavar="SUBCOMMAND", required=True, help="What to do."
        )
        prune = subparsers.add_parser(
            "prune",
            help="Delete expired token buckets and causal diagnostics older than --older-than days. "
            "Events (ancestry, deduplication evidence) and pinned limits are always kept.",
            description="Delete expired token buckets and causal diagnostics older than --older-than "
            "days. Events (ancestry, deduplication evidence) and pinned limits are always kept.",
        )
        prune.add_argument(
            "--older-than",
            type=positive_days,
            default=DEFAULT_RETENTION_DAYS,
            metavar="DAYS",
            help=f"Retention period in whole days, at least {MIN_RETENTION.days} (default {DEFAULT_RETENTION_DAYS}).",
        )
        prune.add_argument(
            "--dry-run", action="store_true", help="Only count what would be deleted; delete nothing."
        )
        root = subparsers.add_parser(
            "root",
            help="Show a root's limits in force, tokens used this UTC minute and recent refusals.",
            description="Show a root's limits in force, tokens used this UTC minute and recent refusals.",
        )
        root.add_argument("seq", type=int, metavar="SEQ", help="The seq of the root Event.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["subcommand"] == "prune":
            self.prune(days=options["older_than"], dry_run=options["dry_run"])
        else:
            self.root(seq=options["seq"])

    def prune(self, *, days: int, dry_run: bool) -> None:
        try:
            report = retention_prune(older_than=timedelta(days=days), clock=system_clock, dry_run=dry_run)
        except ValueError as error:
            raise CommandError(f"--older-than: {error}") from error
        verb = "would delete" if report.dry_run else "deleted"
        self.stdout.write(
            f"{verb} {report.buckets} token bucket(s) and {report.diagnostics} diagnostic(s) "
            f"older than {report.cutoff:%Y-%m-%dT%H:%M:%S}Z; kept Events and pinned limits"
        )

    def root(self, *, seq: int) -> None:
        event = Event.objects.filter(seq=seq).only("seq", "root_id", "type").first()
        if event is None:
            raise CommandError(f"SEQ: no Event with seq {seq}")
        if event.root_id is not None:
            raise CommandError(f"SEQ: Event #{seq} is not a root; its root is #{event.root_id}")
        status = root_limits_status(seq, now=system_clock())
        descendants = Event.objects.filter(root_id=seq).count()
        lines = [f"root #{seq} {event.type}", f"descendants: {descendants}"]
        if status.pin is not None:
            lines.append(
                f"limits (pinned {status.pin.pinned_at:%Y-%m-%dT%H:%M:%S}Z, key {pin_key(seq)}): "
                f"depth {status.limits.max_depth}, {status.limits.rate_per_minute} per minute"
            )
        else:
            lines.append(
                f"limits (not pinned yet; the first derived Event pins the configured ones): "
                f"depth {status.limits.max_depth}, {status.limits.rate_per_minute} per minute"
            )
        lines.append(
            f"tokens used in {status.minute:%Y-%m-%dT%H:%M}Z: {status.used} of {status.limits.rate_per_minute}"
        )
        refusals = list(CausalDiagnostic.objects.filter(root_seq=seq)[:ROOT_RECENT_REFUSALS])
        # A record counts a root's refusals of one kind in one minute.
        lines.append(f"recent refusals: {sum(d.occurrences for d in refusals) or 'none'}")
        lines.extend(
            f"  {d.at:%Y-%m-%dT%H:%M:%S}Z {d.kind}{f' ×{d.occurrences}' if d.occurrences != 1 else ''}: {d.detail}"
            for d in refusals
        )
        self.stdout.write("\n".join(lines))
