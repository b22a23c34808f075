"""``manage.py pause KIND SCOPE [NAME]``: pause a scope, a binding, a route or a schedule, and
``manage.py pause --list`` the pauses in force (``controls.pauses``).

The CLI is trusted operator access on the host: no permission is checked; ``--as USER`` is
recorded as who paused, else ``cli``. A refused pause exits non-zero with the reason and
stores nothing.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from causal.clock import system_clock
from controls.pauses import (
    KINDS,
    PauseInvalid,
    PauseRefused,
    pause,
    pauses_in_force,
    target_parse,
    until_parse,
)
from infra.cli import as_user_argument, cli_actor
from worklife.pauses import pause_line, target_of


class Command(BaseCommand):
    help = (
        "Pause a scope, a binding, a route or a schedule: routing goes on, its input queues and no "
        "attempt starts (a paused route holds its Events unrouted; a paused schedule skips its fire "
        "times) until `manage.py resume` or --until. --list shows the pauses in force."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "kind", nargs="?", choices=KINDS, help="What to pause: scope, binding, route or schedule."
        )
        parser.add_argument(
            "scope", nargs="?", help="The scope's path (a binding or a route: the scope it is in)."
        )
        parser.add_argument(
            "name", nargs="?", default="", help="The binding's name, the route's slot or the schedule's name."
        )
        parser.add_argument(
            "--reason", default="", help="Why, shown wherever the pause holds something (incident 42)."
        )
        parser.add_argument(
            "--until",
            default=None,
            metavar="WHEN",
            help="End the pause by itself: a duration (30m, 2h, 1d) or an ISO 8601 time (UTC without an offset).",
        )
        parser.add_argument("--list", action="store_true", help="List the pauses in force and exit.")
        as_user_argument(parser)

    def handle(self, *args, **options) -> None:
        if options["list"]:
            pauses = pauses_in_force(system_clock)
            for item in pauses:
                self.stdout.write(f"{target_of(item)}: {pause_line(item)}")
            if not pauses:
                self.stdout.write("nothing is paused")
            return
        if options["kind"] is None or options["scope"] is None:
            raise CommandError("name what to pause: KIND SCOPE [NAME] (or --list)")
        try:
            target = target_parse(options["kind"], options["scope"], options["name"])
            until = until_parse(options["until"], now=system_clock())
            result = pause(
                target=target,
                user=cli_actor(options["as_user"]),
                reason=options["reason"],
                until=until,
                clock=system_clock,
            )
        except (PauseInvalid, PauseRefused) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{target}: {pause_line(result.pause)}")
