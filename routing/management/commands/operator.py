"""``manage.py operator create USERNAME --role viewer|operator|admin``: a login for the console
(and, for admins, the admin site) with the permissions of one role (``routing.access.roles``)."""

from __future__ import annotations

import secrets
import sys
from dataclasses import dataclass
from pathlib import Path

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import IntegrityError, transaction

from infra.cli import Subcommand, add_subcommands, run_subcommand
from routing.access.roles import Role, RoleError, role_assign_in_tx, role_parse, user_role

GENERATED_PASSWORD_BYTES = 24


class OperatorError(ValueError):
    """Bad input for an operator login; ``field`` names what was wrong."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True, slots=True)
class OperatorResult:
    """What :func:`operator_create` did. ``generated_password`` is set only when this call
    generated a password (the one and only time it can be shown)."""

    username: str
    created: bool
    password_changed: bool
    role: Role | None = None
    role_changed: bool = False
    generated_password: str | None = None


def operator_create(
    *,
    username: str,
    role: Role | None = None,
    password: str | None = None,
    reset_password: bool = False,
) -> OperatorResult:
    """Create the login ``username`` with ``role`` if it does not exist (never a superuser).

    Idempotent: an existing login keeps its role and its password, unless ``role`` is given (it
    becomes the login's only role: groups, staff for admins, superuser cleared), ``password`` is
    given (set when it differs) or ``reset_password`` asks for a new generated one. A new login
    needs a role. A login created without ``password`` gets a generated one. Passwords are stored hashed, as Django does; a
    given password must pass ``AUTH_PASSWORD_VALIDATORS``. Raises :class:`OperatorError` on bad
    input, with nothing stored.
    """
    if password is not None and reset_password:
        raise OperatorError("--reset-password", "cannot be combined with a given password")
    user_model = get_user_model()
    username_field = user_model._meta.get_field(user_model.USERNAME_FIELD)
    username = username.strip()
    try:
        username_field.clean(username, None)
    except ValidationError as error:
        raise OperatorError("USERNAME", " ".join(error.messages)) from error
    if password is not None:
        try:
            validate_password(password, user=user_model(**{user_model.USERNAME_FIELD: username}))
        except ValidationError as error:
            raise OperatorError("password", " ".join(error.messages)) from error

    for _ in range(2):
        try:
            return _operator_create_once(
                user_model=user_model,
                username=username,
                role=role,
                password=password,
                reset_password=reset_password,
            )
        except IntegrityError:
            # Another process created the same login between our read and our insert: it
            # exists now, so the second pass treats it as existing.
            continue
    raise OperatorError("USERNAME", f"could not create or read the login {username!r}")


def _operator_create_once(
    *,
    user_model: type[AbstractBaseUser],
    username: str,
    role: Role | None,
    password: str | None,
    reset_password: bool,
) -> OperatorResult:
    generated = None
    with transaction.atomic():
        user = (
            user_model._default_manager.select_for_update()
            .filter(**{user_model.USERNAME_FIELD: username})
            .first()
        )
        if user is None:
            if role is None:
                raise OperatorError("--role", f"a new login needs a role: {', '.join(Role)}")
            if password is None:
                password = generated = secrets.token_urlsafe(GENERATED_PASSWORD_BYTES)
            user = user_model._default_manager.create_user(
                **{user_model.USERNAME_FIELD: username}, password=password
            )
            role_assign_in_tx(user=user, role=role)
            return OperatorResult(
                username=username,
                created=True,
                password_changed=True,
                role=role,
                role_changed=True,
                generated_password=generated,
            )
        role_changed = False
        if role is not None and (
            user_role(user) is not role or user.is_superuser or user.is_staff != (role is Role.ADMIN)
        ):
            role_assign_in_tx(user=user, role=role)
            role_changed = True
        current = user_role(user)
        if reset_password:
            password = generated = secrets.token_urlsafe(GENERATED_PASSWORD_BYTES)
        if password is None or user.check_password(password):
            return OperatorResult(
                username=username,
                created=False,
                password_changed=False,
                role=current,
                role_changed=role_changed,
            )
        user.set_password(password)
        user.save(update_fields=["password"])
        return OperatorResult(
            username=username,
            created=False,
            password_changed=True,
            role=current,
            role_changed=role_changed,
            generated_password=generated,
        )


def read_password_file(path: str) -> str:
    """The password in ``path`` (``-`` for stdin): its first line, without the line ending."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise OperatorError("--password-file", f"cannot read {path!r}: {error}") from error
    lines = text.splitlines()
    password = lines[0] if lines else ""
    if not password:
        raise OperatorError("--password-file", f"{path!r} is empty: the first line is the password")
    return password


CREATE_DESCRIPTION = (
    "Create the login USERNAME with the permissions of --role unless it exists: viewer "
    "(reads), operator (also accepts Events and uses the operator controls) or admin "
    "(also applies configurations and manages logins; staff for the admin site). No "
    "login is a superuser. Without --password-file a random password is generated and "
    "printed once on stdout. An existing login keeps its role and its password unless "
    "--role, --password-file or --reset-password is given."
)


def create_arguments(parser: CommandParser) -> None:
    """Arguments of ``operator create``."""
    parser.add_argument("username", metavar="USERNAME", help="The login name, e.g. operator.")
    parser.add_argument(
        "--role",
        metavar="ROLE",
        default=None,
        help=f"{' | '.join(Role)}: required for a new login; given for an existing one, it "
        "becomes the login's only role.",
    )
    how = parser.add_mutually_exclusive_group()
    how.add_argument(
        "--password-file",
        metavar="F",
        help="Read the password from the first line of file F ('-' for stdin) instead of "
        "generating one; it must pass the password validators. Set on an existing login too.",
    )
    how.add_argument(
        "--reset-password",
        action="store_true",
        help="If the login exists, give it a new generated password (printed once on stdout).",
    )


class Command(BaseCommand):
    help = (
        "Manage the local operator login used for the console and the admin. "
        "'create USERNAME' is idempotent; a generated password is printed once, alone on stdout, "
        "and every other message goes to stderr, so `operator create NAME > file` keeps only it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_subcommands(parser, SUBCOMMANDS, dest="action", metavar="ACTION")

    def handle(self, *args, **options) -> None:
        # Only one action today; the subcommand keeps room for list/disable later.
        run_subcommand(self, SUBCOMMANDS, options, dest="action")

    def create(self, options: dict) -> None:
        """Create a login unless it exists; print a generated password alone on stdout."""
        try:
            password = None
            if options["password_file"] is not None:
                password = read_password_file(options["password_file"])
            role = None if options.get("role") is None else role_parse(options["role"])
            result = operator_create(
                username=options["username"],
                role=role,
                password=password,
                reset_password=options["reset_password"],
            )
        except RoleError as error:
            raise CommandError(str(error)) from error
        except OperatorError as error:
            if error.field == "password":
                # The password came from the file: name the option the operator typed.
                raise CommandError(f"--password-file {options['password_file']}: {error.message}") from error
            raise CommandError(str(error)) from error

        if result.generated_password is not None:
            self.stdout.write(result.generated_password)
        note = self.style.SUCCESS
        name = result.username
        role = f"role {result.role}" if result.role is not None else "no role"
        if result.created and result.generated_password is not None:
            self.stderr.write(
                f"Created login {name!r} ({role}). The generated password was printed on stdout; "
                "it is shown only this once.",
                style_func=note,
            )
        elif result.created:
            self.stderr.write(f"Created login {name!r} ({role}) with the given password.", style_func=note)
        else:
            changes = [f"its role is now {result.role}"] if result.role_changed else []
            if result.generated_password is not None:
                changes.append("its new generated password was printed on stdout, shown only this once")
            elif result.password_changed:
                changes.append("its password was set")
            summary = "; ".join(changes) if changes else f"nothing changed ({role})"
            self.stderr.write(f"Login {name!r} exists; {summary}.", style_func=note)


SUBCOMMANDS: dict[str, Subcommand] = {
    "create": Subcommand(
        "Create a login with a role unless it exists (idempotent).",
        create_arguments,
        Command.create,
        description=CREATE_DESCRIPTION,
    ),
}
