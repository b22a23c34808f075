"""Reads of stored configuration: a generation's effective configuration, the live generation,
a generation by reference, the list of generations."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db.models import Subquery

from causal.selectors import COUNT_CAP, PAGE_SIZE, KeysetPage, ListTotal, count_capped, keyset_page
from infra.kept import KeptPerProcess
from infra.queries import CompiledOnce
from routing.config.problems import GenerationNotFound
from routing.models import Generation, GenerationKind, Scope

if TYPE_CHECKING:
    from routing.config.effective import Configuration

# A stored generation never changes (its scopes, bindings and routes are written once, with it:
# ``routing.config.services``), so its effective configuration is kept per process, by its id and
# digest, for the generations read last: a trace or an impact preview then does not read and
# resolve the same routes again (it showed in trace timings). Configurations are immutable.
CONFIGURATIONS_KEPT: KeptPerProcess[tuple[int, str, str], Configuration] = KeptPerProcess(32)


def load_configuration(generation: Generation) -> Configuration:
    """A stored generation's effective configuration: read (three queries) and resolved once per
    process, then kept while it is among the last 32 generations read."""
    key = (generation.pk, generation.digest, generation.label)
    return CONFIGURATIONS_KEPT.get(key, lambda: _read_configuration(generation))


def _read_configuration(generation: Generation) -> Configuration:
    # Imported when a generation is resolved, not with this module: the live generation's
    # readers (``events get``, the console's pages) do not load the resolution and its types.
    from routing.config.document import ParsedBinding, ParsedRoute, ParsedScope
    from routing.config.effective import build_configuration

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
                    flow=b.flow or {},
                    retry=b.retry,
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
                    priority=r.priority,
                    rate_limit=r.rate_limit,
                )
                for r in sorted(row.routes.all(), key=lambda r: r.position)
            ),
            schedules=tuple(row.schedules or ()),
        )
        for row in rows
    ]
    return build_configuration(
        declared, generation_id=generation.pk, label=generation.label, default_scope=generation.default_scope
    )


def live_generation() -> Generation | None:
    """The newest applied generation (the live one), or ``None`` before the first apply."""
    return Generation.objects.filter(kind=GenerationKind.APPLIED).order_by("-number").first()


def live_default_scope() -> str | None:
    """The live generation's ``default_scope`` (what an Event offered without a scope and
    without its sender's default takes), or ``None`` when it names none."""
    rows = _LIVE_DEFAULT_SCOPE.rows()
    return (rows[0][0] or None) if rows else None


_LIVE_DEFAULT_SCOPE = CompiledOnce(
    lambda: (
        Generation.objects.filter(kind=GenerationKind.APPLIED)
        .order_by("-number")
        .values_list("default_scope")[:1]
    )
)


def live_generation_id() -> int | None:
    """The id of :func:`live_generation`: what a route loop checks on every pass, built and
    compiled once."""
    rows = _LIVE_GENERATION_ID.rows()
    return rows[0][0] if rows else None


_LIVE_GENERATION_ID = CompiledOnce(
    lambda: Generation.objects.filter(kind=GenerationKind.APPLIED).order_by("-number").values_list("pk")[:1]
)


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


@dataclass(frozen=True, slots=True)
class BindingOption:
    """A binding to offer where one is typed: its name and where or what it is."""

    name: str
    label: str


def live_binding_options(scope: str = "") -> list[BindingOption]:
    """The live configuration's bindings, by name: those visible in ``scope`` (with their
    executor) or, without one, every binding with the scopes that declare or inherit it. Empty
    before the first apply or for a scope the live configuration lacks."""
    live = live_generation()
    if live is None:
        return []
    configuration = load_configuration(live)
    if scope:
        effective = configuration.scope(scope)
        if effective is None:
            return []
        return [
            BindingOption(
                name,
                (binding.executor or "queue-only")
                + (f", from {binding.scope}" if binding.scope != scope else ""),
            )
            for name, binding in sorted(effective.bindings.items())
        ]
    scopes: dict[str, list[str]] = {}
    for path, effective in sorted(configuration.scopes.items()):
        for name in effective.bindings:
            scopes.setdefault(name, []).append(path)
    return [BindingOption(name, "in " + ", ".join(paths)) for name, paths in sorted(scopes.items())]


def live_scope_paths() -> list[str]:
    """The scopes of the live configuration, sorted (none before the first apply)."""
    live = live_generation()
    return sorted(load_configuration(live).scopes) if live is not None else []


# --- the list of generations ------------------------------------------------------------------


def live_scope_rows() -> list[str]:
    """The scope paths of the live generation, sorted, read from its scope rows (one query; its
    configuration is not loaded, unlike :func:`live_scope_paths`)."""
    live = Generation.objects.filter(kind=GenerationKind.APPLIED).order_by("-number").values("pk")[:1]
    return list(
        Scope.objects.filter(generation_id=Subquery(live)).order_by("path").values_list("path", flat=True)
    )


def generations_page(
    *, before: int | None = None, limit: int = PAGE_SIZE, oldest: bool = False
) -> KeysetPage:
    """Configuration generations, applied and candidates, newest first (by id) below
    ``before``, or oldest first above it (``oldest``). The documents themselves are not read:
    a list never loads every document."""
    queryset = Generation.objects.defer("document")
    return keyset_page(queryset, key="id", cursor=before, limit=limit, descending=not oldest)


def generations_total(*, cap: int = COUNT_CAP) -> ListTotal:
    """How many configuration generations there are, counted up to ``cap`` (one query)."""
    return count_capped(Generation.objects.all(), cap=cap)


def generation_shown(*, number: int | None = None, candidate: int | None = None) -> Generation:
    """The applied generation ``number`` or the candidate ``candidate`` (by the names people
    read: "Generation 2", "Candidate 3"), or ``Generation.DoesNotExist``."""
    if number is not None:
        return Generation.objects.get(kind=GenerationKind.APPLIED, number=number)
    return Generation.objects.get(kind=GenerationKind.CANDIDATE, pk=candidate)
