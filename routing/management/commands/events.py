"""``manage.py events SUBCOMMAND``: Events from the command line.

Each subcommand is a :class:`Subcommand` in ``SUBCOMMANDS``: a function that adds its
arguments (with help text on every one) and a function that runs it. To add one (``get``,
``chain``, ``list``, ``skip``, ``reroute``…), write the two functions and add an entry; keep
``run`` thin: parse, call one service or selector, print, and raise ``CommandError`` (a
non-zero exit) for refused input.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from causal.clock import system_clock
from causal.services import Accepted
from routing import services
from routing.ingress import Document, EnvelopeInvalid, read_documents
from routing.serializers import accepted_json

CLI_ACCEPTED_BY = "cli"


@dataclass(frozen=True, slots=True)
class Subcommand:
    """One ``events`` subcommand: its help, how it adds its arguments and how it runs."""

    help: str
    add_arguments: Callable[[CommandParser], None]
    run: Callable[[BaseCommand, dict[str, Any]], None]


# --- accept ---------------------------------------------------------------------------------


def accept_arguments(parser: CommandParser) -> None:
    """Arguments of ``events accept``."""
    parser.add_argument(
        "file",
        metavar="FILE",
        help="A file holding one Event (a JSON object), several (a JSON array) or JSON lines "
        "(one Event per line); '-' reads standard input.",
    )
    parser.add_argument(
        "--as",
        dest="as_user",
        metavar="USER",
        default=None,
        help=f"The username recorded as accepted_by (an existing active user; default {CLI_ACCEPTED_BY!r}).",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="Print the results as JSON ({'results': [{'created': …, 'event': …}]}) and errors as a "
        "JSON object on standard output.",
    )


def accept_run(command: BaseCommand, options: dict[str, Any]) -> None:
    """Accept the Events of FILE: validate them all, then accept them all in one transaction."""
    as_json = options["json"]
    raw = _read_input(options["file"], options.get("stdin"))
    accepted_by = _accepted_by(options["as_user"])
    documents: list[Document] | None = None
    try:
        documents, batch = read_documents(raw)
        if batch:
            results = services.events_accept(
                payloads=[document.obj for document in documents],
                clock=system_clock,
                accepted_by=accepted_by,
            )
        else:
            results = [
                services.event_accept(payload=documents[0].obj, clock=system_clock, accepted_by=accepted_by)
            ]
    except EnvelopeInvalid as exc:
        if as_json:
            command.stdout.write(json.dumps(exc.details(), ensure_ascii=False))
        raise CommandError(_describe(exc, documents)) from exc
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


def _accepted_by(username: str | None) -> str:
    if username is None:
        return CLI_ACCEPTED_BY
    user_model = get_user_model()
    user = user_model._default_manager.filter(**{user_model.USERNAME_FIELD: username}).first()
    if user is None:
        raise CommandError(f"--as: no user named {username!r}")
    if not user.is_active:
        raise CommandError(f"--as: user {username!r} is inactive")
    return user.get_username()


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
        payload = {"results": [accepted_json(r.event, created=r.created) for r in results]}
        command.stdout.write(json.dumps(payload, ensure_ascii=False))
        return
    for result in results:
        event = result.event
        status = "created" if result.created else "duplicate"
        command.stdout.write(f"{event.seq} {status} {event.source} {event.envelope_id}")


# --- dispatch -------------------------------------------------------------------------------

SUBCOMMANDS: dict[str, Subcommand] = {
    "accept": Subcommand(
        help="Accept Events from a file or standard input (all or nothing).",
        add_arguments=accept_arguments,
        run=accept_run,
    ),
}


class Command(BaseCommand):
    help = "Work with Events: " + ", ".join(SUBCOMMANDS) + ". See 'events SUBCOMMAND --help'."
    # call_command("events", "accept", "-", stdin=io.BytesIO(...)) feeds standard input.
    stealth_options = ("stdin",)

    def add_arguments(self, parser: CommandParser) -> None:
        subparsers = parser.add_subparsers(
            dest="subcommand", metavar="SUBCOMMAND", required=True, help="What to do with Events."
        )
        for name, subcommand in SUBCOMMANDS.items():
            subparser = subparsers.add_parser(name, help=subcommand.help, description=subcommand.help)
            subcommand.add_arguments(subparser)

    def handle(self, *args: Any, **options: Any) -> None:
        SUBCOMMANDS[options["subcommand"]].run(self, options)
