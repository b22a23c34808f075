"""``manage.py schedules``: the live configuration's schedules with their next and last fire
times, and ``--fire SCOPE NAME`` to fire one now (``routing.schedules``, ``controls.pauses``)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from causal.clock import system_clock
from controls.pauses import PauseRefused, schedule_fire
from infra.cli import as_user_argument, cli_actor
from infra.times import timestamp
from routing.config.selectors import live_generation, load_configuration
from routing.schedules import schedule_rows


class Command(BaseCommand):
    help = (
        "List the live configuration's schedules (when each fires next, when it last fired and "
        "how, whether it is paused), or fire one now with --fire SCOPE NAME."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--fire",
            nargs=2,
            metavar=("SCOPE", "NAME"),
            default=None,
            help="Fire this schedule now and exit.",
        )
        as_user_argument(parser)

    def handle(self, *args, **options) -> None:
        if options["fire"]:
            scope, name = options["fire"]
            try:
                event = schedule_fire(
                    scope=scope, name=name, user=cli_actor(options["as_user"]), clock=system_clock
                )
            except PauseRefused as exc:
                raise CommandError(str(exc)) from None
            self.stdout.write(f"fired {scope}:{name} now: Event #{event.seq}")
            return
        generation = live_generation()
        if generation is None:
            raise CommandError("no configuration has been applied")
        rows = schedule_rows(load_configuration(generation), now=system_clock())
        for row in rows:
            paused = f"  PAUSED {row.paused}" if row.paused else ""
            last = timestamp(row.last_fire) if row.last_fire else "never"
            last += f" ({row.last_outcome})" if row.last_outcome else ""
            self.stdout.write(
                f"{row.spec.scope}:{row.spec.name}  {row.spec.when}  next {timestamp(row.next_fire)}  "
                f"last {last}{paused}"
            )
        if not rows:
            self.stdout.write("no schedules in the live configuration")
