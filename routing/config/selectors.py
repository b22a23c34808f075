"""Reads of stored configuration: a generation's effective configuration, the live generation,
a generation by reference."""

from __future__ import annotations

from types import MappingProxyType

from routing.config.document import ParsedBinding, ParsedRoute, ParsedScope
from routing.config.effective import Configuration, _resolve
from routing.config.problems import GenerationNotFound
from routing.models import Generation, GenerationKind, Scope


def load_configuration(generation: Generation) -> Configuration:
    """Read a stored generation into its effective configuration (three queries)."""
    rows = Scope.objects.filter(generation=generation).prefetch_related("bindings", "routes")
    declared = [
        ParsedScope(
            path=row.path,
            bindings=tuple(
                ParsedBinding(
                    name=b.name,
                    executor=b.executor,
                    settings=b.settings or {},
                    controls=tuple(b.controls or ()),
                    capabilities=frozenset(),
                )
                for b in row.bindings.all()
            ),
            routes=tuple(
                ParsedRoute(
                    slot=r.slot,
                    handler=r.handler,
                    params=r.params or {},
                    binding=r.binding,
                    policy=r.policy,
                    fallback=r.fallback,
                    start=r.start,
                )
                for r in sorted(row.routes.all(), key=lambda r: r.position)
            ),
        )
        for row in rows
    ]
    return Configuration(
        generation_id=generation.pk, label=generation.label, scopes=MappingProxyType(_resolve(declared))
    )


def live_generation() -> Generation | None:
    """The newest applied generation (the live one), or ``None`` before the first apply."""
    return Generation.objects.filter(kind=GenerationKind.APPLIED).order_by("-number").first()


def find_generation(reference: str | None = None) -> Generation:
    """The generation ``reference`` names: ``None`` for the live one, ``"3"`` for applied
    generation 3, ``"candidate:12"`` for candidate 12. Raises :class:`GenerationNotFound`."""
    if reference is None or reference == "":
        generation = live_generation()
        if generation is None:
            raise GenerationNotFound("no configuration has been applied yet")
        return generation
    kind, sep, ident = reference.partition(":")
    if sep and kind == "candidate" and ident.isdigit():
        generation = Generation.objects.filter(kind=GenerationKind.CANDIDATE, pk=int(ident)).first()
        if generation is None:
            raise GenerationNotFound(f"there is no candidate {ident}")
        return generation
    if not sep and reference.isdigit():
        generation = Generation.objects.filter(kind=GenerationKind.APPLIED, number=int(reference)).first()
        if generation is None:
            raise GenerationNotFound(f"there is no applied generation {reference}")
        return generation
    raise GenerationNotFound(f"{reference!r} is not a generation number or candidate:ID")
