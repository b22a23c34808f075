"""The command-line toolkit (infra.cli): argument types refuse what is not positive, a
subcommand table becomes required subparsers, ``--as`` names an existing active user, and a
refusal or a domain error ends the command with a CommandError (JSON first with ``--json``)."""

from __future__ import annotations

import argparse
import io
import json

import pytest
from django.core.management.base import BaseCommand, CommandError, CommandParser

from infra.cli import (
    CLI_ACTOR,
    Subcommand,
    add_subcommands,
    cli_actor,
    domain_errors,
    error_body,
    positive_int,
    positive_seq,
    refuse,
    run_subcommand,
    whole_days,
)
from tests.routing.factories import UserFactory


@pytest.mark.parametrize("text", ["0", "-3", "x", "1.5", ""])
def test_positive_types_refuse_what_is_not_a_positive_integer(text):
    with pytest.raises(argparse.ArgumentTypeError, match="expected a positive integer"):
        positive_int(text)
    with pytest.raises(argparse.ArgumentTypeError, match=r"expected an Event seq \(a positive integer\)"):
        positive_seq(text)


def test_positive_types_take_a_positive_integer():
    assert positive_int("7") == 7
    assert positive_seq("12") == 12


def test_whole_days_takes_at_least_its_minimum():
    days = whole_days(1)
    assert days("30") == 30
    with pytest.raises(argparse.ArgumentTypeError, match="must be at least 1 day, got 0"):
        days("0")
    with pytest.raises(argparse.ArgumentTypeError, match="expected a whole number of days"):
        days("a week")


def _parser(subcommands: dict[str, Subcommand]) -> CommandParser:
    parser = CommandParser(prog="manage.py thing")
    add_subcommands(parser, subcommands, help="What to do.")
    return parser


def test_a_subcommand_table_becomes_required_subparsers_with_their_help():
    ran = []
    table = {
        "one": Subcommand(
            "Do one thing.",
            lambda parser: parser.add_argument("n", type=positive_int),
            lambda command, options: ran.append(options["n"]),
        ),
        "two": Subcommand(
            "Do two things.", lambda parser: None, lambda command, options: None, description=""
        ),
    }
    parser = _parser(table)
    options = vars(parser.parse_args(["one", "3"]))
    run_subcommand(BaseCommand(), table, options)
    assert ran == [3]
    with pytest.raises(CommandError):  # CommandParser raises instead of exiting
        parser.parse_args([])
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert subparsers.choices["one"].description == "Do one thing."
    assert not subparsers.choices["two"].description


@pytest.mark.django_db
def test_as_names_an_existing_active_user_or_the_cli():
    UserFactory(username="ada")
    UserFactory(username="gone", is_active=False)
    assert cli_actor(None) == CLI_ACTOR
    assert cli_actor("ada") == "ada"
    with pytest.raises(CommandError, match="--as: no user named 'bob'"):
        cli_actor("bob")
    with pytest.raises(CommandError, match="--as: user 'gone' is inactive"):
        cli_actor("gone")


def test_a_refusal_prints_its_body_with_json_and_exits_with_its_message():
    command = BaseCommand(stdout=io.StringIO())
    with pytest.raises(CommandError, match="SEQ: no Event has seq 9"):
        refuse(
            command, as_json=True, body=error_body("not_found", "no Event"), message="SEQ: no Event has seq 9"
        )
    assert json.loads(command.stdout.getvalue()) == {"error": "not_found", "message": "no Event"}
    quiet = BaseCommand(stdout=io.StringIO())
    with pytest.raises(CommandError):
        refuse(quiet, as_json=False, body=error_body("not_found", "no Event"), message="no")
    assert quiet.stdout.getvalue() == ""


def test_a_domain_error_ends_the_command_with_its_words():
    with pytest.raises(CommandError, match="^--older-than: too short$"):
        with domain_errors(ValueError, prefix="--older-than: "):
            raise ValueError("too short")
    with pytest.raises(KeyError):  # another error is not a refusal: it propagates
        with domain_errors(ValueError):
            raise KeyError("x")
