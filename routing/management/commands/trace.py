"""``manage.py trace``: what routing would do with an Event, without writing anything."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from causal.clock import system_clock
from infra.cli import json_argument, print_json
from routing.acceptance.envelopes import EnvelopeInvalid, loads
from routing.config.problems import GenerationNotFound
from routing.setup.trace import TraceRefused, TraceResult, route_filter, samples, trace


class Command(BaseCommand):
    help = (
        "Trace a hypothetical Event (a structured-mode CloudEvent JSON with 'scope') against the "
        "live configuration, an applied generation or a candidate: each route's verdict and the "
        "effect routing would record. Writes nothing. With --samples SCOPE, list the sample Events "
        "the scope's handlers offer instead."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "file",
            nargs="?",
            metavar="FILE",
            help="A file holding the Event as a JSON object; '-' reads standard input.",
        )
        parser.add_argument(
            "--generation",
            metavar="REF",
            default=None,
            help="Trace against generation REF ('3') or a candidate ('candidate:12'); default: the live one.",
        )
        parser.add_argument(
            "--operator",
            action="store_true",
            help="Trace an operator Event (source core.manual naming its Work).",
        )
        parser.add_argument(
            "--filter",
            metavar="ROUTES",
            action="append",
            help="Ask only these routes (slots of the Event's scope, comma-separated; may be repeated).",
        )
        parser.add_argument(
            "--samples", metavar="SCOPE", help="List the sample Events the scope's routes offer."
        )
        json_argument(parser, "Print the result as JSON.")

    def handle(self, *args, **options):
        try:
            if options["samples"]:
                self._samples(options)
                return
            if not options["file"]:
                raise CommandError("give FILE (or '-' for standard input), or --samples SCOPE")
            payload = self._read(options["file"])
            result = trace(
                payload=payload,
                clock=system_clock,
                generation=options["generation"],
                operator=options["operator"],
                filter=(route_filter(",".join(options["filter"])) or ())
                if options["filter"] is not None
                else None,
            )
        except TraceRefused as exc:
            raise CommandError(f"refused: {exc.field or 'event'}: {exc.message}") from exc
        except GenerationNotFound as exc:
            raise CommandError(str(exc)) from exc
        if options["json"]:
            print_json(self, result.as_dict(), indent=2, ensure_ascii=True)
        else:
            self.stdout.write(render(result))

    def _read(self, name: str):
        try:
            text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"cannot read {name}: {exc.strerror}") from exc
        try:
            return loads(text)
        except EnvelopeInvalid as exc:
            raise CommandError(f"{name}: {exc.message}") from exc
        except json.JSONDecodeError as exc:
            raise CommandError(
                f"{name}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
            ) from exc
        except ValueError as exc:
            raise CommandError(f"{name}: invalid JSON: {exc}") from exc

    def _samples(self, options) -> None:
        found = samples(scope=options["samples"], clock=system_clock, generation=options["generation"])
        if options["json"]:
            print_json(
                self,
                [{"route": r, "name": s.name, "event": s.event, "note": s.note} for r, s in found],
                indent=2,
                ensure_ascii=True,
            )
            return
        if not found:
            self.stdout.write("no samples: no route of this scope offers any")
        for route, sample in found:
            # A sample named after its route is named once ("pr", not "pr: pr"), as the Trace page does.
            named = route if sample.name == route else f"{route}: {sample.name}"
            self.stdout.write(f"{named}\n  {json.dumps(sample.event)}")
            if sample.note:
                self.stdout.write(f"  note: {sample.note}")


def render(result: TraceResult) -> str:
    """A trace as an operator reads it: the effect first, then every route's verdict."""
    target = (
        f" on Work {result.work_id}"
        if result.work_id
        else (" (new Work)" if result.effect == "start" else "")
    )
    via = f" via {result.route}" if result.route else ""
    binding = f"/{result.binding}" if result.binding else ""
    lines = [
        f"generation {result.generation}, scope {result.scope}",
        f"effect: {result.effect}{target}{via}{binding}" + (f" ({result.reason})" if result.reason else ""),
    ]
    if result.keys:
        lines.append("keys: " + ", ".join(result.keys))
    lines.append("routes:" if result.filter is None else "routes (filtered): " + ", ".join(result.filter))
    for verdict in result.verdicts:
        reason = f": {verdict.reason}" if verdict.reason else ""
        lines.append(f"  {verdict.verdict:<12} {verdict.route} [{verdict.scope}]{reason}")
    if not result.verdicts:
        lines.append("  (none)")
    if result.error:
        lines.append("error: " + result.error.splitlines()[0])
    lines.extend(f"note: {note}" for note in result.notes)
    return "\n".join(lines)
