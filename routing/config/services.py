"""Configuration writes: a document applied as the live generation, or stored as a candidate
beside it, each in one transaction."""

from __future__ import annotations

from django.db import connection, transaction
from django.db.models import Max

from causal.clock import Clock
from routing.config.document import ParsedDocument
from routing.config.validate import parse_document
from routing.models import Binding, Generation, GenerationKind, Receiver, Route, Scope

# --- acceptance -----------------------------------------------------------------------------


CONFIG_LOCK_ID = 0x436F6E66  # "Conf"
_CREATED_BY_MAX = Generation._meta.get_field("created_by").max_length


def config_apply(*, document: str, clock: Clock, created_by: str = "") -> Generation:
    """Validate a YAML configuration document and apply it as the next generation.

    The new applied generation (numbered one past the newest) is live for routing once this
    returns. Raises :class:`~routing.config.problems.ConfigInvalid` listing every problem with its
    place; nothing is stored then.
    """
    parsed = parse_document(document)
    _check_created_by(created_by)
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CONFIG_LOCK_ID])
        newest = Generation.objects.filter(kind=GenerationKind.APPLIED).aggregate(n=Max("number"))["n"]
        return _config_store_in_tx(
            parsed, kind=GenerationKind.APPLIED, number=(newest or 0) + 1, clock=clock, created_by=created_by
        )


def config_candidate(*, document: str, clock: Clock, created_by: str = "") -> Generation:
    """Validate a YAML configuration document and store it as a candidate: never live, for
    trace previews (R37). Raises :class:`~routing.config.problems.ConfigInvalid`; nothing is stored
    then."""
    parsed = parse_document(document)
    _check_created_by(created_by)
    with transaction.atomic():
        return _config_store_in_tx(
            parsed, kind=GenerationKind.CANDIDATE, number=None, clock=clock, created_by=created_by
        )


def _check_created_by(created_by: str) -> None:
    if len(created_by) > _CREATED_BY_MAX:
        raise ValueError(f"created_by is longer than {_CREATED_BY_MAX} characters")


def _config_store_in_tx(
    parsed: ParsedDocument, *, kind: str, number: int | None, clock: Clock, created_by: str
) -> Generation:
    generation = Generation.objects.create(
        kind=kind,
        number=number,
        document=parsed.text,
        digest=parsed.digest,
        created_at=clock(),
        created_by=created_by,
        default_scope=parsed.default_scope,
    )
    bindings: list[Binding] = []
    routes: list[Route] = []
    for declared in parsed.scopes:
        scope = Scope.objects.create(
            generation=generation, path=declared.path, schedules=list(declared.schedules)
        )
        bindings.extend(
            Binding(
                scope=scope,
                name=b.name,
                executor=b.executor,
                settings=b.settings,
                controls=list(b.controls),
                flow=b.flow,
                retry=b.retry,
            )
            for b in declared.bindings
        )
        routes.extend(
            Route(
                scope=scope,
                position=position,
                slot=r.slot,
                handler=r.handler,
                params=r.params,
                binding=r.binding,
                policy=r.policy,
                fallback=r.fallback,
                start=r.start,
                priority=r.priority,
                rate_limit=r.rate_limit,
            )
            for position, r in enumerate(declared.routes)
        )
    Binding.objects.bulk_create(bindings)
    Route.objects.bulk_create(routes)
    Receiver.objects.bulk_create(
        Receiver(
            generation=generation,
            name=r.name,
            kind=r.kind,
            scope=r.scope,
            secret=r.secret.as_dict(),
            settings=dict(r.settings),
        )
        for r in parsed.receivers
    )
    return generation
