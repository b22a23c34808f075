"""Pauses: an operator stops attempts from starting in a scope, of a binding, through a route,
or stops a schedule from firing, with who, why and an optional ``until``.

Routing goes on while anything is paused: input queues for the Work it holds, and no attempt of
that Work starts (:func:`paused_work_q`, in the claim). A paused route's Events stay unrouted,
held in acceptance order, until it resumes (the router asks :func:`route_holds`); a paused
schedule skips its fire times. A pause ends when it is resumed or its ``until`` passes. Each
write is one transaction; the reads are one query.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, connection, transaction
from django.db.models import Q

from causal.clock import Clock
from infra.live import work_changed_on_commit
from infra.queries import CompiledOnce
from worklife.errors import WorkError
from worklife.models import Pause, PauseKind, Work, WorkStatus

_REASON_MAX = Pause._meta.get_field("reason").max_length
_BY_MAX = Pause._meta.get_field("paused_by").max_length


class PauseError(WorkError):
    """A pause or a resume is refused; the message says why."""


@dataclass(frozen=True, slots=True)
class PauseTarget:
    """What a pause holds: ``kind`` (scope, binding, route, schedule), the scope, and the
    binding's name, the route's slot or the schedule's name ("" for a scope)."""

    kind: str
    scope: str
    name: str = ""

    def __str__(self) -> str:
        if self.kind == PauseKind.SCOPE:
            return f"scope {self.scope}"
        return f"{self.kind} {self.name!r} in {self.scope}"


def pause_line(pause: Pause) -> str:
    """The one line every page shows: ``paused by alice at 10:05: incident 42 (until 11:00)``."""
    line = f"paused by {pause.paused_by or 'an operator'} at {pause.created_at:%Y-%m-%d %H:%M}"
    if pause.reason:
        line += f": {pause.reason}"
    if pause.until is not None:
        line += f" (until {pause.until:%Y-%m-%d %H:%M})"
    return line


def target_of(pause: Pause) -> PauseTarget:
    return PauseTarget(pause.kind, pause.scope, pause.name)


# --- writes ------------------------------------------------------------------------------------


def pause_create(
    *, target: PauseTarget, paused_by: str, reason: str, until: datetime | None, clock: Clock
) -> Pause:
    """Pause ``target`` from now (until ``until``, or until it is resumed). Refused when it is
    paused already, when ``until`` is not in the future, or the reason or name is too long."""
    now = clock()
    if target.kind not in PauseKind.values:
        raise PauseError(f"cannot pause a {target.kind!r}: pause a scope, a binding, a route or a schedule")
    if target.kind != PauseKind.SCOPE and not target.name:
        raise PauseError(f"name the {target.kind} to pause")
    if until is not None and until <= now:
        raise PauseError(f"until {until:%Y-%m-%d %H:%M:%S} is not in the future")
    if len(reason) > _REASON_MAX:
        raise PauseError(f"the reason is longer than {_REASON_MAX} characters")
    if len(paused_by) > _BY_MAX:
        raise PauseError(f"the name is longer than {_BY_MAX} characters")
    try:
        with transaction.atomic():
            # A pause whose until passed is over: it ends here, so the new one can open.
            Pause.objects.filter(
                kind=target.kind, scope=target.scope, name=target.name, ended_at__isnull=True, until__lte=now
            ).update(ended_at=now, ended_by="(expired)")
            pause = Pause.objects.create(
                kind=target.kind,
                scope=target.scope,
                name=target.name,
                paused_by=paused_by,
                reason=reason,
                created_at=now,
                until=until,
            )
            work_changed_on_commit(held_work_ids(target))
    except IntegrityError:
        raise PauseError(f"{target} is paused already") from None
    return pause


def pause_end(*, target: PauseTarget, ended_by: str, clock: Clock) -> Pause:
    """Resume ``target``: its open pause ends now. Refused when it is not paused."""
    now = clock()
    with transaction.atomic():
        pause = (
            Pause.objects.select_for_update()
            .filter(kind=target.kind, scope=target.scope, name=target.name, ended_at__isnull=True)
            .first()
        )
        if pause is None or not pause.is_active(now):
            raise PauseError(f"{target} is not paused")
        pause.ended_at, pause.ended_by = now, ended_by[:_BY_MAX]
        pause.save(update_fields=["ended_at", "ended_by"])
        work_changed_on_commit(held_work_ids(target))
    return pause


# --- reads -------------------------------------------------------------------------------------


def active_pauses(now: datetime) -> list[Pause]:
    """The pauses in force at ``now``, oldest first (one query; there are few)."""
    return [Pause.from_db(connection.alias, _PAUSE_COLUMNS, row) for row in _ACTIVE_PAUSES.rows([now])]


# Every column of a pause, in the model's order (Pause.from_db takes them so).
_PAUSE_COLUMNS = tuple(field.attname for field in Pause._meta.concrete_fields)
# Read in every route commit: built and compiled once (CompiledOnce; ``now`` a one-value list).
_ACTIVE_PAUSES = CompiledOnce(
    lambda now: (
        Pause.objects.filter(ended_at__isnull=True)
        .filter(Q(until__isnull=True) | Q(until__gt=now[0]))
        .order_by("created_at", "pk")
        .values_list(*_PAUSE_COLUMNS)
    )
)


def _in_scope(scope: str) -> Q:
    return Q(scope=scope) | Q(scope__startswith=f"{scope}/")


def _binding_is(name: str) -> Q:
    # The binding a Work's next attempt runs on (worklife.views.addressed_binding).
    return Q(retry_binding=name) | Q(retry_binding="", binding=name)


def paused_work_q(pauses: Iterable[Pause]) -> Q | None:
    """The Work the scope and binding pauses hold, as a query (``None``: none held)."""
    held = Q()
    any_held = False
    for pause in pauses:
        if pause.kind == PauseKind.SCOPE:
            held |= _in_scope(pause.scope)
        elif pause.kind == PauseKind.BINDING:
            held |= _in_scope(pause.scope) & _binding_is(pause.name)
        else:
            continue
        any_held = True
    return held if any_held else None


def held_work_ids(target: PauseTarget, *, limit: int = 500) -> list[int]:
    """Ready Work a scope or binding pause holds (for live updates), at most ``limit``."""
    if target.kind == PauseKind.SCOPE:
        where = _in_scope(target.scope)
    elif target.kind == PauseKind.BINDING:
        where = _in_scope(target.scope) & _binding_is(target.name)
    else:
        return []
    return list(Work.objects.filter(where, status=WorkStatus.READY).values_list("pk", flat=True)[:limit])


def pause_holding(*, scope: str, binding: str, pauses: Sequence[Pause]) -> Pause | None:
    """The pause that holds Work of ``scope`` whose next attempt runs on ``binding``, or ``None``
    (a scope's pause before a binding's, the nearest scope first)."""
    best: Pause | None = None
    for pause in pauses:
        inside = scope == pause.scope or scope.startswith(f"{pause.scope}/")
        if not inside:
            continue
        if pause.kind == PauseKind.SCOPE or (pause.kind == PauseKind.BINDING and pause.name == binding):
            if best is None or len(pause.scope) > len(best.scope):
                best = pause
    return best


def hold_line(pause: Pause) -> str:
    """Why a Work does not run, held by ``pause``: ``held: binding 'triage' in acme is paused by
    alice at 10:05: incident 42``."""
    return f"held: {target_of(pause)} is {pause_line(pause)}"


def route_holds(pauses: Iterable[Pause]) -> Mapping[tuple[str, str], str]:
    """Paused routes, by (declaring scope, slot): the line their held Events record."""
    return {
        (pause.scope, pause.name): f"{route_hold_prefix(pause.scope, pause.name)}{pause_line(pause)}"
        for pause in pauses
        if pause.kind == PauseKind.ROUTE
    }


# How every Event a paused route holds begins its unrouted reason.
ROUTE_HOLD_PREFIX = "held: route "


def route_hold_prefix(scope: str, slot: str) -> str:
    """How the Events a paused route holds begin their unrouted reason (resume releases them)."""
    return f"{ROUTE_HOLD_PREFIX}{slot!r} in {scope} is "
