"""What every kind of receiver is made of (:class:`Kind`): what its declaration may say (the
configuration's :class:`~routing.config.receivers.DeclaredKind`), how it verifies a delivery and
how it maps one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from routing.config.receivers import DeclaredKind, SettingsCheck

# Verifies a delivery with the secret at a time; raises routing.receivers.verify.Refused. With
# ``replay_window=False`` (a saved delivery tried again) a stale timestamp is a note, not a refusal.
Verify = Callable[..., tuple[str, ...]]
# Maps a verified delivery (spec, delivery) to a routing.receivers.mapping.Mapped; raises
# routing.receivers.verify.Refused.
Map = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class Kind:
    """A kind of receiver: what its declaration may say (``declared``: the keys it takes beyond
    ``kind``, ``scope``, ``secret``, ``type`` and ``subject``, how it checks them, the
    attributes it may template), how it verifies a delivery and maps it.

    ``verify(spec, delivery, secret, *, now, replay_window=True)`` returns notes (a stale
    timestamp let through when ``replay_window`` is off); ``map(spec, delivery)`` returns the
    :class:`~routing.receivers.mapping.Mapped` Events or the reply. ``repeats_may_differ``: the
    sender sends an Event again with details changed (Alertmanager's repeated notifications), so
    an id accepted before is a duplicate whatever its body, not a conflict."""

    declared: DeclaredKind
    summary: str
    verify: Verify
    map: Map
    repeats_may_differ: bool = False

    @property
    def name(self) -> str:
        """The kind's name, as a declaration's ``kind`` names it."""
        return self.declared.name

    @property
    def keys(self) -> tuple[str, ...]:
        """The keys its declaration takes of its own."""
        return self.declared.keys

    @property
    def check(self) -> SettingsCheck:
        """The check of those keys."""
        return self.declared.check

    @property
    def templates(self) -> tuple[str, ...]:
        """The attributes its declaration may set with a template."""
        return self.declared.templates
