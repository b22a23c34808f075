"""``manage.py route_loop``: route every pending Event in acceptance order (D3)."""

from __future__ import annotations

import logging
import math
import sys
import threading
import time

from django.core.management.base import BaseCommand, CommandError
from django.db import reset_queries

from causal.clock import system_clock
from conduit_site.logformat import announce
from conduit_site.management.loops import collector_tuned, install_graceful_stop, restore_signals
from controls.jobs import bulk_job_step
from infra.connections import connections_refresh, database_wait
from infra.wakeup import ACCEPTED, Listener
from infra.words import counted
from routing.engine.loop import RouteLoop
from routing.engine.options import RouterOptions
from worklife.executors.isolation import make_undumpable

logger = logging.getLogger("conduit.routing")

# --drain shows its progress (the backlog counted again) after its first pass, then at most
# once in this many seconds.
PROGRESS_EVERY = 1.0


class Command(BaseCommand):
    help = (
        "Route accepted Events into Work, in acceptance order, with the live configuration "
        "generation. Runs until stopped (SIGTERM/SIGINT finish the transaction in hand; a second "
        "signal kills), or once with --once, or until nothing is routable with --drain. Between passes "
        "it runs the bulk jobs operators stored (retry, cancel, replay), a batch at a time."
    )

    def add_arguments(self, parser):
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument(
            "--once",
            action="store_true",
            help="Run one pass (one window of Events) and one batch of a bulk job, and exit.",
        )
        mode.add_argument(
            "--drain",
            action="store_true",
            help="Run passes until nothing is routable and no bulk job is left, then exit (shows the backlog as it "
            "goes, once a second).",
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=500,
            help="Events per pass (window); each pass commits in one transaction. Default 500.",
        )
        parser.add_argument(
            "--call-timeout",
            type=float,
            default=None,
            help="Seconds a route handler may take before it is abandoned (handler_timeout). "
            "Default: CONDUIT_ROUTE_TIMEOUT (5).",
        )
        parser.add_argument(
            "--poll-interval",
            type=float,
            default=0.5,
            help="Seconds to wait between passes when nothing is routable; an acceptance wakes the "
            "loop sooner (PostgreSQL LISTEN/NOTIFY, or a local socket beside SQLite). Default 0.5.",
        )
        parser.add_argument(
            "--gather",
            type=float,
            default=0.01,
            help="Seconds to wait after a pass that routed Events before the next, so that Events "
            "accepted meanwhile share its window: under a steady stream fewer, larger commits "
            "(each a flush to disk). The first Event after a quiet spell is routed at once. "
            "Default 0.01; 0 routes each window as soon as the last one is done.",
        )
        parser.add_argument(
            "--no-wakeup",
            action="store_true",
            help="Do not listen for acceptances: find new Events by polling only.",
        )
        parser.add_argument(
            "--workers", type=int, default=4, help="Threads that run route handlers. Default 4."
        )

    def handle(self, *args, **options):
        # Its environment holds the server's secrets: a Work's process of the same user (a work
        # loop not run as root) may not read it (worklife/executors/isolation.py).
        make_undumpable()
        if options["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1")
        if options["call_timeout"] is not None and options["call_timeout"] <= 0:
            raise CommandError("--call-timeout must be positive")
        if options["poll_interval"] < 0:
            raise CommandError("--poll-interval cannot be negative")
        if options["gather"] < 0:
            raise CommandError("--gather cannot be negative")
        router_options = RouterOptions.from_settings(
            route_timeout=options["call_timeout"],
            batch_size=options["batch_size"],
            workers=options["workers"],
        )
        stop = threading.Event()
        # Run forever, the loop is woken for every acceptance: one heartbeat a second at most.
        forever = not (options["once"] or options["drain"])
        # The loop's start reads and writes (dead loops' claims): a server restarting is waited for.
        database_wait(wait=stop.wait)
        loop = RouteLoop(clock=system_clock, options=router_options, heartbeat_every=1.0 if forever else 0.0)
        previous = install_graceful_stop(stop)
        try:
            with collector_tuned():
                if options["once"]:
                    # One pass: no next window is claimed and asked, only to be given back.
                    self._report(loop.step(claim_ahead=False), left=loop.backlog())
                    self._job_batch()
                elif options["drain"]:
                    self._drain(loop, stop)
                else:
                    listener = None if options["no_wakeup"] else Listener(ACCEPTED)
                    try:
                        self._forever(
                            loop, stop, options["poll_interval"], listener, gather=options["gather"]
                        )
                    finally:
                        if listener is not None:
                            listener.close()
                    # A clean stop: nothing should count this loop as running any longer.
                    loop.stopped()
        finally:
            loop.close()
            restore_signals(previous)

    # -- modes --------------------------------------------------------------------------
    def _drain(self, loop: RouteLoop, stop: threading.Event) -> None:
        tty = sys.stdout.isatty()
        total = loop.backlog()
        done = 0
        started = time.monotonic()
        shown = -math.inf  # when the backlog was last counted and shown
        while not stop.is_set():
            result = loop.step()
            connections_refresh()
            reset_queries()
            done += result.settled
            if result.empty:
                # Then the bulk jobs stored so far, batch after batch; a replay's copies route next.
                ran = False
                while not stop.is_set() and self._job_batch():
                    ran = True
                if not ran:
                    break
                continue
            now = time.monotonic()
            if now - shown < PROGRESS_EVERY:
                # Counting the backlog reads every unrouted Event: after every pass, draining a
                # backlog would cost time in its square (and each loop of several counts it).
                continue
            shown = now
            backlog = loop.backlog()
            if tty:
                width = 30
                filled = int(width * done / max(total, done + backlog, 1))
                rate = done / max(now - started, 1e-6)
                self.stdout.write(
                    f"\r[{'#' * filled}{'.' * (width - filled)}] {done} routed, {backlog} left, {rate:.0f}/s",
                    ending="",
                )
                self.stdout.flush()
            else:
                self.stdout.write(f"routed {done}, backlog {backlog}")
        if tty:
            self.stdout.write("")
        left = loop.backlog()
        self.stdout.write(f"drained: {counted(done, 'Events')} routed, {left} unrouted left")

    def _forever(
        self,
        loop: RouteLoop,
        stop: threading.Event,
        poll_interval: float,
        listener: Listener | None,
        *,
        gather: float = 0.0,
    ) -> None:
        # Listening starts before the first pass: an acceptance committed while a pass runs
        # leaves its wake-up pending, and the next wait returns at once.
        announce(self.stdout, f"route_loop {loop.owner} started", owner=loop.owner)
        while not stop.is_set():
            connections_refresh()
            try:
                result = loop.step()
            except Exception as exc:  # noqa: BLE001 - the loop boundary: log (once per run) and go on
                loop.pass_failed(exc)
                stop.wait(max(poll_interval, 1.0))
                continue
            finally:
                reset_queries()
            # Between passes, one batch of the oldest bulk job (controls.jobs), if any.
            if self._job_batch():
                continue
            if result.empty or result.settled == 0:
                if listener is not None:
                    listener.wait(poll_interval, stop)
                else:
                    stop.wait(poll_interval)
            elif gather and result.settled < loop.options.batch_size:
                # Events are arriving: let the next ones gather into one window (a full window
                # means a backlog, routed at once).
                stop.wait(gather)
        announce(self.stdout, "route_loop stopped", owner=loop.owner)

    def _job_batch(self) -> bool:
        """Run one batch of the oldest unfinished bulk job (``controls.jobs``); whether one ran."""
        try:
            job = bulk_job_step(clock=system_clock)
        except Exception:  # noqa: BLE001 - the loop boundary: the job waits for the next pass
            logger.exception("bulk_job.batch_failed")
            return False
        finally:
            reset_queries()
        if job is not None and job.is_finished:
            self.stdout.write(f"bulk job {job.pk} {job.state}: {job.succeeded} done, {job.refused} refused")
        return job is not None

    def _report(self, result, *, left: int) -> None:
        # ``left``: every Event still unrouted, not only those of the pass's window (an Event
        # behind one given up on, or past the window, routes in a later pass).
        self.stdout.write(
            f"pass: {result.settled} routed, {left} unrouted left"
            + (f", generation {result.generation}" if result.generation else ", no configuration applied")
        )
