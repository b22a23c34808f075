"""``manage.py prune``: site-wide retention (``conduit_site.retention``)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from causal.clock import system_clock
from conduit_site.retention import site_prune
from infra.cli import domain_errors


class Command(BaseCommand):
    help = (
        "Delete what the retention period (CONDUIT_RETENTION_DAYS, default 30; 0 keeps everything) "
        "has passed: completed or cancelled Work ended before it, with its attempts, input, "
        "intents, waits, timers, keys and route records, then routed Events accepted before it "
        "that nothing kept refers to. Never an unrouted Event, a dead letter (failed or skipped), "
        "the input or trigger of live Work, or an ancestor of a kept Event. Runs in batches; the "
        "work loop runs it once an hour. --dry-run counts without deleting."
    )

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="Count what would go; delete nothing.")
        parser.add_argument(
            "--days",
            type=int,
            default=None,
            help="Retention period in days for this run (default CONDUIT_RETENTION_DAYS; 0: keep everything).",
        )

    def handle(self, *args, **options):
        if options["days"] is not None and options["days"] < 0:
            raise CommandError("--days cannot be negative")
        if options["days"] == 0:
            # The period given here, not the environment's, keeps everything.
            self.stdout.write("--days 0 keeps everything: nothing pruned")
            return
        with domain_errors(ValueError):
            counts = site_prune(clock=system_clock, days=options["days"], dry_run=options["dry_run"])
        self.stdout.write(counts.line())
