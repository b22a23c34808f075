"""The setup session (D5, D8): a candidate configuration beside the live one.

A candidate is a stored document that never routes (``GenerationKind.CANDIDATE``). This
module compares it with the live generation scope by scope (:func:`configuration_diff`),
lays out its effective route tree (:func:`effective_tree`: which scope each slot comes from
and what it overrides), and applies (:func:`candidate_apply`) or discards
(:func:`candidate_discard`) it. It knows nothing of HTTP or argparse.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from django.db import transaction
from django.db.models import Q

from causal.clock import Clock
from routing.config.effective import Configuration, EffectiveScope, effective_scope_as_dict
from routing.config.selectors import live_generation, load_configuration
from routing.config.services import config_apply
from routing.models import Generation, GenerationKind

NOTE_MAX = Generation._meta.get_field("note").max_length


class CandidateNotFound(LookupError):
    """No candidate has this id (it was applied, discarded, or never stored)."""


class CandidateStale(ValueError):
    """The live generation changed since the operator looked at the candidate's diff."""

    def __init__(self, expected: int | None, live: int | None) -> None:
        self.expected = expected
        self.live = live
        super().__init__(
            f"the live configuration is generation {live} now, not {expected} as when this diff was "
            "shown: look at the diff again before applying"
        )


class Change(StrEnum):
    ADDED = "added"  # only the candidate has it
    REMOVED = "removed"  # only the live configuration has it
    CHANGED = "changed"  # both have it, differently
    SAME = "same"  # both have it alike (scopes only: their routes and bindings are left out)


# What a route or binding is compared on; a route's "position" is its place in the scope's
# effective order (the first match wins, so moving a route changes routing).
_ROUTE_FIELDS = (
    "position",
    "scope",
    "overrides",
    "handler",
    "params",
    "binding",
    "policy",
    "fallback",
    "start",
    "priority",
)
_BINDING_FIELDS = ("scope", "executor", "settings", "controls", "flow")


@dataclass(frozen=True, slots=True)
class ItemChange:
    """A route (by slot) or binding (by name) that differs in one scope."""

    name: str
    change: Change
    fields: tuple[str, ...]
    live: Mapping[str, Any] | None
    candidate: Mapping[str, Any] | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "change": str(self.change),
            "fields": list(self.fields),
            "live": self.live,
            "candidate": self.candidate,
        }


@dataclass(frozen=True, slots=True)
class ScopeDiff:
    """One scope's differences in its effective routes and visible bindings."""

    path: str
    change: Change
    routes: tuple[ItemChange, ...]
    bindings: tuple[ItemChange, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "change": str(self.change),
            "routes": [item.as_dict() for item in self.routes],
            "bindings": [item.as_dict() for item in self.bindings],
        }


@dataclass(frozen=True, slots=True)
class ConfigDiff:
    """A candidate against the live generation, scope by scope (scopes in path order)."""

    live: str
    candidate: str
    scopes: tuple[ScopeDiff, ...]

    @property
    def changed(self) -> tuple[ScopeDiff, ...]:
        """The scopes with any difference."""
        return tuple(scope for scope in self.scopes if scope.change != Change.SAME)

    def as_dict(self) -> dict[str, Any]:
        return {
            "live": self.live,
            "candidate": self.candidate,
            "unchanged": not self.changed,
            "scopes": [scope.as_dict() for scope in self.scopes],
        }


def _described(scope: EffectiveScope | None) -> tuple[dict[str, dict], dict[str, dict]]:
    """A scope's effective routes by slot (with their position) and bindings by name."""
    if scope is None:
        return {}, {}
    described = effective_scope_as_dict(scope)
    routes = {
        route["slot"]: {"position": position, **route}
        for position, route in enumerate(described["routes"], start=1)
    }
    bindings = {
        name: {key: binding[key] for key in _BINDING_FIELDS}
        for name, binding in described["bindings"].items()
    }
    return routes, bindings


def _items(
    live: dict[str, dict], candidate: dict[str, dict], fields: tuple[str, ...]
) -> tuple[ItemChange, ...]:
    changes: list[ItemChange] = []
    # Live order first, then what only the candidate has, in its order.
    for name in [*live, *(name for name in candidate if name not in live)]:
        before, after = live.get(name), candidate.get(name)
        if before is None:
            changes.append(ItemChange(name, Change.ADDED, (), None, after))
        elif after is None:
            changes.append(ItemChange(name, Change.REMOVED, (), before, None))
        else:
            differing = tuple(key for key in fields if before.get(key) != after.get(key))
            if differing:
                changes.append(ItemChange(name, Change.CHANGED, differing, before, after))
    return tuple(changes)


def configuration_diff(live: Configuration | None, candidate: Configuration) -> ConfigDiff:
    """How ``candidate`` differs from ``live`` in every scope either declares: routes and
    bindings added, removed or changed (with the fields that changed)."""
    live_scopes = dict(live.scopes) if live is not None else {}
    scopes: list[ScopeDiff] = []
    for path in sorted({*live_scopes, *candidate.scopes}):
        before, after = live_scopes.get(path), candidate.scopes.get(path)
        live_routes, live_bindings = _described(before)
        candidate_routes, candidate_bindings = _described(after)
        routes = _items(live_routes, candidate_routes, _ROUTE_FIELDS)
        bindings = _items(live_bindings, candidate_bindings, _BINDING_FIELDS)
        if before is None:
            change = Change.ADDED
        elif after is None:
            change = Change.REMOVED
        else:
            change = Change.CHANGED if routes or bindings else Change.SAME
        scopes.append(ScopeDiff(path=path, change=change, routes=routes, bindings=bindings))
    return ConfigDiff(
        live=live.label if live is not None else "",
        candidate=candidate.label,
        scopes=tuple(scopes),
    )


def effective_tree(configuration: Configuration) -> list[dict[str, Any]]:
    """Every scope of ``configuration`` in tree order (a parent before its children), with its
    ``depth`` and effective routes and bindings: for each, the scope that declares it and the
    ancestor scope whose route or binding of the same name it overrides (R3)."""
    tree = []
    for path in sorted(configuration.scopes, key=lambda p: p.split("/")):
        described = effective_scope_as_dict(configuration.scopes[path])
        tree.append({"depth": path.count("/"), **described})
    return tree


# --- reading candidates ----------------------------------------------------------------------


def candidate_get(candidate_id: int) -> Generation:
    """The candidate ``candidate_id``, or :class:`CandidateNotFound`."""
    candidate = Generation.objects.filter(kind=GenerationKind.CANDIDATE, pk=candidate_id).first()
    if candidate is None:
        raise CandidateNotFound(f"there is no candidate {candidate_id}")
    return candidate


def candidates_recent(limit: int = 20) -> list[Generation]:
    """The newest candidates, newest first."""
    return list(Generation.objects.filter(kind=GenerationKind.CANDIDATE).order_by("-pk")[:limit])


def candidate_diff(candidate: Generation) -> ConfigDiff:
    """The candidate against the live generation (everything added before the first apply)."""
    live = live_generation()
    return configuration_diff(
        load_configuration(live) if live is not None else None, load_configuration(candidate)
    )


def candidate_label(candidate: Generation) -> str:
    """The generation reference traces take for this candidate (``candidate:12``)."""
    return f"candidate:{candidate.pk}"


# --- applying and discarding -------------------------------------------------------------------


def candidate_apply(
    *, candidate_id: int, clock: Clock, applied_by: str, expected_live: int | None = None
) -> Generation:
    """Apply the candidate's document as the next live generation and remove the candidate.

    ``applied_by`` is recorded on the new generation (who applied it); its note names the
    candidate. With ``expected_live`` (the live generation number the operator's diff was
    made against; 0 before the first apply) a newer live generation refuses the apply with
    :class:`CandidateStale`. Raises :class:`CandidateNotFound`, and
    :class:`~routing.config.problems.ConfigInvalid` when the document no longer validates against the
    handlers and executors registered now; nothing is stored then.
    """
    with transaction.atomic():
        candidate = (
            Generation.objects.select_for_update()
            .filter(kind=GenerationKind.CANDIDATE, pk=candidate_id)
            .first()
        )
        if candidate is None:
            raise CandidateNotFound(f"there is no candidate {candidate_id}")
        if expected_live is not None:
            live = live_generation()
            number = live.number if live is not None else 0
            if number != expected_live:
                raise CandidateStale(expected_live, number)
        generation = config_apply(document=candidate.document, clock=clock, created_by=applied_by)
        note = _applied_note(candidate.pk) + (f": {candidate.note}" if candidate.note else "")
        generation.note = note[:NOTE_MAX]
        generation.save(update_fields=["note"])
        candidate.delete()
    return generation


def candidate_discard(*, candidate_id: int) -> None:
    """Delete the candidate (its scopes, bindings and routes with it); route records name
    generations by label only, and a candidate never routes. Raises :class:`CandidateNotFound`."""
    with transaction.atomic():
        deleted, _ = Generation.objects.filter(kind=GenerationKind.CANDIDATE, pk=candidate_id).delete()
    if not deleted:
        raise CandidateNotFound(f"there is no candidate {candidate_id}")


def _applied_note(candidate_id: int) -> str:
    # How an applied generation's note names the candidate it came from (the one place).
    return f"from candidate {candidate_id}"


def candidate_applied_as(candidate_id: int) -> Generation | None:
    """The generation a candidate became when it was applied (its note names it), or ``None``:
    the candidate's page, gone with it, leads there."""
    note = _applied_note(candidate_id)
    return (
        Generation.objects.filter(kind=GenerationKind.APPLIED)
        .filter(Q(note=note) | Q(note__startswith=f"{note}: "))
        .order_by("-number")
        .only("pk", "number", "kind")
        .first()
    )
