"""API token secrets: how they are made, hashed and recognised. Pure functions, no database.

A token reads ``cdt_<8 hex>_<43 url-safe characters>``. The first 12 characters
(``cdt_<8 hex>``) are its *prefix*: stored in clear so that operators can name a token
(``api_token revoke cdt_1a2b3c4d``) and recognise it in lists. The whole token is stored
only as its SHA-256 digest; its 256 random bits make a salt unnecessary, and the digest is
looked up through a unique index, so no comparison of secrets happens in Python.
"""

from __future__ import annotations

import hashlib
import re
import secrets

TOKEN_TAG = "cdt"
PREFIX_LENGTH = 12
TOKEN_PATTERN = re.compile(r"^cdt_[0-9a-f]{8}_[A-Za-z0-9_-]{43}$")


def token_generate() -> tuple[str, str]:
    """A new random token: ``(prefix, secret)`` where ``secret`` is the whole token."""
    prefix = f"{TOKEN_TAG}_{secrets.token_hex(4)}"
    secret = f"{prefix}_{secrets.token_urlsafe(32)}"
    return prefix, secret


def token_digest(secret: str) -> str:
    """The SHA-256 hex digest stored for ``secret``."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def token_well_formed(secret: str) -> bool:
    """Whether ``secret`` has the shape of a token (checked before any database lookup)."""
    return bool(TOKEN_PATTERN.match(secret))


def token_prefix(secret: str) -> str:
    """The public prefix of a token."""
    return secret[:PREFIX_LENGTH]
