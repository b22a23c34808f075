"""``manage.py causal``: the causal limits from the command line.

- ``causal prune --older-than DAYS [--dry-run]``: retention (R57), see ``causal.retention``;
- ``causal root SEQ``: a root's limits in force, its tokens this minute and its refusals.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from causal.clock import system_clock
from causal.limits import pin_key
from causal.models import CausalDiagnostic, Event
from causal.retention import MIN_RETENTION, retention_prune
from causal.selectors import root_limits_status
from infra.cli import Subcommand, add_subcommands, domain_errors, run_subcommand, whole_days

DEFAULT_RETENTION_DAYS = 30
ROOT_RECENT_REFUSALS = 10


# An argparse type: a whole number of days, at least the minimum retention.
positive_days = whole_days(MIN_RETENTION.days)


PRUNE_HELP = (
    "Delete expired token buckets and causal diagnostics older than --older-than days. "
    "Events (ancestry, deduplication evidence) and pinned limits are always kept."
)
ROOT_HELP = "Show a root's limits in force, tokens used this UTC minute and recent refusals."


def prune_arguments(parser: CommandParser) -> None:
    """Arguments of ``causal prune``."""
    parser.add_argument(
        "--older-than",
        type=positive_days,
        default=DEFAULT_RETENTION_DAYS,
        metavar="DAYS",
        help=f"Retention period in whole days, at least {MIN_RETENTION.days} (default {DEFAULT_RETENTION_DAYS}).",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="Only count what would be deleted; delete nothing."
    )


def root_arguments(parser: CommandParser) -> None:
    """Arguments of ``causal root``."""
    parser.add_argument("seq", type=int, metavar="SEQ", help="The seq of the root Event.")


class Command(BaseCommand):
    help = "Inspect and maintain the causal limits: prune expired buckets and old diagnostics, show a root."

    def add_arguments(self, parser: CommandParser) -> None:
        add_subcommands(parser, SUBCOMMANDS, help="What to do.")

    def handle(self, *args: Any, **options: Any) -> None:
        run_subcommand(self, SUBCOMMANDS, options)

    def prune(self, *, days: int, dry_run: bool) -> None:
        with domain_errors(ValueError, prefix="--older-than: "):
            report = retention_prune(older_than=timedelta(days=days), clock=system_clock, dry_run=dry_run)
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


SUBCOMMANDS: dict[str, Subcommand] = {
    "prune": Subcommand(
        PRUNE_HELP,
        prune_arguments,
        lambda command, options: command.prune(days=options["older_than"], dry_run=options["dry_run"]),
    ),
    "root": Subcommand(ROOT_HELP, root_arguments, lambda command, options: command.root(seq=options["seq"])),
}
