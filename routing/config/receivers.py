"""A receiver as the configuration document declares it, checked::

receivers:
  github:                                  # the name: POST /hooks/github
    kind: github                           # github, slack, alertmanager, cloudevents, generic-hmac
    scope: acme/web                        # the scope its Events go to
    secret: {env: CONDUIT_GITHUB_SECRET}   # or {file: github-secret}, in CONDUIT_SECRETS_DIR
    subject: "{data.repository.full_name}" # optional templates: type, subject

What each kind's declaration may say (its own keys and templates) and how those are checked live
here, with the declaration; how a kind verifies and maps a delivery is ``routing.receivers``'.
"""

from __future__ import annotations

import hashlib
import os
import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from django.conf import settings

from causal.checks import kind_of

# A receiver's name is the last segment of its URL, /hooks/<name>.
RECEIVER_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
MAX_RECEIVER_NAME = 64
# What an Event's accepted_by holds when a receiver accepted it (user names never hold ':').
ACCEPTED_BY_PREFIX = "receiver:"
HOOKS_PATH = "/hooks/"


@dataclass(frozen=True, slots=True)
class ReceiverSpec:
    """A receiver as declared: its name (``/hooks/<name>``), kind, the scope its Events go to,
    where its secret is, and the rest of its declaration (``settings``: the kind's own keys and
    the templates ``type``, ``subject``…), plain JSON values."""

    name: str
    kind: str
    scope: str
    secret: SecretRef
    settings: Mapping[str, Any] = field(default_factory=dict)
    place: str = ""

    @property
    def accepted_by(self) -> str:
        """What the Events it accepts record as ``accepted_by``."""
        return accepted_by(self.name)

    @property
    def path(self) -> str:
        """The URL path to give the sender."""
        return f"{HOOKS_PATH}{self.name}"


def accepted_by(name: str) -> str:
    """``receiver:<name>``: the ``accepted_by`` of the Events receiver ``name`` accepts."""
    return f"{ACCEPTED_BY_PREFIX}{name}"


def receiver_of(accepted_by_: str) -> str:
    """The receiver an Event's ``accepted_by`` names, or ``""`` (a user or the CLI accepted it)."""
    return (
        accepted_by_.removeprefix(ACCEPTED_BY_PREFIX) if accepted_by_.startswith(ACCEPTED_BY_PREFIX) else ""
    )


# --- secrets -----------------------------------------------------------------------------------

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class SecretRef:
    """Where a receiver's secret is: an environment variable or a file (one of them)."""

    env: str = ""
    file: str = ""

    def describe(self) -> str:
        """``env NAME`` or ``file PATH``: what the console and the CLI show (never the secret)."""
        return f"env {self.env}" if self.env else f"file {self.file}"

    def as_dict(self) -> dict[str, str]:
        """The reference as the document declares it (``{"env": NAME}`` or ``{"file": PATH}``)."""
        return {"env": self.env} if self.env else {"file": self.file}

    @property
    def path(self) -> Path | None:
        """The secret file's path (a relative one is taken from the secrets directory), or
        ``None`` when it is outside that directory."""
        return secret_file_path(self.file)


def secret_file_path(file: str) -> Path | None:
    """Where the secret file ``file`` is: inside ``CONDUIT_SECRETS_DIR`` (a relative name is taken
    from it), or ``None`` for any other path, ``..`` included.

    Decided from the text alone, never the file system: a configuration naming a file elsewhere
    (the host's password file) is refused the same whether that file exists or not.
    """
    directory = Path(os.path.normpath(os.path.abspath(settings.CONDUIT_SECRETS_DIR)))
    path = Path(os.path.normpath(directory / file))
    return path if path != directory and path.is_relative_to(directory) else None


# --- templates ---------------------------------------------------------------------------------

TEMPLATE_ROOTS: tuple[str, ...] = ("data", "headers")


@dataclass(frozen=True, slots=True)
class Template:
    """A receiver's template like ``"shop.{headers.x-shopify-topic}"``: literal text and fields
    (``data.<key>…`` into the payload, ``headers.<name>`` of the delivery), in order."""

    text: str
    parts: tuple[str | tuple[str, ...], ...]


def parse_template(text: Any) -> Template:
    """Compile a template; raises ``ValueError`` saying what is wrong."""
    if not isinstance(text, str) or not text:
        raise ValueError(f"expected a template string like 'shop.{{data.kind}}', got {text!r}")
    parts: list[str | tuple[str, ...]] = []
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise ValueError(f"bad template {text!r}: {exc} (write {{{{ and }}}} for literal braces)") from None
    for literal, name, format_spec, conversion in parsed:
        if literal:
            parts.append(literal)
        if name is None:
            continue
        if conversion or format_spec or not name:
            raise ValueError(f"bad template {text!r}: write fields as {{data.key}} or {{headers.name}}")
        root, *rest = name.split(".")
        if root not in TEMPLATE_ROOTS or not rest or not all(rest):
            raise ValueError(
                f"bad template {text!r}: field {name!r} must be data.<key>[.<key>…] or headers.<name>"
            )
        if root == "headers" and len(rest) != 1:
            raise ValueError(f"bad template {text!r}: field {name!r}: a header is headers.<name>")
        parts.append((root, *(part.lower() if root == "headers" else part for part in rest)))
    return Template(text=text, parts=tuple(parts))


# --- what each kind's declaration may say ---------------------------------------------------------

ALGORITHMS: dict[str, Any] = {"sha1": hashlib.sha1, "sha256": hashlib.sha256, "sha512": hashlib.sha512}
ENCODINGS: tuple[str, ...] = ("hex", "base64")
AUTH_SCHEMES: tuple[str, ...] = ("bearer", "basic")
HEADER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]*$")
# The header an HMAC is sent in unless the declaration names one (generic-hmac, cloudevents).
DEFAULT_HMAC_HEADER = "X-Signature"
HMAC_KEYS = ("header", "algorithm", "encoding", "prefix")

# Checks a declaration's settings: (key, message) for each problem.
SettingsCheck = Callable[[Mapping[str, Any]], list[tuple[str, str]]]


@dataclass(frozen=True, slots=True)
class DeclaredKind:
    """What a declaration of a kind of receiver may say beyond ``kind``, ``scope`` and
    ``secret``: its own ``keys`` (checked by ``check``) and the attributes it may set with a
    template (``templates``)."""

    name: str
    keys: tuple[str, ...]
    check: SettingsCheck
    templates: tuple[str, ...] = ("type", "subject")


def no_settings(settings: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The check of a kind with no keys of its own."""
    return []


def hmac_settings_problems(settings_: Mapping[str, Any], *, default_header: str) -> list[tuple[str, str]]:
    """Problems with ``header``, ``algorithm``, ``encoding`` and ``prefix`` (each optional)."""
    problems: list[tuple[str, str]] = []
    header = settings_.get("header", default_header)
    if not isinstance(header, str) or not HEADER_NAME.match(header):
        problems.append(("header", f"expected a header name like {default_header}, got {header!r}"))
    algorithm = settings_.get("algorithm", "sha256")
    if algorithm not in ALGORITHMS:
        problems.append(
            ("algorithm", f"unknown algorithm {algorithm!r} (expected one of: {', '.join(ALGORITHMS)})")
        )
    encoding = settings_.get("encoding", "hex")
    if encoding not in ENCODINGS:
        problems.append(
            ("encoding", f"unknown encoding {encoding!r} (expected one of: {', '.join(ENCODINGS)})")
        )
    prefix = settings_.get("prefix", "")
    if not isinstance(prefix, str) or not prefix.isascii():
        problems.append(("prefix", f"expected ASCII text like 'sha256=', got {prefix!r}"))
    return problems


def auth_settings_problems(
    settings_: Mapping[str, Any], *, schemes: tuple[str, ...] = AUTH_SCHEMES
) -> list[tuple[str, str]]:
    """Problems with ``auth`` (one of ``schemes``, default ``bearer``) and ``username`` (for
    ``basic``, required)."""
    problems: list[tuple[str, str]] = []
    auth = settings_.get("auth", "bearer")
    if auth not in schemes:
        problems.append(("auth", f"unknown auth {auth!r} (expected one of: {', '.join(schemes)})"))
    username = settings_.get("username")
    if auth == "basic":
        if not isinstance(username, str) or not username or ":" in username:
            problems.append(("username", "auth: basic needs a username (text without ':')"))
    elif username is not None:
        problems.append(("username", "a username is only used with auth: basic"))
    return problems


def cloudevents_settings_problems(settings: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``auth`` (bearer, basic or hmac) with ``username`` (basic) or the HMAC's keys (hmac)."""
    problems = auth_settings_problems(settings, schemes=("bearer", "basic", "hmac"))
    if settings.get("auth") == "hmac":
        problems.extend(hmac_settings_problems(settings, default_header=DEFAULT_HMAC_HEADER))
    else:
        problems.extend((key, "only used with auth: hmac") for key in HMAC_KEYS if key in settings)
    return problems


def generic_hmac_settings_problems(settings: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``header``, ``algorithm``, ``encoding`` and ``prefix``."""
    return hmac_settings_problems(settings, default_header=DEFAULT_HMAC_HEADER)


DECLARED_KINDS: Mapping[str, DeclaredKind] = MappingProxyType(
    {
        kind.name: kind
        for kind in (
            DeclaredKind(name="github", keys=(), check=no_settings),
            DeclaredKind(name="slack", keys=(), check=no_settings),
            DeclaredKind(name="alertmanager", keys=("auth", "username"), check=auth_settings_problems),
            DeclaredKind(
                name="cloudevents", keys=("auth", "username", *HMAC_KEYS), check=cloudevents_settings_problems
            ),
            DeclaredKind(
                name="generic-hmac",
                keys=HMAC_KEYS,
                check=generic_hmac_settings_problems,
                templates=("id", "source", "type", "subject"),
            ),
        )
    }
)
COMMON_KEYS: tuple[str, ...] = ("kind", "scope", "secret")
SECRET_HOW = "write where the secret is, never the secret: secret: {env: VARIABLE} or secret: {file: PATH}"


def receiver_parse(name: Any, raw: Any, place: str) -> tuple[ReceiverSpec | None, list[tuple[str, str]]]:
    """A declared receiver checked: the spec (``None`` when anything is wrong) and each problem
    as ``(place, message)``, its place below ``place`` (``receivers.github.secret``). The scope
    is only checked to be text: the document knows which scopes exist."""
    problems: list[tuple[str, str]] = []
    if not isinstance(name, str) or not RECEIVER_NAME.match(name) or len(name) > MAX_RECEIVER_NAME:
        problems.append(
            (
                place,
                f"bad receiver name {name!r}: lower-case letters, digits, '-' or '_', starting with a letter "
                f"or digit, at most {MAX_RECEIVER_NAME} characters (it is the URL's last segment, /hooks/<name>)",
            )
        )
    if not isinstance(raw, dict):
        problems.append(
            (place, f"expected a receiver (a mapping with kind, scope and secret), got {_kind(raw)}")
        )
        return None, problems
    kind_name = raw.get("kind")
    kind = DECLARED_KINDS.get(kind_name) if isinstance(kind_name, str) else None
    if kind_name is None:
        problems.append((f"{place}.kind", f"required: one of {', '.join(DECLARED_KINDS)}"))
    elif kind is None:
        problems.append(
            (f"{place}.kind", f"unknown kind {kind_name!r} (expected one of: {', '.join(DECLARED_KINDS)})")
        )
    allowed = (*COMMON_KEYS, *kind.templates, *kind.keys) if kind else None
    if allowed is not None:
        for key in raw:
            if key not in allowed:
                problems.append(
                    (
                        f"{place}.{key}",
                        f"unknown key {key!r} for kind {kind.name} (expected one of: {', '.join(allowed)})",
                    )
                )
    scope = raw.get("scope")
    if scope is None:
        problems.append((f"{place}.scope", "required: the scope this receiver's Events go to"))
    elif not isinstance(scope, str) or not scope:
        problems.append((f"{place}.scope", f"expected a scope path, got {_kind(scope)}"))
    secret = _secret(raw.get("secret"), f"{place}.secret", problems)
    settings = {key: value for key, value in raw.items() if key not in COMMON_KEYS}
    if kind is not None:
        for key in kind.templates:
            if key in settings:
                try:
                    parse_template(settings[key])
                except ValueError as exc:
                    problems.append((f"{place}.{key}", str(exc)))
        known = {key: value for key, value in settings.items() if key in kind.keys}
        problems.extend((f"{place}.{key}", message) for key, message in kind.check(known))
    if problems or kind is None or secret is None:
        return None, problems
    return ReceiverSpec(
        name=name, kind=kind.name, scope=scope, secret=secret, settings=settings, place=place
    ), []


def _secret(raw: Any, place: str, problems: list[tuple[str, str]]) -> SecretRef | None:
    if raw is None:
        problems.append((place, f"required: {SECRET_HOW}"))
        return None
    if not isinstance(raw, dict):
        # Never echo it: it may be the secret itself.
        problems.append((place, f"expected a mapping, got {_kind(raw)}: {SECRET_HOW}"))
        return None
    if set(raw) not in ({"env"}, {"file"}):
        problems.append((place, f"name exactly one of env or file: {SECRET_HOW}"))
        return None
    if "env" in raw:
        value = raw["env"]
        if not isinstance(value, str) or not ENV_NAME.match(value):
            problems.append(
                (f"{place}.env", "expected an environment variable's name (letters, digits and '_')")
            )
            return None
        return SecretRef(env=value)
    value = raw["file"]
    if not isinstance(value, str) or not value.strip():
        problems.append((f"{place}.file", "expected the path of the file holding the secret"))
        return None
    if secret_file_path(value) is None:
        problems.append(
            (
                f"{place}.file",
                f"a secret file must be in the secrets directory {settings.CONDUIT_SECRETS_DIR} "
                "(CONDUIT_SECRETS_DIR): write its name there, like github-secret",
            )
        )
        return None
    return SecretRef(file=value)


def _kind(value: Any) -> str:
    return kind_of(value, sequence="a list", mapping="a mapping")
