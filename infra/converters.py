"""URL path converters: ids and seqs that a database column can hold.

Django's ``<int:…>`` takes any number of digits, and a number past a 64-bit column overflows the
database driver (a 500). ``<id:…>`` takes 1 to 2**63 - 1 only; any other number does not match,
so the URL is a 404 like any unknown one.
"""

from __future__ import annotations

from django.urls import register_converter
from django.urls.converters import get_converters

# The largest id or seq a database column holds (a signed 64-bit integer).
MAX_ID = 2**63 - 1


class IdConverter:
    """A positive 64-bit integer: an Event's seq, a Work's id."""

    regex = "[0-9]{1,19}"

    def to_python(self, value: str) -> int:
        number = int(value)
        if not 1 <= number <= MAX_ID:
            raise ValueError(f"{value} is not an id")
        return number

    def to_url(self, value: int) -> str:
        return str(int(value))


def register_id_converter() -> None:
    """Make ``<id:…>`` available to URL patterns (once per process, however often called)."""
    if "id" not in get_converters():
        register_converter(IdConverter, "id")
