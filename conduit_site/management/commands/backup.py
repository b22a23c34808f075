"""``manage.py backup PATH``: a consistent copy of the database (``conduit_site.backup``)."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from conduit_site.backup import (
    BackupError,
    backup_target_check,
    database_backup,
    is_sqlite,
    pg_dump_command,
)
from infra.cli import domain_errors
from infra.words import counted


class Command(BaseCommand):
    help = (
        "Back the database up to PATH while Conduit runs. SQLite: a consistent copy through the "
        "online backup API, mode 0600, checked with integrity_check (never copy the file itself "
        "while it is in use). PostgreSQL: prints the pg_dump command line to run, writes nothing. "
        "Refused, nothing written, for a live file of the database (its -wal, -shm or -journal "
        "too) and for anything inside CONDUIT_VAR_DIR: keep backups in a folder of their own."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "path",
            help="Where to write the backup (replaced if it exists), outside CONDUIT_VAR_DIR.",
        )

    def handle(self, *args, **options):
        if not is_sqlite():
            with domain_errors(BackupError):
                backup_target_check(options["path"])
            self.stdout.write("PostgreSQL is backed up with pg_dump; run:")
            self.stdout.write(pg_dump_command(options["path"]))
            return
        with domain_errors(BackupError):
            result = database_backup(path=options["path"])
        self.stdout.write(
            f"backed up {counted(result.events, 'Events')} to {result.path} ({result.bytes} bytes)"
        )
