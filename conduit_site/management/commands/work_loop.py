"""``manage.py work_loop``: run ready Work (the scheduler; ``worklife.runner``)."""

from __future__ import annotations

import threading

from django.core.management.base import BaseCommand, CommandError

from causal.clock import system_clock
from conduit_site.logformat import announce
from conduit_site.management.loops import install_graceful_stop, restore_signals
from conduit_site.retention import PRUNE_INTERVAL_SECONDS, site_prune
from infra.connections import database_wait
from infra.words import counted
from routing.engine.configurations import LiveConfigurations
from routing.engine.live import publish_routed
from worklife.executors.isolation import isolation, make_undumpable
from worklife.runner import WorkRunner


class Command(BaseCommand):
    help = (
        "Run ready Work: claim Work with pending input (or a retry due), start attempts with "
        "their configuration pinned, deliver injected input and interrupts, commit outcomes, "
        "fire timers and time out waits. Runs until stopped (SIGTERM/SIGINT let running "
        "attempts finish for --stop-grace seconds, then end them and give their Work back; a "
        "second signal kills), or one pass with --once, or until nothing is left to run with "
        "--drain."
    )

    def add_arguments(self, parser):
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument(
            "--once", action="store_true", help="Run one pass and exit (attempts it starts are ended)."
        )
        mode.add_argument(
            "--drain",
            action="store_true",
            help="Run until no Work is ready to run and no attempt is running, then exit (Work that "
            "flow control holds until before --drain-timeout, debounced or throttled, is waited for).",
        )
        parser.add_argument(
            "--slots", type=int, default=8, help="Attempts this loop runs at once. Default 8."
        )
        parser.add_argument(
            "--wait-slots",
            type=int,
            default=None,
            help="Attempts parked in a wait kept beside the slots, holding none (their processes "
            "stay, waiting); past this many, a parked attempt holds a slot. Default 32.",
        )
        parser.add_argument(
            "--poll-interval",
            type=float,
            default=0.1,
            help="Seconds to wait between passes when nothing happened. Default 0.1.",
        )
        parser.add_argument(
            "--stop-grace",
            type=float,
            default=10.0,
            help="Seconds running attempts get to finish after a stop signal. Default 10.",
        )
        parser.add_argument(
            "--drain-timeout",
            type=float,
            default=300.0,
            help="With --drain, give up after this many seconds. Default 300.",
        )

    def handle(self, *args, **options):
        # Its environment holds the server's secrets: no process of its user may read it.
        make_undumpable()
        if options["slots"] < 1:
            raise CommandError("--slots must be at least 1")
        if options["wait_slots"] is not None and options["wait_slots"] < 0:
            raise CommandError("--wait-slots cannot be negative")
        if options["poll_interval"] < 0:
            raise CommandError("--poll-interval cannot be negative")
        if options["stop_grace"] < 0:
            raise CommandError("--stop-grace cannot be negative")
        stop = threading.Event()
        # The loop's start frees dead loops' Work: a server restarting is waited for.
        database_wait(wait=stop.wait)
        runner = WorkRunner(
            clock=system_clock,
            configurations=LiveConfigurations(),
            slots=options["slots"],
            wait_slots=options["wait_slots"],
            publish=lambda work_ids: publish_routed([], work_ids),
            # Retention once an hour (CONDUIT_RETENTION_DAYS; 0 keeps everything).
            maintenance=lambda: site_prune(clock=system_clock),
            maintenance_seconds=PRUNE_INTERVAL_SECONDS,
        )
        previous = install_graceful_stop(stop)
        try:
            if options["once"]:
                result = runner.step()
                self.stdout.write(
                    f"pass: {result.started} started, {result.finished} finished, {result.running} running"
                )
                runner.shutdown(grace=options["stop_grace"])
            elif options["drain"]:
                runner.release_dead_owners()
                passes = runner.drain(timeout=options["drain_timeout"], wait=stop.wait)
                runner.shutdown(grace=options["stop_grace"])
                c = runner.counters
                self.stdout.write(
                    f"drained in {counted(passes, 'pass,passes')}: {c.started} started, {c.completed} completed, "
                    f"{c.failed} failed, {c.refused} dispatches refused"
                )
            else:
                announce(
                    self.stdout,
                    f"work_loop {runner.owner} started with {counted(runner.slots, 'slots')}; "
                    f"isolation: {isolation().describe()}",
                    owner=runner.owner,
                    slots=runner.slots,
                )
                runner.run(stop, poll_interval=options["poll_interval"], stop_grace=options["stop_grace"])
                announce(self.stdout, "work_loop stopped", owner=runner.owner)
        finally:
            restore_signals(previous)
