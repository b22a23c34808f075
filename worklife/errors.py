"""Why a write on Work was refused: the errors every worklife write raises.

Each carries a message saying why; the callers above (the controls, the API, the console)
map them to their own refusals.
"""

from __future__ import annotations


class WorkError(Exception):
    """A Work operation was refused; the message says why."""


class StaleLease(WorkError):
    """The attempt is not the Work's current one, or its lease epoch moved on."""


class WorkTerminal(WorkError):
    """The Work is completed or cancelled: its records are immutable (R49)."""
