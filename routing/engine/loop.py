"""The route loop's host: one router per configuration generation, swapped without a restart
when a new generation is applied (R4), and a heartbeat doctor reads."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import DatabaseError

from causal.clock import Clock
from causal.models import Event, RouteState
from infra.identity import loop_identity
from routing.config.selectors import live_generation, live_generation_id
from routing.engine import metrics
from routing.engine.claims import (
    forget_stale_targets,
    release_dead_claims,
)
from routing.engine.failures import failures_of_other_generations
from routing.engine.handler_pool import HandlerPool
from routing.engine.heartbeat import RouteLoopHeartbeat, heartbeat_clear, heartbeat_write
from routing.engine.options import RouterOptions
from routing.engine.router import GenerationChanged, Router, build_router, import_registered_handlers
from routing.schedules import ScheduleTicker

logger = logging.getLogger("conduit.routing.loop")


class RepeatedFailures:
    """Logs a loop's failing passes without flooding the log: the first of a run of identical
    errors with its stack, then only ``<name>.repeated`` with the count (when it reaches 10,
    100, 1,000… and when the run ends: another error, or a pass that succeeds)."""

    def __init__(self, log: logging.Logger, name: str) -> None:
        self.log = log
        self.name = name
        self.error = ""
        self.count = 0
        self.since: datetime | None = None
        self._logged = 0

    def failed(self, exc: BaseException, now: datetime) -> int:
        """Count one failed pass; returns how many in a row failed with this same error."""
        error = f"{type(exc).__name__}: {exc}"[:500]
        if error == self.error:
            self.count += 1
            if self.count >= 10 and math.log10(self.count).is_integer():
                self._repeated()
            return self.count
        self.succeeded()
        self.error, self.count, self.since, self._logged = error, 1, now, 1
        self.log.error(self.name, exc_info=exc, extra={"error": error})
        return 1

    def succeeded(self) -> None:
        """A pass went through: close the run of failures (logging its count)."""
        if self.count > self._logged:
            self._repeated(ended=True)
        self.error, self.count, self.since, self._logged = "", 0, None, 0

    def _repeated(self, *, ended: bool = False) -> None:
        self._logged = self.count
        self.log.error(
            f"{self.name}.repeated",
            extra={"error": self.error, "count": self.count, "since": self.since.isoformat(), "ended": ended},
        )


@dataclass(frozen=True, slots=True)
class StepResult:
    settled: int = 0
    unrouted: int = 0
    generation: str = ""
    empty: bool = False
    generation_changed: bool = False


class RouteLoop:
    """Runs router passes; owns the handler pool across generations."""

    def __init__(
        self, *, clock: Clock, options: RouterOptions | None = None, heartbeat_every: float = 0.0
    ) -> None:
        """``heartbeat_every``: seconds between heartbeats while nothing changes (0: every
        pass). A loop woken by every acceptance runs many short passes; a heartbeat each would
        be one more commit each (doctor calls a loop stale after a minute)."""
        self.clock = clock
        self.heartbeat_every = timedelta(seconds=heartbeat_every)
        self._last_beat: tuple[datetime, str] | None = None
        self.options = options or RouterOptions.from_settings()
        self.owner = loop_identity()
        self.pool = HandlerPool(workers=self.options.workers, max_abandoned=self.options.max_abandoned)
        self.router: Router | None = None
        self.passes = 0
        self.routed_total = 0
        self.failures = RepeatedFailures(logger, "route_loop.pass_failed")
        released = release_dead_claims(clock())
        if released:
            logger.warning("route_loop.released_dead_claims", extra={"events": released})
        forget_stale_targets(clock())
        # Schedules fire from this loop's passes, exactly once across loops (routing.schedules).
        self.schedules = ScheduleTicker(clock=clock, owner=self.owner)
        # The router is built, and the handler plugins imported, before the first pass: a pass
        # routes Events, it does not import modules (about 0.1-0.4 s the first time).
        try:
            self._ensure_router()
            if self.router is None:
                import_registered_handlers()
        except DatabaseError:
            raise  # the database, not the configuration: the loop cannot start
        except Exception:  # noqa: BLE001 - a handler that cannot be imported or built: the first pass tries again and fails as a pass, where the loop reports it
            logger.warning("route_loop.router_not_built", exc_info=True)
            self.router = None

    def step(self, *, claim_ahead: bool = True) -> StepResult:
        """One pass: take the live generation (rebuilding the router when it changed), route
        one window, record the heartbeat. ``claim_ahead=False``: a last pass, which claims no window
        ahead of its commit (:meth:`routing.engine.router.Router.route_pending`)."""
        changed = self._ensure_router()
        if self.router is None:
            self._heartbeat("")
            return StepResult(empty=True)
        self._fire_schedules()
        try:
            outcomes = self.router.route_pending(claim_ahead=claim_ahead)
        except GenerationChanged:
            self.router = None
            return StepResult(generation_changed=True)
        metrics.pass_routed(outcomes, scopes=self.router.last_scopes, commits=self.router.last_commits)
        settled = sum(1 for o in outcomes if o.settled)
        self.passes += 1
        self.routed_total += settled
        self.failures.succeeded()
        label = self.router.configuration.label
        self._heartbeat(label)
        return StepResult(
            settled=settled,
            unrouted=len(outcomes) - settled,
            generation=label,
            empty=not outcomes,
            generation_changed=changed,
        )

    def _fire_schedules(self) -> None:
        try:
            self.schedules.tick(self.router.configuration if self.router is not None else None)
        except Exception:  # noqa: BLE001 - a schedule must not stop routing: log with the stack
            logger.exception("route_loop.schedules_failed")

    def pass_failed(self, exc: BaseException) -> None:
        """Record a pass that failed (the loop boundary calls this and goes on): logged once per
        run of identical errors with a count, and kept in the heartbeat with the Events of the
        window it was routing, so doctor can name them."""
        now = self.clock()
        count = self.failures.failed(exc, now)
        window = list(self.router.last_window) if self.router is not None else []
        failing = {
            "error": self.failures.error,
            "count": count,
            "since": self.failures.since.isoformat(),
            "events": window[:20],
        }
        try:
            self._heartbeat(self.router.configuration.label if self.router else "", failing=failing)
        except Exception:  # noqa: BLE001 - the database may be what fails; the pass's error is logged
            logger.warning("route_loop.heartbeat_failed", exc_info=True)

    def backlog(self) -> int:
        """Unrouted Events now (including those backing off or waiting behind others)."""
        return Event.objects.filter(route_state=RouteState.UNROUTED).count()

    def stopped(self) -> None:
        """Say this loop has stopped cleanly: its heartbeat is removed, so doctor, the console and
        ``restore`` stop counting it at once instead of a minute later."""
        heartbeat_clear(self.owner)

    def close(self) -> None:
        if self._last_beat is not None or self.passes:
            # Its last beat says it stopped: it no longer counts as alive (doctor, /metrics).
            try:
                self._heartbeat(self.router.configuration.label if self.router else "", stopped=True)
            except DatabaseError:  # the database may be why the loop stops: the beat ages out
                logger.warning("route_loop.heartbeat_failed", exc_info=True)
        if self.router is not None:
            # Its carried Events are given back and its published targets withdrawn.
            self.router.close()
        self.pool.close()

    def _ensure_router(self) -> bool:
        live_id = live_generation_id()
        if self.router is not None and live_id is not None and self.router.generation.pk == live_id:
            return False
        live = live_generation()
        if live is None:
            self.router = None
            return False
        if self.router is not None and self.router.generation.pk == live.pk:
            return False
        previous = self.router.configuration.label if self.router else None
        self.router = build_router(clock=self.clock, generation=live, options=self.options, pool=self.pool)
        self.router.owner = self.owner
        backing_off = Event.objects.filter(route_state=RouteState.UNROUTED, retry_at__isnull=False)
        if previous is None:
            # A loop (re)started, or one pass (--once): those that failed under an earlier
            # generation are tried at once too, not after their backoff (R14).
            backing_off = backing_off.filter(
                seq__in=failures_of_other_generations(self.router.configuration.label)
            )
        # A new generation retries failing Events at once (R14).
        backing_off.update(retry_at=None)
        logger.info(
            "route_loop.generation",
            extra={"generation": self.router.configuration.label, "previous": previous},
        )
        return True

    def _heartbeat(self, generation: str, *, failing: dict | None = None, stopped: bool = False) -> None:
        now = self.clock()
        if failing is None and not stopped and self._last_beat is not None:
            at, beat_generation = self._last_beat
            if beat_generation == generation and not self.failures.count and now - at < self.heartbeat_every:
                return
        self._last_beat = (now, generation) if failing is None else None
        heartbeat_write(
            RouteLoopHeartbeat(
                loop=self.owner,
                at=now,
                generation=generation,
                passes=self.passes,
                routed=self.routed_total,
                abandoned_calls=self.pool.abandoned,
                abandoned_total=self.pool.abandoned_total,
                failing=failing,
                stopped=stopped,
            ),
            clock=self.clock,
        )
