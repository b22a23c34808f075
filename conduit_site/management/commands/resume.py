"""``manage.py resume KIND SCOPE [NAME]``: end the pause of a scope, a binding, a route or a
schedule (``controls.pauses``); a route's held Events route at once, in order."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from causal.clock import system_clock
from controls.pauses import KINDS, PauseInvalid, PauseRefused, resume, target_parse
from infra.cli import as_user_argument, cli_actor
from infra.words import counted


class Command(BaseCommand):
    help = (
        "Resume a paused scope, binding, route or schedule: its Work starts attempts again, a "
        "route's held Events route in acceptance order."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("kind", choices=KINDS, help="What to resume: scope, binding, route or schedule.")
        parser.add_argument("scope", help="The scope's path (a binding or a route: the scope it is in).")
        parser.add_argument(
            "name", nargs="?", default="", help="The binding's name, the route's slot or the schedule's name."
        )
        as_user_argument(parser)

    def handle(self, *args, **options) -> None:
        try:
            target = target_parse(options["kind"], options["scope"], options["name"])
            result = resume(target=target, user=cli_actor(options["as_user"]), clock=system_clock)
        except (PauseInvalid, PauseRefused) as exc:
            raise CommandError(str(exc)) from None
        released = f"; {counted(result.released, 'held Events')} released" if result.released else ""
        self.stdout.write(f"{target}: resumed{released}")
