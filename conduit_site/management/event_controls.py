"""``manage.py events skip SEQ``, ``manage.py events reroute SEQ`` and ``manage.py events replay
SEQ...``: the operator controls from the command line (R20–R22), as subcommands of
``events`` (see its ``SUBCOMMANDS``).

The CLI is trusted operator access on the host: whoever can run ``manage.py`` can already
change the database, so no permission is checked here. ``--as USER`` (an existing active
user) is recorded as the actor, else ``cli``.
"""

from __future__ import annotations

from argparse import ArgumentTypeError
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from django.core.management.base import BaseCommand, CommandError, CommandParser

from causal.clock import system_clock
from causal.models import Event
from conduit_site.management.bulk_jobs import filter_arguments, job_run_foreground, parse_filters
from infra.cli import (
    NOTHING_CHANGED,
    as_user_argument,
    cli_actor,
    error_body,
    json_argument,
    positive_int,
    positive_seq,
    print_json,
    refuse,
)
from infra.times import parse_time

if TYPE_CHECKING:
    import controls.events

# What ``events replay --filter`` filters by, and the Events list filter's field each sets.
REPLAY_FILTER_KEYS = {
    "scope": "scope",
    "type": "type",
    "state": "state",
    "policy": "policy",
    "work": "work_id",
    "since": "since",
    "until": "until",
}


def _control_arguments(parser: CommandParser, what: str) -> None:
    parser.add_argument("seq", metavar="SEQ", type=positive_seq, help=f"The seq of the Event to {what}.")
    _actor_arguments(
        parser, json_help="Print the result (or the refusal) as a JSON object on standard output."
    )


def _actor_arguments(parser: CommandParser, *, json_help: str) -> None:
    """``--as USER`` (the actor recorded) and ``--json``, as every Event control takes them."""
    as_user_argument(parser)
    json_argument(parser, json_help)


def skip_arguments(parser: CommandParser) -> None:
    """Arguments of ``events skip``."""
    _control_arguments(parser, "skip")


def reroute_arguments(parser: CommandParser) -> None:
    """Arguments of ``events reroute``."""
    _control_arguments(parser, "reroute")


def replay_arguments(parser: CommandParser) -> None:
    """Arguments of ``events replay``."""
    parser.add_argument(
        "seqs",
        metavar="SEQ",
        nargs="*",
        type=positive_seq,
        help="The seqs of the settled Events to replay (routed with any policy, failed or skipped). Each is "
        "accepted again as a copy, id replay/<original id>/<n>, that routes under the live configuration, "
        "with its own core.manual.replay_event control Event. More Events than one replay request takes "
        "(10,000) are refused before anything is done. Or --filter for every Event matching it.",
    )
    filter_arguments(parser, keys=tuple(REPLAY_FILTER_KEYS), noun="Events")
    _actor_arguments(
        parser,
        json_help="Print each Event's outcome and a summary as a JSON object on standard output (as POST "
        "/api/events/replay answers).",
    )


def replay_run(command: BaseCommand, options: dict[str, Any]) -> None:
    """Replay Events: a copy of each, routed under the live configuration; one line per Event.
    Exits non-zero when any was refused (the others are replayed)."""
    from controls import replay

    if options["filters"]:
        _replay_job(command, options)
        return
    if not options["seqs"]:
        _refuse(
            command,
            options["json"],
            error_body("invalid_replay", "name Events"),
            "SEQ: name Events, or many with --filter",
        )
    if options["count"] is not None or options["no_wait"]:
        _refuse(
            command,
            options["json"],
            error_body("invalid_replay", "--count"),
            "--count and --no-wait go with --filter",
        )
    actor = cli_actor(options["as_user"])
    try:
        batch = replay.events_replay(seqs=options["seqs"], user=actor, clock=system_clock)
    except replay.ReplayInvalid as exc:
        _refuse(command, options["json"], exc.details(), f"SEQ: {exc.message}")
    if options["json"]:
        print_json(command, batch.as_dict())
    else:
        for outcome in batch.outcomes:
            line = (
                outcome.result.message
                if outcome.result is not None
                else f"Event #{outcome.seq}: {outcome.error}"
            )
            command.stdout.write(line)
    if batch.refused:
        raise CommandError(f"refused {len(batch.refused)} of {len(batch.outcomes)}: {batch.summary}")


def _replay_job(command: BaseCommand, options: dict[str, Any]) -> None:
    """``events replay --filter …``: every Event matching, as a bulk job, after the count check."""
    from controls import jobs, replay
    from controls.bulk import BulkCountChanged
    from routing.records.filters import EventListFilter, EventListInvalid

    as_json = options["json"]
    if options["seqs"]:
        _refuse(
            command,
            as_json,
            error_body("invalid_replay", "SEQ"),
            "SEQ: name Events or use --filter, not both",
        )
    raw = parse_filters(options["filters"], keys=tuple(REPLAY_FILTER_KEYS))
    try:
        values: dict[str, Any] = {REPLAY_FILTER_KEYS[k]: v for k, v in raw.items()}
        if "work_id" in values:
            values["work_id"] = positive_int(values["work_id"])
        for name in ("since", "until"):
            if name in values:
                values[name] = parse_time(values[name])
        filters = EventListFilter(**values)
    except (EventListInvalid, ValueError, ArgumentTypeError) as exc:
        _refuse(command, as_json, error_body("invalid_filter", str(exc)), f"--filter: {exc}")
    try:
        seqs = jobs.replay_seqs_matching(filters)
    except replay.ReplayInvalid as exc:
        _refuse(command, as_json, exc.details(), f"--filter: {exc.message}")
    if options["count"] is None:
        _refuse(
            command,
            as_json,
            {**error_body("invalid_input", "count is required"), "count": len(seqs)},
            f"--count: the filter matches {len(seqs)} Events: check them ('events list') and pass --count {len(seqs)}",
        )
    try:
        job = jobs.events_replay_job(
            seqs=seqs,
            count=options["count"],
            user=cli_actor(options["as_user"]),
            clock=system_clock,
            description=f"{len(seqs)} Events matching {' '.join(options['filters'])}",
        )
    except BulkCountChanged as changed:
        _refuse(
            command,
            as_json,
            changed.details(),
            f"--count: the filter matches {changed.count} Events, not {changed.confirmed}: check them "
            f"('events list') and pass --count {changed.count}",
        )
    except replay.ReplayInvalid as exc:
        _refuse(command, as_json, exc.details(), f"--filter: {exc.message}")
    job_run_foreground(command, job, options)


def skip_run(command: BaseCommand, options: dict[str, Any]) -> None:
    """Skip an unrouted Event: route it as skipped without asking its routes."""
    # The controls import the router: only the subcommands that use them pay for it.
    import controls.events

    _run(command, options, controls.events.event_skip)


def reroute_run(command: BaseCommand, options: dict[str, Any]) -> None:
    """Reroute an Event: forget an unrouted one's failures, or accept a copy of a failed or
    skipped one."""
    import controls.events

    _run(command, options, controls.events.event_reroute)


def _run(
    command: BaseCommand, options: dict[str, Any], service: Callable[..., controls.events.ControlResult]
) -> None:
    import controls.events

    as_json = options["json"]
    seq = options["seq"]
    actor = cli_actor(options["as_user"])
    try:
        result = service(seq=seq, user=actor, clock=system_clock)
    except controls.events.ControlRefused as refused:
        _refuse(command, as_json, refused.details(), f"SEQ: {refused.message}")
    except Event.DoesNotExist:
        message = f"no Event has seq {seq}"
        _refuse(command, as_json, {**error_body("not_found", message), "seq": seq}, f"SEQ: {message}")
    if as_json:
        print_json(command, result.as_dict())
    else:
        command.stdout.write(result.message)


def _refuse(command: BaseCommand, as_json: bool, body: dict[str, Any], message: str) -> NoReturn:
    refuse(command, as_json=as_json, body=body, message=NOTHING_CHANGED + message)
