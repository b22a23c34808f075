"""A delivery, why one is refused, reading a receiver's secret, and the constant-time checks every
kind builds its verification from.

A delivery is verified before anything in its body is read: the signature covers the raw bytes
as they came. Every comparison of something secret-derived goes through :func:`same`
(``hmac.compare_digest``), so how long a wrong guess takes says nothing about the right one. A
refusal's message says what is wrong and what to configure, never a secret nor a value derived
from one.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from routing.config.receivers import ALGORITHMS, SecretRef

# The largest secret file read (a signing secret is tens of bytes; a file much larger than this
# is not one).
MAX_SECRET_FILE_BYTES = 64 * 1024
REALM = "conduit"
# What a client is told when the secret cannot be read (operators get why: Refused.detail).
SECRET_UNAVAILABLE_MESSAGE = (
    "the receiver is not ready: the server cannot read its secret (its operators can see why)"
)


class Refusal(StrEnum):
    """Why a delivery was not accepted; each is counted per receiver."""

    SIGNATURE_MISSING = "signature_missing"  # no signature or credentials where the sender puts them
    SIGNATURE_INVALID = "signature_invalid"  # a signature or credentials that do not match the secret
    TIMESTAMP_STALE = "timestamp_stale"  # a signed timestamp outside the replay window (Slack)
    SECRET_UNAVAILABLE = "secret_unavailable"  # the secret's variable or file is missing here
    EVENT_TOO_LARGE = "event_too_large"  # the body is over CONDUIT_MAX_EVENT_BYTES
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"  # a Content-Type the sender never uses
    INVALID_PAYLOAD = "invalid_payload"  # verified, but the body or headers cannot be mapped
    INVALID_EVENT = "invalid_event"  # mapped, but acceptance refused the Event (size, scope…)
    CONFLICTING_DUPLICATE = "conflicting_duplicate"  # a delivery id seen before with another body


# The refusals that say the sender could not prove who it is.
SIGNATURE_FAILURES = frozenset(
    {Refusal.SIGNATURE_MISSING, Refusal.SIGNATURE_INVALID, Refusal.TIMESTAMP_STALE}
)


class Refused(Exception):
    """A delivery is refused; nothing of it is stored. ``message`` is the answer any client gets;
    ``detail`` is what operators get (the log, the Receivers page, the CLI), when it says more
    than a stranger may know (where a secret is); ``field`` names a header or a body field at
    fault, when one is; ``challenge`` is the HTTP authentication scheme the sender should use
    (``Bearer realm="conduit"``), for a receiver checking the Authorization header."""

    def __init__(
        self,
        refusal: Refusal,
        message: str,
        *,
        field: str | None = None,
        challenge: str = "",
        detail: str = "",
    ) -> None:
        super().__init__(message)
        self.refusal = refusal
        self.message = message
        self.detail = detail or message
        self.field = field
        self.challenge = challenge

    def details(self) -> dict[str, Any]:
        """The refusal as a JSON-ready dict (``error``, ``message``, ``field``)."""
        return {"error": str(self.refusal), "message": self.message, "field": self.field}


@dataclass(frozen=True, slots=True)
class Delivery:
    """One request a sender made: the raw body and the headers (names in lower case)."""

    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, body: bytes, headers: Iterable[tuple[str, str]] | Mapping[str, str]) -> Delivery:
        """A delivery from a body and headers of any case (the last of a repeated name wins)."""
        pairs = headers.items() if isinstance(headers, Mapping) else headers
        return cls(body=body, headers={name.lower(): value for name, value in pairs})

    def header(self, name: str) -> str | None:
        """The value of the header ``name`` (any case), or ``None``."""
        return self.headers.get(name.lower())

    @property
    def media_type(self) -> str:
        """The Content-Type without its parameters, in lower case (``""`` when absent)."""
        return (self.header("content-type") or "").split(";", 1)[0].strip().lower()


# --- secrets -----------------------------------------------------------------------------------


def secret_read(ref: SecretRef) -> bytes:
    """The secret ``ref`` names, read now (an environment variable of this process, or a file's
    content without its final line break). Raises :class:`Refused` (``secret_unavailable``)."""
    value, why = _secret(ref)
    if why:
        # Where the secret lives is for operators, not for whoever posts to the receiver.
        raise Refused(
            Refusal.SECRET_UNAVAILABLE,
            SECRET_UNAVAILABLE_MESSAGE,
            detail=f"the receiver's secret is unavailable to the server: {why}",
        )
    return value


def secret_status(ref: SecretRef) -> str:
    """``""`` when this process can read the secret now, else why not (for the console and the
    CLI: the server and a shell may see different environments)."""
    return _secret(ref)[1]


def _secret(ref: SecretRef) -> tuple[bytes, str]:
    if ref.env:
        value = os.environ.get(ref.env, "")
        return value.encode("utf-8"), "" if value else f"the environment variable {ref.env} is not set"
    path = ref.path
    if path is None:
        # A configuration applied before CONDUIT_SECRETS_DIR changed: never opened.
        return b"", f"the file {ref.file} is outside the secrets directory (CONDUIT_SECRETS_DIR)"
    try:
        with path.open("rb") as handle:
            content = handle.read(MAX_SECRET_FILE_BYTES + 1)
    except OSError as exc:
        return b"", f"cannot read the file {ref.file}: {exc.strerror}"
    content = content.rstrip(b"\r\n")
    if not content or len(content) > MAX_SECRET_FILE_BYTES:
        return b"", f"the file {ref.file} is empty or too large to hold a secret"
    return content, ""


# --- checks ------------------------------------------------------------------------------------


def same(expected: bytes, given: str | bytes) -> bool:
    """Whether ``given`` equals ``expected``, compared in constant time."""
    if isinstance(given, str):
        given = given.encode("utf-8", "surrogateescape")
    return hmac.compare_digest(expected, given)


def hmac_digest(secret: bytes, message: bytes, algorithm: str = "sha256") -> bytes:
    """The HMAC of ``message`` keyed with ``secret`` (raw bytes)."""
    return hmac.new(secret, message, ALGORITHMS[algorithm]).digest()


def encoded(digest: bytes, encoding: str) -> str:
    """``digest`` as the sender writes it: lower-case hex or standard base64."""
    return digest.hex() if encoding == "hex" else base64.b64encode(digest).decode("ascii")


def check_hmac(
    delivery: Delivery,
    secret: bytes,
    *,
    header: str,
    algorithm: str = "sha256",
    encoding: str = "hex",
    prefix: str = "",
    message: bytes | None = None,
    how: str = "",
) -> None:
    """Check that the header ``header`` holds ``prefix`` and the HMAC of ``message`` (by
    default the raw body) keyed with ``secret``. Raises :class:`Refused`; ``how`` is added to
    the message of a missing header (what to set on the sender's side)."""
    given = delivery.header(header)
    if not given:
        raise Refused(
            Refusal.SIGNATURE_MISSING,
            f"the {header} header is missing{': ' + how if how else ''}",
            field=header,
        )
    digest = hmac_digest(secret, delivery.body if message is None else message, algorithm)
    value = given.strip()
    if encoding == "hex" and value[: len(prefix)] == prefix:
        value = prefix + value[len(prefix) :].lower()  # some senders write upper-case hex
    if not same((prefix + encoded(digest, encoding)).encode("ascii"), value):
        raise Refused(
            Refusal.SIGNATURE_INVALID,
            f"the {header} signature does not match the body: the secret differs from the sender's, or "
            "the body was changed on the way",
            field=header,
        )


def check_authorization(
    delivery: Delivery, secret: bytes, *, scheme: str = "bearer", username: str = ""
) -> None:
    """Check ``Authorization: Bearer <secret>`` or ``Basic`` with ``username`` and the secret as
    its password. Raises :class:`Refused`."""
    given = delivery.header("authorization")
    shown = "Bearer" if scheme == "bearer" else "Basic"
    challenge = f'{shown} realm="{REALM}"'
    if not given:
        raise Refused(
            Refusal.SIGNATURE_MISSING,
            f"the Authorization header is missing: the sender must send 'Authorization: {shown} …'",
            field="Authorization",
            challenge=challenge,
        )
    sent_scheme, _, credentials = given.strip().partition(" ")
    if sent_scheme.lower() != scheme:
        raise Refused(
            Refusal.SIGNATURE_INVALID,
            f"the Authorization header must use the {shown} scheme for this receiver",
            field="Authorization",
            challenge=challenge,
        )
    credentials = credentials.strip()
    if scheme == "bearer":
        matches = same(secret, credentials)
    else:
        try:
            decoded = base64.b64decode(credentials, validate=True)
        except (binascii.Error, ValueError):
            decoded = b""
        user, _, password = decoded.partition(b":")
        # Both compared, always: no early answer for a right user name.
        matches = same(username.encode("utf-8"), user) & same(secret, password)
    if not matches:
        raise Refused(
            Refusal.SIGNATURE_INVALID,
            "the Authorization header's credentials do not match the receiver's secret",
            field="Authorization",
            challenge=challenge,
        )
