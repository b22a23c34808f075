"""``manage.py restore PATH``: put an SQLite backup back (``conduit_site.backup``)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from causal.clock import system_clock
from conduit_site.backup import BackupError, database_restore, is_sqlite
from infra.cli import domain_errors
from infra.words import counted


class Command(BaseCommand):
    help = (
        "Replace the SQLite database's content with a backup made by `manage.py backup`, in one "
        "transaction. Refused while serve or a loop runs (a heartbeat in the last minute), for a "
        "live file of the database (under any name), and for a file that fails integrity_check or "
        "is not a Conduit database. PostgreSQL: use pg_restore."
    )

    def add_arguments(self, parser):
        parser.add_argument("path", help="The backup to restore.")

    def handle(self, *args, **options):
        if not is_sqlite():
            raise CommandError("restore is for SQLite; restore PostgreSQL with pg_restore")
        with domain_errors(BackupError):
            result = database_restore(path=options["path"], clock=system_clock)
        self.stdout.write(
            f"restored {counted(result.events, 'Events')} from {options['path']} into {result.path}"
        )
