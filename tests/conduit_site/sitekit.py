"""Shared by the site's tests: the password the console's operator signs in with."""

from __future__ import annotations

PASSWORD = "a-long-console-password-1"
