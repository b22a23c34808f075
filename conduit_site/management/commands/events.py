"""``manage.py events SUBCOMMAND``: Events from the command line.

Each subcommand is a :class:`Subcommand` in ``SUBCOMMANDS``: a function that adds its
arguments (with help text on every one) and a function that runs it. To add one (``get``,
``chain``, ``list``, ``skip``, ``reroute``, ``replay``…), write the two functions and add an entry; keep
``run`` thin: parse, call one service or selector, print, and raise ``CommandError`` (a
non-zero exit) for refused input.
"""

from __future__ import annotations

import argparse
import re
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, NoReturn, TextIO

from django.core.management.base import BaseCommand, CommandError, CommandParser

from causal.clock import system_clock
from causal.models import Event, RouteState
from causal.selectors import PAGE_SIZE
from conduit_site.management.event_controls import (
    replay_arguments,
    replay_run,
    reroute_arguments,
    reroute_run,
    skip_arguments,
    skip_run,
)
from infra.cli import (
    CLI_ACTOR,
    Subcommand,
    add_subcommands,
    as_user_argument,
    cli_actor,
    error_body,
    json_argument,
    positive_int,
    print_json,
    refuse,
    run_subcommand,
)
from infra.times import parse_time, timestamp
from routing.models import Disposition
from routing.records.explain import route_why
from routing.records.filters import MAX_LIST_LIMIT, EventListFilter, EventListInvalid
from routing.records.selectors import EventRoute, event_chain_routes, event_route, events_route_page
from routing.serializers import accepted_json, event_json, event_route_json, refusals_json

if TYPE_CHECKING:
    from causal.services import Accepted
    from routing.acceptance.envelopes import Document, EnvelopeInvalid


# --- accept ---------------------------------------------------------------------------------


def accept_arguments(parser: CommandParser) -> None:
    """Arguments of ``events accept``."""
    parser.add_argument(
        "file",
        metavar="FILE",
        help="A file holding one Event (a JSON object), several (a JSON array) or JSON lines "
        "(one Event per line); '-' reads standard input.",
    )
    as_user_argument(
        parser,
        help=f"The username recorded as accepted_by (an existing active user; default {CLI_ACTOR!r}).",
    )
    json_argument(
        parser,
        "Print the results as JSON ({'results': [{'created': …, 'event': the CloudEvent, 'conduit': "
        "Conduit's fields}]}, as POST /api/events answers a batch) and errors as a JSON object on "
        "standard output.",
    )


def accept_run(command: BaseCommand, options: dict[str, Any]) -> None:
    """Accept the Events of FILE: validate them all, then accept them all in one transaction."""
    # Imported here: the configuration parser behind the services is not needed to read Events.
    from routing.acceptance import services
    from routing.acceptance.envelopes import EnvelopeInvalid, read_documents

    as_json = options["json"]
    raw = _read_input(options["file"], options.get("stdin"))
    accepted_by = cli_actor(options["as_user"])
    documents: list[Document] | None = None
    try:
        documents, batch = read_documents(raw)  # each document's text depth checked
        if batch:
            results = services.events_accept(
                payloads=[document.obj for document in documents],
                clock=system_clock,
                accepted_by=accepted_by,
                depth_checked=True,
                may_address_work=True,  # the CLI is trusted host access: it checks no permission
            )
        else:
            results = [
                services.event_accept(
                    payload=documents[0].obj,
                    clock=system_clock,
                    accepted_by=accepted_by,
                    depth_checked=True,
                    may_address_work=True,
                )
            ]
    except EnvelopeInvalid as exc:
        refuse(command, as_json=as_json, body=exc.details(), message=_describe(exc, documents))
    _print_results(command, results, as_json=as_json)


def _read_input(file: str, stdin: BinaryIO | TextIO | None) -> bytes:
    if file == "-":
        stream = stdin if stdin is not None else sys.stdin.buffer
        data = stream.read()
        return data.encode("utf-8") if isinstance(data, str) else data
    try:
        return Path(file).read_bytes()
    except OSError as exc:
        raise CommandError(f"FILE: cannot read {file}: {exc.strerror or exc}") from exc


def _describe(exc: EnvelopeInvalid, documents: list[Document] | None) -> str:
    """A refusal in words, naming where each refused Event was found (line N, [i])."""
    errors = getattr(exc, "errors", None) or (exc,)
    lines = []
    for error in errors:
        place = ""
        if error.index is not None and documents and error.index < len(documents):
            place = f"{documents[error.index].label}: "
        field = f"{error.field}: " if error.field else ""
        lines.append(f"{place}{field}{error.message}")
    head = "refused, nothing was accepted"
    return head + ": " + lines[0] if len(lines) == 1 else head + ":\n  " + "\n  ".join(lines)


def _print_results(command: BaseCommand, results: list[Accepted], *, as_json: bool) -> None:
    if as_json:
        print_json(command, {"results": [accepted_json(r.event, created=r.created) for r in results]})
        return
    for result in results:
        event = result.event
        status = "created" if result.created else "duplicate"
        command.stdout.write(f"{event.seq} {status} {event.source} {event.envelope_id}")


# --- get, chain, list: reading routes (R29) ------------------------------------------------

# events list's options, by the filter field each one sets (to name the option in errors).
LIST_OPTIONS = {
    "query": "--query",
    "data": "--data",
    "scope": "--scope",
    "subtree": "--subtree",
    "type": "--type",
    "policy": "--policy",
    "state": "--state",
    "work_id": "--work",
    "since": "--since",
    "until": "--until",
    "after": "--after",
    "limit": "--limit",
}


def iso_time(text: str) -> datetime:
    """An argparse type: a moment as :func:`parse_time` reads it (ISO 8601, UTC without an
    offset; -2h; today), as the console's and the API's filters read it."""
    try:
        return parse_time(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _json_argument(parser: CommandParser, what: str) -> None:
    json_argument(
        parser,
        f"Print {what} as JSON (each Event as GET /api/events answers it: {{'event': the CloudEvent, "
        "'conduit': Conduit's fields, 'route': as GET /api/events/SEQ/route answers}) and errors as a "
        "JSON object on standard output.",
    )


def get_arguments(parser: CommandParser) -> None:
    """Arguments of ``events get``."""
    parser.add_argument("seq", metavar="SEQ", type=positive_int, help="The Event's seq.")
    _json_argument(parser, "the Event and its route")


def chain_arguments(parser: CommandParser) -> None:
    """Arguments of ``events chain``."""
    parser.add_argument(
        "seq",
        metavar="SEQ",
        type=positive_int,
        help="The Event whose causal chain to print (its root first).",
    )
    _json_argument(parser, "the chain ({'chain': [...]}, root first)")


# What argparse takes for a value rather than an option: its negative numbers, and a time ago
# ("--since -2h"; no option of the command looks like one).
_VALUE_LIKE = re.compile(r"^-\d+$|^-\d*\.\d+$|^-\d+[smhdw]$")


def list_arguments(parser: CommandParser) -> None:
    """Arguments of ``events list``."""
    parser._negative_number_matcher = _VALUE_LIKE  # noqa: SLF001 (argparse has no public hook)
    parser.add_argument(
        "--query",
        default="",
        metavar="TEXT",
        help="Only the Events whose envelope id or subject starts with TEXT, or whose seq it is (digits, '#' "
        "optional).",
    )
    parser.add_argument(
        "--data",
        default="",
        metavar="TEXT",
        help="Only the Events whose data (as JSON text) contains TEXT, among the newest 10,000.",
    )
    parser.add_argument("--scope", default="", metavar="PATH", help="Only Events of this scope (exact path).")
    parser.add_argument(
        "--subtree",
        action="store_true",
        help="With --scope: also the Events of every scope under it (acme: acme/web, acme/web/x).",
    )
    parser.add_argument(
        "--type",
        default="",
        metavar="GLOB",
        help="Only Events whose type matches this glob ('*' any characters, '?' one; case-sensitive), "
        "e.g. 'github.pull_request.*'.",
    )
    parser.add_argument(
        "--state",
        default="",
        choices=RouteState.values,
        help="Only Events in this route state.",
    )
    parser.add_argument(
        "--policy",
        default="",
        metavar="POLICY",
        help="Only Events whose route record has this policy (e.g. unmatched, drop, start, queue, skipped, "
        "failed).",
    )
    parser.add_argument(
        "--work",
        dest="work_id",
        type=positive_int,
        default=None,
        metavar="ID",
        help="Only Events routed on this Work or naming it as their target.",
    )
    parser.add_argument(
        "--since",
        type=iso_time,
        default=None,
        metavar="TIME",
        help="Only Events accepted at or after TIME: ISO 8601 (UTC when it has no offset), -10m, -2h, -3d, "
        "today or yesterday.",
    )
    parser.add_argument(
        "--until",
        type=iso_time,
        default=None,
        metavar="TIME",
        help="Only Events accepted before TIME: ISO 8601 (UTC when it has no offset), -10m, -2h, -3d, "
        "today or yesterday.",
    )
    parser.add_argument(
        "--limit",
        type=int,
        default=PAGE_SIZE,
        metavar="N",
        help=f"How many Events to print (1 to {MAX_LIST_LIMIT}; default {PAGE_SIZE}).",
    )
    parser.add_argument(
        "--after",
        type=positive_int,
        default=None,
        metavar="SEQ",
        help="Continue a listing after this seq (the one a previous page printed as next).",
    )
    parser.add_argument(
        "--oldest",
        action="store_true",
        help="Oldest first (ascending seq); the default is newest first.",
    )
    _json_argument(parser, "the page ({'events': [...], 'next_after': SEQ or null})")


def get_run(command: BaseCommand, options: dict[str, Any]) -> None:
    """Print one Event and its route: the RouteRecord with its refusals, or why it is unrouted."""
    try:
        item = event_route(options["seq"])
    except Event.DoesNotExist:
        _refuse(command, options, "not_found", f"SEQ: no Event has seq {options['seq']}")
    if options["json"]:
        print_json(command, _event_route_item(item))
        return
    # A settled Event's route in the words of its Event page (an unrouted one's lines say why).
    why = [f"  why: {route_why(item.event, item.record)}"] if item.record is not None else []
    command.stdout.write("\n".join([*route_text(item), *why]))


def chain_run(command: BaseCommand, options: dict[str, Any]) -> None:
    """Print the causal chain of an Event, root first, each Event with its route."""
    try:
        chain = event_chain_routes(options["seq"])
    except Event.DoesNotExist:
        _refuse(command, options, "not_found", f"SEQ: no Event has seq {options['seq']}")
    if options["json"]:
        print_json(command, {"chain": [_event_route_item(item) for item in chain]})
        return
    command.stdout.write("\n".join(line for item in chain for line in route_text(item, depth=True)))


def list_run(command: BaseCommand, options: dict[str, Any]) -> None:
    """Print a page of Events with their routes, filtered, newest (or oldest) first."""
    try:
        filters = EventListFilter(
            query=options["query"],
            data=options["data"],
            scope=options["scope"],
            subtree=options["subtree"],
            type=options["type"],
            policy=options["policy"],
            state=options["state"],
            work_id=options["work_id"],
            since=options["since"],
            until=options["until"],
            after=options["after"],
            limit=options["limit"],
            oldest=options["oldest"],
        )
    except EventListInvalid as exc:
        _refuse(
            command, options, "invalid_filter", f"{LIST_OPTIONS.get(exc.field, exc.field)}: {exc.message}"
        )
    page = events_route_page(filters)
    if options["json"]:
        print_json(
            command, {"events": [_event_route_item(item) for item in page], "next_after": page.next_after}
        )
        return
    lines = [line for item in page for line in route_text(item)]
    if not lines:
        lines.append("No Events match.")
    if page.next_after is not None:
        lines.append(f"More: add --after {page.next_after} for the next page.")
    command.stdout.write("\n".join(lines))


def route_text(item: EventRoute, *, depth: bool = False) -> list[str]:
    """An Event and its route as a compact block of lines: the Event on the first, then its
    route (policy, reason, route/binding, Work, generation), each refusal, and the error and
    attempts of a failed route; for an unrouted Event why, what it waits behind and its
    counted failure."""
    event = item.event
    head = f"#{event.seq} {event.type}  {event.source}/{event.envelope_id}  scope {event.scope}  {event.route_state}"
    lines = [f"depth {event.depth}  {head}" if depth else head]
    record = item.record
    if record is not None:
        line = f"  route: {record.policy}" + (f" ({record.reason})" if record.reason else "")
        if record.route or record.binding:
            line += f" via {record.route or '-'}/{record.binding or '-'}"
        if record.work_id is not None:
            line += f" on Work {record.work_id}"
        if record.generation:
            line += f", generation {record.generation}"
        lines.append(line)
        lines.extend(f"  - {r['route'] or '?'}: {r['reason']}" for r in refusals_json(record.refusals))
        if record.error:
            lines.append(f"  error: {_first_line(record.error)}")
        if record.error or record.disposition == Disposition.FAILED:
            lines.append(f"  attempts: {record.attempts}")
        return lines
    if event.is_settled:
        lines.append("  route: no route record")
        return lines
    lines.append(f"  unrouted: {event.unrouted_reason or 'not looked at yet'}")
    if event.waiting_on_id is not None:
        lines.append(f"  waits behind #{event.waiting_on_id}")
    failure = item.failure
    if failure is not None:
        on_route = f" on route {failure.route}" if failure.route else ""
        lines.append(f"  failures: {failure.count} ({failure.code}{on_route})")
        if failure.error:
            lines.append(f"  error: {_first_line(failure.error)}")
    if event.retry_at is not None:
        lines.append(f"  next retry: {timestamp(event.retry_at)}")
    return lines


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _event_route_item(item: EventRoute) -> dict[str, Any]:
    return {**event_json(item.event), "route": event_route_json(item)}


def _refuse(command: BaseCommand, options: dict[str, Any], code: str, message: str) -> NoReturn:
    refuse(command, as_json=bool(options.get("json")), body=error_body(code, message), message=message)


# --- dispatch -------------------------------------------------------------------------------

SUBCOMMANDS: dict[str, Subcommand] = {
    "accept": Subcommand(
        help="Accept Events from a file or standard input (all or nothing).",
        add_arguments=accept_arguments,
        run=accept_run,
    ),
    "skip": Subcommand(
        help="Skip an unrouted Event: route it as skipped without asking its routes (trusted: no "
        "permission is checked; --as names the actor).",
        add_arguments=skip_arguments,
        run=skip_run,
    ),
    "reroute": Subcommand(
        help="Reroute an Event: forget an unrouted Event's failures, or accept a copy of a failed or "
        "skipped one (trusted: no permission is checked; --as names the actor).",
        add_arguments=reroute_arguments,
        run=reroute_run,
    ),
    "replay": Subcommand(
        help="Replay settled Events (routed with any policy, failed or skipped): accept each again as a "
        "copy, id replay/<original id>/<n>, routed under the live configuration (trusted: no permission is "
        "checked; --as names the actor).",
        add_arguments=replay_arguments,
        run=replay_run,
    ),
    "get": Subcommand(
        help="Print an Event and its route (policy, reason, refusals, error) or why it is unrouted.",
        add_arguments=get_arguments,
        run=get_run,
    ),
    "chain": Subcommand(
        help="Print an Event's causal chain from its root, each Event with its route and refusals.",
        add_arguments=chain_arguments,
        run=chain_run,
    ),
    "list": Subcommand(
        help="List Events with their routes, filtered by scope, type, state, Work and time.",
        add_arguments=list_arguments,
        run=list_run,
    ),
}


class Command(BaseCommand):
    help = "Work with Events: " + ", ".join(SUBCOMMANDS) + ". See 'events SUBCOMMAND --help'."
    # call_command("events", "accept", "-", stdin=io.BytesIO(...)) feeds standard input.
    stealth_options = ("stdin",)
    # The system checks import every URLconf, view and admin module (about 0.2 s) for a
    # command that uses none of them; `serve`, `migrate` and `check` still run them.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        add_subcommands(parser, SUBCOMMANDS, help="What to do with Events.")

    def handle(self, *args: Any, **options: Any) -> None:
        run_subcommand(self, SUBCOMMANDS, options)
