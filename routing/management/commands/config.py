"""``manage.py config validate|apply|candidate|show|diff|preview``: configuration documents from
the shell."""

from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from causal.clock import system_clock
from infra.cli import Subcommand, add_subcommands, domain_errors, json_argument, print_json, run_subcommand
from infra.words import counted
from routing.config.effective import EffectiveScope, effective_scope_as_dict
from routing.config.problems import ConfigInvalid, GenerationNotFound
from routing.config.selectors import find_generation, load_configuration
from routing.config.services import config_apply, config_candidate
from routing.config.validate import CONTROL_POLICIES, parse_document
from routing.engine.ratelimit import is_rate_limited
from routing.setup.candidates import CandidateNotFound, ConfigDiff, candidate_diff, candidate_get
from routing.setup.impact import DEFAULT_EVENTS, MAX_EVENTS, ImpactInvalid, ImpactReport, impact_preview


def validate_arguments(parser: CommandParser) -> None:
    """Arguments of ``config validate``."""
    parser.add_argument("file", metavar="FILE", help="The YAML document, or '-' for standard input.")


def apply_arguments(parser: CommandParser) -> None:
    """Arguments of ``config apply``."""
    parser.add_argument("file", metavar="FILE", help="The YAML document, or '-' for standard input.")
    parser.add_argument(
        "--by", default="", help="Who applies it, recorded on the generation (default: nobody named)."
    )


def candidate_arguments(parser: CommandParser) -> None:
    """Arguments of ``config candidate``."""
    parser.add_argument("file", metavar="FILE", help="The YAML document, or '-' for standard input.")
    parser.add_argument(
        "--by", default="", help="Who stores it, recorded on the candidate (default: nobody named)."
    )


def diff_arguments(parser: CommandParser) -> None:
    """Arguments of ``config diff``."""
    parser.add_argument("candidate", metavar="CANDIDATE", type=int, help="The candidate id.")
    json_argument(parser, "Print JSON instead of text.")


def preview_arguments(parser: CommandParser) -> None:
    """Arguments of ``config preview``."""
    parser.add_argument("candidate", metavar="CANDIDATE", type=int, help="The candidate id.")
    parser.add_argument(
        "--events",
        type=int,
        default=DEFAULT_EVENTS,
        help=f"How many of the latest accepted Events (default {DEFAULT_EVENTS}, at most {MAX_EVENTS}).",
    )
    json_argument(parser, "Print JSON instead of text.")


def show_arguments(parser: CommandParser) -> None:
    """Arguments of ``config show``."""
    parser.add_argument("scope", metavar="SCOPE", help="The scope path, e.g. acme/web.")
    parser.add_argument(
        "--effective",
        action="store_true",
        help="Show the effective configuration: routes resolved root to leaf with override slots "
        "replaced in place, and every binding visible in the scope. Without it, only what "
        "the scope itself declares.",
    )
    json_argument(parser, "Print JSON instead of text.")
    parser.add_argument(
        "--generation",
        metavar="N|candidate:ID",
        default=None,
        help="Which generation to read: an applied generation number or candidate:ID "
        "(default: the live generation).",
    )


class Command(BaseCommand):
    help = (
        "Validate, apply or store configuration documents (YAML), and show a scope's configuration. "
        "FILE may be '-' to read standard input."
    )
    # call_command(..., stdin=io.StringIO(...)) feeds FILE '-' in tests.
    stealth_options = ("stdin",)

    def add_arguments(self, parser: CommandParser) -> None:
        add_subcommands(parser, SUBCOMMANDS, dest="action", metavar="ACTION")

    def handle(self, *args: Any, **options: Any) -> None:
        run_subcommand(self, SUBCOMMANDS, options, dest="action")

    def _candidate(self, options: dict[str, Any]) -> None:
        """``diff`` and ``preview``: a stored candidate against the live generation."""
        with domain_errors(CandidateNotFound, ImpactInvalid):
            candidate = candidate_get(options["candidate"])
            if options["action"] == "diff":
                self._diff(candidate_diff(candidate), as_json=options["json"])
            else:
                report = impact_preview(candidate=candidate, clock=system_clock, events=options["events"])
                self._preview(report, as_json=options["json"])

    def _document(self, options: dict[str, Any]) -> None:
        """``validate``, ``apply`` and ``candidate``: a document read from FILE."""
        action = options["action"]
        text = self._read(options["file"], options.get("stdin"))
        try:
            if action == "validate":
                parsed = parse_document(text)
                bindings = sum(len(s.bindings) for s in parsed.scopes)
                routes = sum(len(s.routes) for s in parsed.scopes)
                receivers = f", {counted(len(parsed.receivers), 'receivers')}" if parsed.receivers else ""
                self.stdout.write(
                    f"{options['file']}: valid: {counted(len(parsed.scopes), 'scopes')}, {counted(bindings, 'bindings')}, {counted(routes, 'routes')}"
                    f"{receivers}"
                )
            elif action == "apply":
                generation = config_apply(document=text, clock=system_clock, created_by=options["by"])
                self.stdout.write(str(generation.number))
            else:
                generation = config_candidate(document=text, clock=system_clock, created_by=options["by"])
                self.stdout.write(str(generation.pk))
        except ConfigInvalid as exc:
            name = "<stdin>" if options["file"] == "-" else options["file"]
            lines = [
                f"{name}:{problem.line}: {problem}" if problem.line else f"{name}: {problem}"
                for problem in exc.problems
            ]
            count = len(exc.problems)
            summary = f"{name} is not valid ({count} problem{'s' if count != 1 else ''}); nothing was stored"
            raise CommandError("\n".join([summary, *lines])) from None
        except ValueError as exc:
            raise CommandError(str(exc)) from None

    def _read(self, file: str, stdin: Any) -> str:
        if file == "-":
            return (stdin or sys.stdin).read()
        try:
            with open(file, encoding="utf-8") as handle:
                return handle.read()
        except OSError as exc:
            raise CommandError(f"cannot read {file}: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise CommandError(
                f"cannot read {file}: not UTF-8 text ({exc.reason} at byte {exc.start})"
            ) from None

    def _show(self, options: dict[str, Any]) -> None:
        try:
            generation = find_generation(options["generation"])
        except GenerationNotFound as exc:
            hint = "; apply one with: manage.py config apply FILE" if options["generation"] is None else ""
            raise CommandError(f"{exc}{hint}") from None
        configuration = load_configuration(generation)
        scope = configuration.scope(options["scope"])
        if scope is None:
            known = ", ".join(sorted(configuration.scopes)) or "none"
            raise CommandError(f"scope {options['scope']!r} is not in {generation} (scopes: {known})")
        if not options["effective"]:
            scope = EffectiveScope(
                path=scope.path,
                routes=tuple(r for r in scope.routes if r.scope == scope.path),
                bindings={n: b for n, b in scope.bindings.items() if b.scope == scope.path},
            )
        if options["json"]:
            payload = {
                "generation": configuration.label,
                "generation_id": configuration.generation_id,
                "effective": bool(options["effective"]),
                **effective_scope_as_dict(scope),
            }
            print_json(self, payload, indent=2, ensure_ascii=True)
            return
        self.stdout.write(self._text(scope, f"{generation}", effective=options["effective"]))

    def _text(self, scope: EffectiveScope, generation: str, *, effective: bool) -> str:
        described = effective_scope_as_dict(scope)
        lines = [f"scope {scope.path} ({generation}, {'effective' if effective else 'declared here'})"]
        lines.append("bindings:")
        if not scope.bindings:
            lines.append("  (none)")
        for name, binding in sorted(scope.bindings.items()):
            executor = f"executor {binding.executor}" if binding.executor else "queue-only"
            controls = ", ".join(binding.controls) or "-"
            capabilities = ", ".join(sorted(binding.capabilities)) or "-"
            origin = "here" if binding.scope == scope.path else f"inherited from {binding.scope}"
            if binding.redefines:
                origin += f", redefines {binding.redefines}"
            lines.append(f"  {name}: {executor}; controls {controls}; capabilities {capabilities} ({origin})")
            settings = json.dumps(described["bindings"][name]["settings"], sort_keys=True)
            if binding.settings:
                lines.append(f"    settings {settings}")
            if binding.flow.describe():
                lines.append(f"    flow control: {'; '.join(binding.flow.describe())}")
            if binding.problem:
                lines.append(f"    problem: {binding.problem}")
        lines.append("routes (first match wins):")
        if not scope.routes:
            lines.append("  (none)")
        for position, route in enumerate(scope.routes, start=1):
            origin = "here" if route.scope == scope.path else f"inherited from {route.scope}"
            if route.overrides:
                origin += f", overrides {route.overrides}"
            target = f" on binding {route.binding}" if route.binding else ""
            fallback = f", fallback {route.fallback}" if route.fallback else ""
            binding = scope.bindings.get(route.binding)
            if route.policy in CONTROL_POLICIES and binding and route.policy not in binding.capabilities:
                fallback += f" (always here: {route.binding} cannot {route.policy})"
            start = "" if route.start else ", starts no Work"
            start += f", priority {route.priority}" if route.priority else ""
            lines.append(
                f"  {position}. {route.slot}: {route.handler} -> {route.policy}{target}{fallback}{start} ({origin})"
            )
            params = json.dumps(described["routes"][position - 1]["params"], sort_keys=True)
            lines.append(f"     params {params}")
        return "\n".join(lines)

    def _diff(self, diff: ConfigDiff, *, as_json: bool) -> None:
        if as_json:
            print_json(self, diff.as_dict(), indent=2, ensure_ascii=True)
            return
        live = f"generation {diff.live}" if diff.live else "nothing (no generation applied)"
        lines = [f"candidate against {live}"]
        if not diff.changed:
            lines.append("no scope differs")
        for scope in diff.changed:
            lines.append(f"scope {scope.path}: {scope.change}")
            for kind, items in (("route", scope.routes), ("binding", scope.bindings)):
                for item in items:
                    fields = f" ({', '.join(item.fields)})" if item.fields else ""
                    lines.append(f"  {kind} {item.name}: {item.change}{fields}")
                    for side, value in (("-", item.live), ("+", item.candidate)):
                        if value is not None and (item.change != "changed" or item.fields):
                            shown = {k: value[k] for k in (item.fields or value)}
                            lines.append(f"    {side} {json.dumps(shown, sort_keys=True)}")
        self.stdout.write("\n".join(lines))

    def _preview(self, report: ImpactReport, *, as_json: bool) -> None:
        if as_json:
            print_json(self, report.as_dict(), indent=2)
            return
        span = f" (#{report.first_seq} to #{report.last_seq})" if report.first_seq else ""
        lines = [
            f"{report.changed} of the {report.examined} latest Events{span} would route otherwise under "
            f"candidate {report.candidate} than under generation {report.live} ({report.traced} traced, "
            f"{report.seconds:.2f} s); nothing was written"
        ]
        for group, changes in report.groups:
            lines.append(f"{group}: {len(changes)}")
            for change in changes:
                lines.append(
                    f"  #{change.seq} {change.type} in {change.scope}: {_outcome(change.live)}  |  "
                    f"{_outcome(change.candidate)}"
                )
        self.stdout.write("\n".join(lines))


def _outcome(outcome) -> str:
    """One side of an impact change on one line: effect, route/binding, Work or refusal, and
    a rate limit's reason for a drop."""
    if outcome.result is None:
        return f"refused ({outcome.refused.field}): {outcome.refused.message}"
    result = outcome.result
    text = result.effect
    if result.route:
        text += f" by {result.route}" + (f" on {result.binding}" if result.binding else "")
    if result.work_id:
        text += f" (Work {result.work_id})"
    if result.effect == "drop" and is_rate_limited(result.reason):
        text += f": {result.reason}"  # why the route would drop it (its other drops say by it)
    return text


SUBCOMMANDS: dict[str, Subcommand] = {
    "validate": Subcommand(
        "Check a document and print what it declares; stores nothing.",
        validate_arguments,
        Command._document,
        description="",
    ),
    "apply": Subcommand(
        "Validate a document and apply it as the next live generation; prints its number.",
        apply_arguments,
        Command._document,
        description="",
    ),
    "candidate": Subcommand(
        "Validate a document and store it as a candidate for trace previews (not applied); prints the "
        "candidate id.",
        candidate_arguments,
        Command._document,
        description="",
    ),
    "diff": Subcommand(
        "Show how a candidate differs from the live generation, per scope: routes and bindings added, "
        "removed or changed (with the fields that changed). Exits 0 either way.",
        diff_arguments,
        Command._candidate,
        description="",
    ),
    "preview": Subcommand(
        "Impact preview: trace the latest Events again against the live generation and the candidate, "
        "and list only those that would route otherwise, grouped. Writes nothing.",
        preview_arguments,
        Command._candidate,
        description="",
    ),
    "show": Subcommand(
        "Show a scope's bindings and routes in one generation.", show_arguments, Command._show, description=""
    ),
}
