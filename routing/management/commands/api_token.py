"""``manage.py api_token create|list|revoke``: per-user tokens for the JSON API.

The secret is printed once, by ``create``; only its SHA-256 digest is stored.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from causal.clock import system_clock
from infra.cli import Subcommand, add_subcommands, domain_errors, run_subcommand
from infra.times import timestamp
from routing.acceptance.services import live_scopes_among
from routing.access import services
from routing.access.roles import TOKEN_SCOPES, RoleError, token_scopes_parse
from routing.access.selectors import api_tokens_list

DEFAULT_NAME = "api"


def create_arguments(parser: CommandParser) -> None:
    """Arguments of ``api_token create``."""
    parser.add_argument("username", metavar="USERNAME", help="The user the token acts as.")
    parser.add_argument(
        "--name",
        default=DEFAULT_NAME,
        help=f"A label to recognise the token by (default {DEFAULT_NAME!r}), up to 100 characters.",
    )
    parser.add_argument(
        "--only",
        metavar="SCOPE[,SCOPE…]",
        default=None,
        help="Narrow the token to these actions, within its user's permissions: "
        f"{', '.join(TOKEN_SCOPES)} (e.g. --only accept for a webhook sender, which then cannot "
        "read). Without it the token acts with all of its user's permissions.",
    )
    parser.add_argument(
        "--default-scope",
        metavar="PATH",
        default="",
        help="The scope path (e.g. acme/web) an Event this token sends without a 'scope' takes. "
        "Without it such an Event takes the configuration's default_scope, or is refused.",
    )


def create_run(command: BaseCommand, options: dict[str, Any]) -> None:
    """Create a token and print its secret, the only time it is shown."""
    with domain_errors(services.ApiTokenInvalid, RoleError):
        scopes = None if options.get("only") is None else token_scopes_parse(options["only"])
        issued = services.api_token_create_for_username(
            username=options["username"],
            name=options["name"],
            clock=system_clock,
            scopes=scopes,
            default_scope=options.get("default_scope") or "",
        )
    token = issued.token
    narrowed = f", narrowed to {', '.join(token.scopes)}" if token.scopes is not None else ""
    if token.default_scope:
        narrowed += f", default scope {token.default_scope}"
    command.stderr.write(
        f"Created API token {token.prefix} ({token.name!r}) for {token.user.get_username()}{narrowed}. "
        "Store the secret now: it is shown only this once."
    )
    if token.default_scope and not live_scopes_among([token.default_scope]):
        command.stderr.write(
            f"Note: {token.default_scope} is not a scope of the live configuration: Events it defaults "
            "are refused until one declares it."
        )
    command.stdout.write(issued.secret)


def list_arguments(parser: CommandParser) -> None:
    """Arguments of ``api_token list``."""
    parser.add_argument("--user", metavar="USERNAME", default=None, help="Only the tokens of this user.")
    parser.add_argument("--all", action="store_true", help="Include revoked tokens.")


def list_run(command: BaseCommand, options: dict[str, Any]) -> None:
    """Print one line per token: prefix, user, name, created, last used, state."""
    for token in api_tokens_list(username=options["user"], include_revoked=options["all"]):
        state = f"revoked {timestamp(token.revoked_at)}" if token.revoked_at else "active"
        command.stdout.write(
            "\t".join(
                [
                    token.prefix,
                    token.user.get_username(),
                    token.name,
                    f"created {timestamp(token.created_at)}",
                    f"last used {timestamp(token.last_used_at) or 'never'}",
                    f"only {','.join(token.scopes)}" if token.scopes is not None else "all permissions",
                    f"default scope {token.default_scope}" if token.default_scope else "no default scope",
                    state,
                ]
            )
        )


def revoke_arguments(parser: CommandParser) -> None:
    """Arguments of ``api_token revoke``."""
    parser.add_argument("prefix", metavar="PREFIX", help="The token's prefix, as 'list' shows it (cdt_…).")


def revoke_run(command: BaseCommand, options: dict[str, Any]) -> None:
    """Revoke a token: it authenticates nothing from now on."""
    with domain_errors(services.ApiTokenInvalid):
        token = services.api_token_revoke(prefix=options["prefix"], clock=system_clock)
    command.stdout.write(f"Revoked API token {token.prefix} ({token.name!r}) of {token.user.get_username()}.")


SUBCOMMANDS: dict[str, Subcommand] = {
    "create": Subcommand(
        "Create a token for USERNAME and print its secret once.", create_arguments, create_run
    ),
    "list": Subcommand("List tokens (active ones unless --all).", list_arguments, list_run),
    "revoke": Subcommand("Revoke the token with PREFIX.", revoke_arguments, revoke_run),
}


class Command(BaseCommand):
    help = "Manage per-user API tokens for the JSON API (Authorization: Bearer <token>)."

    def add_arguments(self, parser: CommandParser) -> None:
        add_subcommands(parser, SUBCOMMANDS, help="create, list or revoke.")

    def handle(self, *args: Any, **options: Any) -> None:
        run_subcommand(self, SUBCOMMANDS, options)
