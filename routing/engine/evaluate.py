"""Asking a scope's routes about one Event: the handler half of routing and of trace.

Evaluation reads nothing from storage and writes nothing: it needs only the Event's detached
snapshot, the effective scope and the handler instances, so it runs outside any transaction
and on any thread (R5). The first match wins, including a drop route; a handler error stops
the evaluation (R6).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping
from time import monotonic
from typing import TYPE_CHECKING, Any

from django.db import InterfaceError, OperationalError

from infra.frozen import frozen
from routing.errors import RouteError, RouteErrorCode
from routing.extension import EventSnapshot, Invalid, RouteDecision, Unavailable, one_line

logger = logging.getLogger("conduit.routing")

if TYPE_CHECKING:
    from routing.config.effective import EffectiveRoute, EffectiveScope
    from routing.engine.handler_pool import Steps


class Verdict:
    MATCH = "match"
    SKIP = "skip"
    NOT_REACHED = "not_reached"
    BYPASSED = "bypassed"
    ERROR = "error"


@frozen
class RouteVerdict:
    """What one route said about the Event (trace shows every one, R40)."""

    route: str
    scope: str
    verdict: str
    reason: str = ""


@frozen
class Evaluation:
    """The routes' answer for one Event: the first matching route and its decision, or the
    refusals, or the error that stopped evaluation."""

    verdicts: tuple[RouteVerdict, ...]
    route: EffectiveRoute | None = None
    decision: RouteDecision | None = None
    error: RouteError | None = None

    @property
    def matched(self) -> bool:
        return self.route is not None and self.error is None

    @property
    def refusals(self) -> list[dict[str, str]]:
        """Each route that declined, in route order, its reason cut to one line (R28)."""
        return [{"route": v.route, "reason": v.reason} for v in self.verdicts if v.verdict == Verdict.SKIP]

    def bypassed(self, why: str) -> Evaluation:
        """The same routes, none consulted (terminal Work, a won wait), each saying ``why``."""
        return Evaluation(tuple(RouteVerdict(v.route, v.scope, Verdict.BYPASSED, why) for v in self.verdicts))


SNAPSHOT_FIELDS = (
    "seq",
    "envelope_id",
    "source",
    "type",
    "subject",
    "scope",
    "time",
    "data",
    "correlation",
    "work_id",
    "execution_id",
    "parent_id",
    "depth",
)


def snapshots(queryset) -> list[EventSnapshot]:
    """Detached snapshots of the Events a queryset selects, in its order, without building
    model instances (the router's hot path)."""
    return snapshots_of(queryset.values_list(*SNAPSHOT_FIELDS))


def snapshots_of(
    rows: Iterable[tuple], make: Callable[..., EventSnapshot] = EventSnapshot
) -> list[EventSnapshot]:
    """Detached snapshots of Event rows holding :data:`SNAPSHOT_FIELDS`, in that order (each
    made by ``make``, given the snapshot's fields in order)."""
    from routing.extension import freeze

    # Positional, in EventSnapshot's field order (seq, id, source, type, subject, scope, time,
    # data, correlation, work_id, execution_id, causation_id, depth): a window builds hundreds,
    # and matching thirteen keywords cost about 0.4 µs a snapshot.
    return [
        make(
            seq,
            envelope_id,
            source,
            type_,
            subject,
            scope,
            time,
            freeze(data),
            tuple(correlation or ()),
            work_id,
            execution_id,
            parent_id,
            depth,
        )
        for (
            seq,
            envelope_id,
            source,
            type_,
            subject,
            scope,
            time,
            data,
            correlation,
            work_id,
            execution_id,
            parent_id,
            depth,
        ) in rows
    ]


class SnapshotRead:
    """:func:`snapshots_isolated` of the Events ``build(*lists)`` selects, read through a
    statement built and compiled once per shape (:class:`infra.queries.CompiledOnce`:
    ``lists`` are its value lists) for a read made on every pass. When the rows cannot all
    become snapshots, the query is read again row by row, as :func:`snapshots_isolated` does."""

    def __init__(self, build: Callable[..., Any]) -> None:
        from infra.queries import CompiledOnce

        self.build = build
        self._rows = CompiledOnce(lambda *lists: build(*lists).values_list(*SNAPSHOT_FIELDS))

    def snapshots(self, *lists: list) -> list[EventSnapshot]:
        return _isolated(lambda: snapshots_of(self._rows.rows(*lists)), lambda: self.build(*lists))


@frozen
class UnreadableSnapshot(EventSnapshot):
    """An Event whose stored data could not be made into a snapshot (nested deeper than the
    decoder's stack, say): it carries no data, and routing records ``error`` on it instead of
    asking its routes, so one Event's content never fails the read of the others."""

    error: RouteError | None = None


def panic(exc: BaseException, what: str, *, route: str = "") -> RouteError:
    """A ``handler_panic`` for an unexpected exception, with its stack (R10): its last 8,000
    characters."""
    import traceback

    return RouteError(
        RouteErrorCode.HANDLER_PANIC,
        f"{what}: {type(exc).__name__}: {exc}",
        route=route,
        stack="".join(traceback.format_exception(exc))[-8000:],
    )


def snapshots_isolated(queryset) -> list[EventSnapshot]:
    """:func:`snapshots`, except that an Event whose row cannot become a snapshot comes back
    as an :class:`UnreadableSnapshot` (its fields without data, and the error) instead of
    failing the whole read. Reads row by row only when the whole read failed."""
    return _isolated(lambda: snapshots(queryset), lambda: queryset)


def _isolated(read: Callable[[], list[EventSnapshot]], queryset: Callable[[], Any]) -> list[EventSnapshot]:
    """``read()``; when an Event's content fails it, the Events of ``queryset()`` row by row."""
    from causal.models import Event

    try:
        return read()
    except (OperationalError, InterfaceError):
        raise  # the database, not an Event
    except Exception:  # noqa: BLE001 - one Event's content: find it below, row by row
        logger.info("route.snapshot_read_failed", extra={"fallback": "row by row"})
    found: list[EventSnapshot] = []
    data_at = SNAPSHOT_FIELDS.index("data")
    for seq in list(queryset().values_list("seq", flat=True)):
        one = Event.objects.filter(seq=seq)
        try:
            found.extend(snapshots(one))
        except (OperationalError, InterfaceError):
            raise
        except Exception as exc:  # noqa: BLE001 - isolated to this Event, recorded on it
            unreadable = functools.partial(
                UnreadableSnapshot, error=panic(exc, "the Event's data cannot be read for routing")
            )
            rows = one.values_list(*SNAPSHOT_FIELDS[:data_at], *SNAPSHOT_FIELDS[data_at + 1 :])
            found.extend(snapshots_of([(*row[:data_at], None, *row[data_at:]) for row in rows], unreadable))
    return found


def evaluate(
    event: EventSnapshot,
    scope: EffectiveScope,
    handlers: Mapping[str, Any],
    steps: Steps | None,
    verdicts: list[RouteVerdict],
) -> Evaluation:
    """Ask each route of ``scope`` in order; the first match wins (R6).

    Exceptions map to route failures (R10): ``Invalid`` → handler_invalid; ``Unavailable``
    or a transient OS-level error (``OSError`` and its subclasses: ``ConnectionError``,
    ``TimeoutError``, …) → handler_failed (retried); anything else, a programming error, →
    handler_panic with its stack.

    ``steps`` (the handler pool's) is marked as each route's handler is called: each handler's
    deadline counts from there (R12); ``verdicts`` is the list the routes' verdicts are
    appended to as they answer, so a caller that gives up waiting knows what was said.
    """
    routes = scope.routes
    for index, route in enumerate(routes):
        if steps is not None:
            steps.running = (monotonic(), route.slot)
        handler = handlers.get(route.handler)
        if handler is None:
            verdicts.append(RouteVerdict(route.slot, route.scope, Verdict.ERROR, "handler not registered"))
            error = RouteError(
                RouteErrorCode.HANDLER_MISSING,
                f"route {route.slot}: handler {route.handler!r} is not registered",
                route=route.slot,
            )
            return Evaluation(_rest(verdicts, routes, index), route=route, error=error)
        try:
            decision = handler.match(event, route.info())
        except Invalid as exc:
            error = RouteError(RouteErrorCode.HANDLER_INVALID, f"route {route.slot}: {exc}", route=route.slot)
        except Unavailable as exc:
            error = RouteError(RouteErrorCode.HANDLER_FAILED, f"route {route.slot}: {exc}", route=route.slot)
        except OSError as exc:  # an upstream restarting: retried, like Unavailable
            error = RouteError(
                RouteErrorCode.HANDLER_FAILED,
                f"route {route.slot}: {type(exc).__name__}: {exc}",
                route=route.slot,
            )
        except Exception as exc:  # noqa: BLE001 - a handler's panic is recovered here (R12)
            error = panic(exc, f"route {route.slot}", route=route.slot)
        else:
            if not isinstance(decision, RouteDecision):
                error = RouteError(
                    RouteErrorCode.HANDLER_PANIC,
                    f"route {route.slot}: handler returned {type(decision).__name__}, not a RouteDecision",
                    route=route.slot,
                )
            elif decision.matched:
                verdicts.append(_verdict(route.slot, route.scope, Verdict.MATCH, decision.reason))
                return Evaluation(_rest(verdicts, routes, index), route, decision)
            else:
                verdicts.append(_verdict(route.slot, route.scope, Verdict.SKIP, decision.reason))
                continue
        verdicts.append(RouteVerdict(route.slot, route.scope, Verdict.ERROR, one_line(error.message)))
        return Evaluation(_rest(verdicts, routes, index), route=route, error=error)
    return Evaluation(tuple(verdicts))


@functools.lru_cache(maxsize=4096)
def _verdict(route: str, scope: str, verdict: str, reason: str) -> RouteVerdict:
    """A route's verdict with its reason cut to one line: one record per distinct verdict,
    shared (records are frozen). Most Events of a kind get the same verdicts from every route
    (a refusal names the type, a match its glob): building them, with the refusals
    themselves (``routing.handlers.match``), was about a third of asking the routes."""
    return RouteVerdict(route, scope, verdict, one_line(reason))


def _rest(
    verdicts: list[RouteVerdict], routes: tuple[EffectiveRoute, ...], index: int
) -> tuple[RouteVerdict, ...]:
    """Routes after the deciding one are not reached (their verdicts shared, as refusals are)."""
    return tuple(verdicts) + tuple(
        [_verdict(r.slot, r.scope, Verdict.NOT_REACHED, "") for r in routes[index + 1 :]]
    )
