"""The command-line toolkit every management command uses: subcommands, argument types, ``--as
USER``, ``--json`` output and the mapping of refusals and domain errors to a non-zero exit.

A command stays thin: it declares its arguments with these helpers, calls one service or
selector, prints, and ends with :class:`CommandError` (exit status 1 unless it says otherwise)
for refused input. Nothing here knows an app: it depends on Django's management base and its
user model only.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

# Who a command acts as without ``--as``: the CLI is trusted host access.
CLI_ACTOR = "cli"


# --- subcommands ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Subcommand:
    """One subcommand: its help, how it adds its arguments and how it runs.

    ``description`` is what ``SUBCOMMAND --help`` prints above its options: ``None`` repeats
    ``help``, ``""`` prints none.
    """

    help: str
    add_arguments: Callable[[CommandParser], None]
    run: Callable[[BaseCommand, dict[str, Any]], None]
    description: str | None = None


def add_subcommands(
    parser: CommandParser,
    subcommands: Mapping[str, Subcommand],
    *,
    dest: str = "subcommand",
    metavar: str = "SUBCOMMAND",
    help: str | None = None,
) -> None:
    """Add one required subparser per entry of ``subcommands``, each with its help and arguments."""
    extra = {} if help is None else {"help": help}
    subparsers = parser.add_subparsers(dest=dest, metavar=metavar, required=True, **extra)
    for name, subcommand in subcommands.items():
        description = subcommand.help if subcommand.description is None else subcommand.description
        subparser = subparsers.add_parser(name, help=subcommand.help, description=description)
        subcommand.add_arguments(subparser)


def run_subcommand(
    command: BaseCommand,
    subcommands: Mapping[str, Subcommand],
    options: dict[str, Any],
    *,
    dest: str = "subcommand",
) -> None:
    """Run the subcommand the parsed ``options`` name."""
    subcommands[options[dest]].run(command, options)


# --- argument types ---------------------------------------------------------------------------


def positive_int(text: str) -> int:
    """An argparse type: a positive integer (a seq, a Work id)."""
    return _positive(text, "a positive integer")


def positive_seq(text: str) -> int:
    """An argparse type: an Event seq (a positive integer), named so in the error."""
    return _positive(text, "an Event seq (a positive integer)")


def _positive(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def whole_days(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number of days, at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            days = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number of days, got {text!r}") from None
        if days < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum} day, got {days}")
        return days

    return parse


# --- --as USER --------------------------------------------------------------------------------

AS_USER_HELP = (
    f"The user recorded as the actor (an existing active user; default {CLI_ACTOR!r}). The CLI is "
    "trusted host access: no permission is checked."
)


def as_user_argument(parser: CommandParser, *, help: str = AS_USER_HELP) -> None:
    """``--as USER`` (into ``options["as_user"]``): who the command acts as."""
    parser.add_argument("--as", dest="as_user", metavar="USER", default=None, help=help)


def cli_actor(username: str | None) -> str:
    """Who a command acts as (a control's actor, an acceptance's accepted_by): ``--as USER``
    (an existing active user) or ``cli``."""
    if username is None:
        return CLI_ACTOR
    user_model = get_user_model()
    user = user_model._default_manager.filter(**{user_model.USERNAME_FIELD: username}).first()
    if user is None:
        raise CommandError(f"--as: no user named {username!r}")
    if not user.is_active:
        raise CommandError(f"--as: user {username!r} is inactive")
    return user.get_username()


# --- --json output ----------------------------------------------------------------------------


def json_argument(parser: CommandParser, help: str) -> None:
    """``--json`` (into ``options["json"]``): print JSON instead of text."""
    parser.add_argument("--json", action="store_true", help=help)


def print_json(
    command: BaseCommand, payload: Any, *, indent: int | None = None, ensure_ascii: bool = False
) -> None:
    """Write ``payload`` as JSON on the command's standard output (non-ASCII kept unless ``ensure_ascii``)."""
    command.stdout.write(json.dumps(payload, indent=indent, ensure_ascii=ensure_ascii))


# --- refusals and domain errors ---------------------------------------------------------------

# How a control's refusal starts: the operator learns that nothing changed.
NOTHING_CHANGED = "refused, nothing was changed: "


def error_body(code: str, message: str) -> dict[str, str]:
    """A refusal as JSON, as the API answers one: ``{"error": code, "message": message}``."""
    return {"error": code, "message": message}


def refuse(command: BaseCommand, *, as_json: bool, body: Mapping[str, Any], message: str) -> NoReturn:
    """End the command refused: ``body`` on standard output with ``--json``, then ``message``
    as a :class:`CommandError` (exit status 1)."""
    if as_json:
        print_json(command, dict(body))
    raise CommandError(message)


@contextmanager
def domain_errors(*errors: type[Exception], prefix: str = "") -> Iterator[None]:
    """Inside: an error of these types ends the command with its words (``prefix`` first) as a
    :class:`CommandError` (exit status 1)."""
    try:
        yield
    except errors as exc:
        raise CommandError(f"{prefix}{exc}") from exc
