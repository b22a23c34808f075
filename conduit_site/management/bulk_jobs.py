"""What ``work retry|cancel --filter …`` and ``events replay --filter …`` share: the filter and
count options, and running a bulk job (``controls.jobs``) in the foreground with a progress bar on
a terminal, or its result as JSON with ``--json``.

The job is stored first, as the console and the API store one; this command then runs its
batches itself. Interrupted (Ctrl-C), the job stays stored where its last batch committed and
the route loop finishes it; ``--no-wait`` leaves it to the route loop from the start.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from causal.clock import system_clock
from infra.cli import print_json

if TYPE_CHECKING:
    from controls.models import BulkJob

# How many refused targets the text output names (--json lists every outcome's first page).
REFUSALS_SHOWN = 10
# Outcomes a --json result lists (the job's page and GET /api/jobs/{id} page through them all).
JSON_ITEMS = 1000


def filter_arguments(parser: CommandParser, *, keys: tuple[str, ...], noun: str) -> None:
    """``--filter KEY=VALUE`` (repeatable), ``--count N`` and ``--no-wait``."""
    parser.add_argument(
        "--filter",
        dest="filters",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"Act on every {noun} matching these filters instead of one (repeat for several; keys: "
        f"{', '.join(keys)}). Runs as a bulk job with its progress; needs --count.",
    )
    parser.add_argument(
        "--count",
        type=int,
        default=None,
        metavar="N",
        help=f"With --filter: the number of {noun} you expect it to match (as 'list' shows them). When it "
        "matches another number nothing is done and the command says how many it matches now.",
    )
    parser.add_argument(
        "--no-wait",
        action="store_true",
        help="With --filter: store the job and exit; the route loop runs it (see its progress on the "
        "console's job page or GET /api/jobs/ID).",
    )


def parse_filters(items: list[str], *, keys: tuple[str, ...]) -> dict[str, str]:
    """``KEY=VALUE`` pairs as a dict, or :class:`CommandError` naming the one at fault."""
    parsed: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in keys:
            raise CommandError(
                f"--filter: expected KEY=VALUE with KEY one of {', '.join(keys)}, got {item!r}"
            )
        if key in parsed:
            raise CommandError(f"--filter: {key} is given twice")
        parsed[key] = value
    return parsed


def job_run_foreground(command: BaseCommand, job: BulkJob, options: dict[str, Any]) -> None:
    """Run ``job`` to its end here, showing its progress on a terminal; print the result (as JSON
    with ``--json``). Exits non-zero when any target was refused (the others are done)."""
    # Imported here: the commands that offer a job (``events``, ``work``) load it only to run one.
    from controls.jobs import bulk_job_as_dict, bulk_job_items, bulk_job_run

    as_json = bool(options.get("json"))
    if options.get("no_wait"):
        if as_json:
            print_json(command, bulk_job_as_dict(job))
        else:
            command.stdout.write(f"job {job.pk} stored: {job.description}; the route loop runs it")
        return
    tty = not as_json and _isatty(command)

    def progress(now: BulkJob) -> None:
        if tty:
            width = 30
            filled = int(width * now.position / max(now.total, 1))
            command.stdout.write(
                f"\r[{'#' * filled}{'.' * (width - filled)}] {now.position} of {now.total}, "
                f"{now.succeeded} done, {now.refused} refused",
                ending="",
            )
            command.stdout.flush()

    job = bulk_job_run(job_id=job.pk, clock=system_clock, progress=progress)
    if tty:
        command.stdout.write("")
    if as_json:
        print_json(command, bulk_job_as_dict(job, bulk_job_items(job, limit=JSON_ITEMS)))
    else:
        command.stdout.write(
            f"job {job.pk} {job.state}: {job.description}: {job.succeeded} done, {job.refused} refused of {job.total}"
        )
        for item in bulk_job_items(job, refused_only=True, limit=REFUSALS_SHOWN):
            command.stdout.write(f"  {item.target}: {item.outcome}: {item.message}")
    if job.refused:
        raise CommandError(f"refused {job.refused} of {job.total} (job {job.pk})")


def _isatty(command: BaseCommand) -> bool:
    stream = getattr(command.stdout, "_out", sys.stdout)
    return bool(getattr(stream, "isatty", lambda: False)())
