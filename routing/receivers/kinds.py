"""The kinds of receivers by name, and the validation of a declaration in the document::

receivers:
  github:                                  # the name: POST /hooks/github
    kind: github                           # github, slack, alertmanager, cloudevents, generic-hmac
    scope: acme/web                        # the scope its Events go to
    secret: {env: CONDUIT_GITHUB_SECRET}   # or {file: /etc/conduit/github-secret}
    subject: "{data.repository.full_name}" # optional templates: type, subject
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from routing.acceptance.envelopes import kind_of
from routing.receivers import alertmanager, cloudevents, generic_hmac, github, slack
from routing.receivers.mapping import parse_template
from routing.receivers.spec import MAX_RECEIVER_NAME, RECEIVER_NAME, Kind, ReceiverSpec
from routing.receivers.verify import ENV_NAME, SecretRef

KINDS: Mapping[str, Kind] = MappingProxyType(
    {
        kind.name: kind
        for kind in (github.KIND, slack.KIND, alertmanager.KIND, cloudevents.KIND, generic_hmac.KIND)
    }
)
COMMON_KEYS: tuple[str, ...] = ("kind", "scope", "secret")
SECRET_HOW = "write where the secret is, never the secret: secret: {env: VARIABLE} or secret: {file: PATH}"


def kind_get(name: str) -> Kind:
    """The kind called ``name``; raises ``KeyError``."""
    return KINDS[name]


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
    kind = KINDS.get(kind_name) if isinstance(kind_name, str) else None
    if kind_name is None:
        problems.append((f"{place}.kind", f"required: one of {', '.join(KINDS)}"))
    elif kind is None:
        problems.append(
            (f"{place}.kind", f"unknown kind {kind_name!r} (expected one of: {', '.join(KINDS)})")
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
    return SecretRef(file=value)


def _kind(value: Any) -> str:
    return kind_of(value, sequence="a list", mapping="a mapping")
