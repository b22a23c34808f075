"""A declared receiver (:class:`ReceiverSpec`) and what every kind is made of (:class:`Kind`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from routing.receivers.verify import SecretRef

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


# Checks a declaration's settings: (key, message) for each problem.
SettingsCheck = Callable[[Mapping[str, Any]], list[tuple[str, str]]]
# Verifies a delivery with the secret at a time; raises routing.receivers.verify.Refused. With
# ``replay_window=False`` (a saved delivery tried again) a stale timestamp is a note, not a refusal.
Verify = Callable[..., tuple[str, ...]]
# Maps a verified delivery (spec, delivery) to a routing.receivers.mapping.Mapped; raises
# routing.receivers.verify.Refused. (Typed loosely: the parsed document imports this module, and
# the mapping reaches the serializers, which reach the document again.)
Map = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class Kind:
    """A kind of receiver: the keys its declaration takes beyond ``kind``, ``scope``,
    ``secret``, ``type`` and ``subject``, how it checks them, verifies a delivery and maps it.

    ``verify(spec, delivery, secret, *, now, replay_window=True)`` returns notes (a stale
    timestamp let through when ``replay_window`` is off); ``map(spec, delivery)`` returns the
    :class:`~routing.receivers.mapping.Mapped` Events or the reply. ``templates`` are the
    attributes a declaration may set with a template. ``repeats_may_differ``: the sender sends
    an Event again with details changed (Alertmanager's repeated notifications), so an id
    accepted before is a duplicate whatever its body, not a conflict."""

    name: str
    summary: str
    keys: tuple[str, ...]
    check: SettingsCheck
    verify: Verify
    map: Map
    templates: tuple[str, ...] = ("type", "subject")
    repeats_may_differ: bool = False


def no_settings(settings: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The check of a kind with no keys of its own."""
    return []
