"""A count with its noun in the right number ("1 Event", "2 Events", "10,000+ Events"): one rule
for every page, command and message."""

from __future__ import annotations

from typing import Any

# Nouns a count does not change ("1 Work", "3 Work").
_SAME = frozenset({"Work"})


def noun_for(count: Any, noun: str) -> str:
    """``noun`` in the number ``count`` asks for. ``noun`` is ``"singular,plural"`` or a plural
    (``"Events"``, ``"dead letters"``) whose singular drops its last ``s``; ``count`` is a number
    or a list total (its ``count``, shown as ``10,000+`` past a cap, is plural)."""
    singular, sep, plural = noun.partition(",")
    if not sep:
        plural = noun
        singular = noun[:-1] if noun.endswith("s") and noun not in _SAME else noun
    one = getattr(count, "count", count) == 1 and not getattr(count, "capped", False)
    return singular if one else plural


def counted(count: Any, noun: str) -> str:
    """``count`` followed by ``noun`` in the right number: ``counted(1, "Events")`` is "1 Event"."""
    shown = f"{count:,}" if isinstance(count, int) else str(count)
    return f"{shown} {noun_for(count, noun)}"
