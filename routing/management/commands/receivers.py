"""``manage.py receivers list|test``: the receivers of the configuration from the command line.

``list`` shows each receiver of the live configuration: its URL, where its secret is (and
whether this shell can read it), its last delivery and its refusals. ``test NAME FILE`` takes a
saved delivery (the body as the sender sent it, its headers with ``--header``/``--headers``),
verifies it with the receiver's secret, maps it to CloudEvents and traces each through routing,
accepting nothing and writing nothing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from causal.clock import system_clock
from infra.cli import Subcommand, add_subcommands, domain_errors, json_argument, print_json, run_subcommand
from infra.times import timestamp
from routing.config.problems import GenerationNotFound
from routing.config.selectors import find_generation
from routing.management.commands.trace import render
from routing.receivers.selectors import ReceiverOverview, receivers_of, receivers_overview
from routing.receivers.services import delivery_map
from routing.receivers.verify import Delivery, Refused
from routing.setup.trace import TraceRefused, trace


def parse_header(text: str) -> tuple[str, str]:
    """``Name: value`` (or ``Name:value``) as a pair; raises ``ValueError``."""
    name, sep, value = text.partition(":")
    if not sep or not name.strip() or " " in name.strip():
        raise ValueError(f"expected a header as NAME:VALUE, got {text!r}")
    return name.strip(), value.strip()


def list_arguments(parser: CommandParser) -> None:
    """Arguments of ``receivers list``."""
    parser.add_argument(
        "--base-url",
        default="",
        metavar="URL",
        help="The server's address (http://127.0.0.1:8000) to print full URLs to paste into senders.",
    )
    json_argument(parser, "Print the receivers as JSON.")


def test_arguments(parser: CommandParser) -> None:
    """Arguments of ``receivers test``."""
    parser.add_argument("name", metavar="NAME", help="The receiver's name (the last segment of /hooks/NAME).")
    parser.add_argument(
        "file",
        metavar="FILE",
        help="The delivery's body exactly as the sender sent it; '-' reads standard input.",
    )
    parser.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME:VALUE",
        help="A header of the delivery (repeat it): X-GitHub-Event:pull_request, the signature header…",
    )
    parser.add_argument(
        "--headers",
        metavar="FILE",
        help="A file of the delivery's headers, one 'Name: value' a line (as a sender's delivery log shows them).",
    )
    parser.add_argument(
        "--no-verify",
        action="store_true",
        help="Map without checking the signature (a delivery saved without it, or a secret this shell lacks).",
    )
    parser.add_argument(
        "--no-trace", action="store_true", help="Print the CloudEvents only, without tracing them."
    )
    parser.add_argument(
        "--generation",
        metavar="REF",
        default=None,
        help="Use the receiver of generation REF ('3') or of a candidate ('candidate:12'); default: the live one.",
    )
    json_argument(parser, "Print the result as JSON.")


class Command(BaseCommand):
    help = (
        "Receivers of real senders' webhooks (POST /hooks/NAME): 'list' shows each receiver of the live "
        "configuration with its URL, secret reference, last delivery and refusals; 'test NAME FILE' "
        "verifies and maps a saved delivery and traces its Events, accepting nothing."
    )
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        add_subcommands(parser, SUBCOMMANDS, dest="action", metavar="ACTION", help="list or test.")

    def handle(self, *args: Any, **options: Any) -> None:
        run_subcommand(self, SUBCOMMANDS, options, dest="action")

    # --- list ----------------------------------------------------------------------------------

    def _list(self, options: dict[str, Any]) -> None:
        number, overview = receivers_overview()
        base = options["base_url"].rstrip("/")
        if options["json"]:
            print_json(
                self,
                {"generation": number, "receivers": [_item_json(item, base) for item in overview]},
                indent=2,
                ensure_ascii=True,
            )
            return
        if number is None:
            self.stdout.write("no configuration has been applied yet")
            return
        if not overview:
            self.stdout.write(f"generation {number} declares no receivers (see docs/receivers.md)")
            return
        self.stdout.write(f"generation {number}: {len(overview)} receiver{'s' if len(overview) != 1 else ''}")
        for item in overview:
            spec = item.spec
            secret = spec.secret.describe() + (
                f" (here: {item.secret_problem})" if item.secret_problem else ""
            )
            last = item.last_delivery_at
            refusal = item.last_refusal
            self.stdout.write(
                f"{spec.name}\n"
                f"  kind {spec.kind}, scope {spec.scope}\n"
                f"  url {base}{spec.path}\n"
                f"  secret {secret}\n"
                f"  last delivery {timestamp(last) if last else 'none'}"
                + (f" (Event #{item.last_event.seq} {item.last_event.type})" if item.last_event else "")
                + f"\n  signature failures {item.signature_failures}, other refusals {item.other_refusals}"
                + (
                    f"; last {refusal.outcome} at {timestamp(refusal.last_at)}: {refusal.last_message}"
                    if refusal
                    else ""
                )
            )

    # --- test ----------------------------------------------------------------------------------

    def _test(self, options: dict[str, Any]) -> None:
        with domain_errors(GenerationNotFound):
            generation = find_generation(options["generation"])
        spec = receivers_of(generation.pk, generation.digest).get(options["name"])
        if spec is None:
            raise CommandError(f"no receiver named {options['name']!r} in {generation}")
        delivery = Delivery.of(self._body(options["file"]), self._headers(options))
        try:
            mapped = delivery_map(
                spec=spec, delivery=delivery, clock=system_clock, verify=not options["no_verify"]
            )
        except Refused as exc:
            hint = " (--no-verify maps it without the secret)" if exc.refusal == "secret_unavailable" else ""
            raise CommandError(f"refused ({exc.refusal}): {exc.detail}{hint}") from exc
        traces = []
        if not options["no_trace"]:
            reference = options["generation"]
            for event in mapped.events:
                try:
                    traces.append(trace(payload=event, clock=system_clock, generation=reference))
                except TraceRefused as exc:
                    raise CommandError(
                        f"acceptance would refuse the Event: {exc.field or 'event'}: {exc.message}"
                    ) from exc
        if options["json"]:
            print_json(
                self,
                {
                    "receiver": spec.name,
                    "verified": not options["no_verify"],
                    "notes": list(mapped.notes),
                    "reply": mapped.reply,
                    "events": list(mapped.events),
                    "traces": [result.as_dict() for result in traces],
                },
                indent=2,
                ensure_ascii=True,
            )
            return
        lines = [f"receiver {spec.name} ({spec.kind}, scope {spec.scope}), {generation}"]
        lines.append(
            "signature: not checked (--no-verify)" if options["no_verify"] else "signature: verified"
        )
        lines.extend(f"note: {note}" for note in mapped.notes)
        if mapped.reply is not None:
            lines.append(f"handshake: answered {json.dumps(mapped.reply)}; nothing would be accepted")
        for index, event in enumerate(mapped.events):
            lines.append(f"Event {index + 1} of {len(mapped.events)}:")
            lines.append(json.dumps(event, indent=2))
            if traces:
                lines.append(render(traces[index]))
        self.stdout.write("\n".join(lines))

    def _body(self, name: str) -> bytes:
        try:
            return sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
        except OSError as exc:
            raise CommandError(f"cannot read {name}: {exc.strerror}") from exc

    def _headers(self, options: dict[str, Any]) -> list[tuple[str, str]]:
        texts: list[str] = []
        if options["headers"]:
            try:
                texts.extend(
                    line
                    for line in Path(options["headers"]).read_text(encoding="utf-8").splitlines()
                    if line.strip()
                )
            except OSError as exc:
                raise CommandError(f"cannot read {options['headers']}: {exc.strerror}") from exc
        texts.extend(options["header"])
        with domain_errors(ValueError):
            pairs = [parse_header(text) for text in texts]
        if not any(name.lower() == "content-type" for name, _ in pairs):
            pairs.insert(0, ("Content-Type", "application/json"))
        return pairs


def _item_json(item: ReceiverOverview, base: str) -> dict[str, Any]:
    spec = item.spec
    refusal = item.last_refusal
    return {
        "name": spec.name,
        "kind": spec.kind,
        "scope": spec.scope,
        "url": f"{base}{spec.path}",
        "secret": spec.secret.as_dict(),
        "secret_problem": item.secret_problem,
        "last_delivery_at": timestamp(item.last_delivery_at),
        "last_event": (
            {
                "seq": item.last_event.seq,
                "type": item.last_event.type,
                "accepted_at": timestamp(item.last_event.accepted_at),
            }
            if item.last_event
            else None
        ),
        "signature_failures": item.signature_failures,
        "refusals": {row.outcome: row.count for row in item.refusals},
        "last_refusal": (
            {"reason": refusal.outcome, "at": timestamp(refusal.last_at), "message": refusal.last_message}
            if refusal
            else None
        ),
    }


SUBCOMMANDS: dict[str, Subcommand] = {
    "list": Subcommand(
        "List the live configuration's receivers.",
        list_arguments,
        Command._list,
        description="List the receivers.",
    ),
    "test": Subcommand(
        "Verify and map a saved delivery, and trace its Events, accepting nothing.",
        test_arguments,
        Command._test,
        description="Verify a saved delivery with the receiver's secret, map it to CloudEvents and "
        "trace each through routing. Nothing is accepted, counted or written.",
    ),
}
