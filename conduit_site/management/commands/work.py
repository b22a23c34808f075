"""``manage.py work SUBCOMMAND``: Work and its operator controls from the command line.

``list`` and ``get`` read Work; ``cancel``, ``retry``, ``send``, ``create`` and ``rebind`` are the
operator controls of ``controls.work``. The CLI is trusted operator access on the host:
whoever can run ``manage.py`` can already change the database, so no permission is checked.
``--as USER`` (an existing active user) is recorded as the actor, else ``cli``. A refused
control exits non-zero with the reason, and nothing is stored.

Each subcommand is a :class:`Subcommand` in ``SUBCOMMANDS``: a function that adds its arguments
(with help text on every one) and a function that runs it; ``run`` stays thin: parse, call one
service or selector, print, and raise ``CommandError`` for refused input.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from django.core.management.base import BaseCommand, CommandParser

import controls.work
from causal.clock import system_clock
from causal.selectors import PAGE_SIZE
from conduit_site.management.bulk_jobs import filter_arguments, job_run_foreground, parse_filters
from controls.bulk import BulkCountChanged, work_bulk_ids
from controls.jobs import work_bulk_job
from controls.work import WorkControl, WorkControlInvalid, WorkControlRefused, WorkControlResult
from infra.cli import (
    NOTHING_CHANGED,
    Subcommand,
    add_subcommands,
    as_user_argument,
    cli_actor,
    error_body,
    json_argument,
    positive_int,
    print_json,
    refuse,
    run_subcommand,
)
from infra.times import timestamp
from infra.words import counted
from routing.acceptance.envelopes import loads
from routing.serializers import attempt_json, work_json
from worklife.flow import flow_hold_line
from worklife.models import Attempt, Pause, Work, WorkStatus
from worklife.pauses import pause_line
from worklife.selectors import (
    NotRunning,
    WorkFilter,
    failures_text,
    work_attempts,
    work_get,
    work_hold,
    work_keys,
    work_page,
    work_pauses,
)

MAX_LIST_LIMIT = 200
# What ``work retry|cancel --filter`` filters by (the Work list's filters).
BULK_FILTER_KEYS = ("scope", "status", "binding", "key")


def _work_id_argument(parser: CommandParser, what: str) -> None:
    parser.add_argument("work_id", metavar="ID", type=positive_int, help=f"The id of the Work to {what}.")


def _json_argument(parser: CommandParser, what: str) -> None:
    json_argument(
        parser, f"Print {what} as JSON (as the API answers) and errors as a JSON object on standard output."
    )


def _input_arguments(parser: CommandParser) -> None:
    parser.add_argument(
        "--type",
        dest="event_type",
        required=True,
        metavar="TYPE",
        help="The input's Event type, the operator's own (core.* is reserved), e.g. 'operator.note'.",
    )
    data = parser.add_mutually_exclusive_group()
    data.add_argument(
        "--data",
        default=None,
        metavar="JSON",
        help='The input\'s data, a JSON value (e.g. \'{"text": "look again"}\'); none by default.',
    )
    data.add_argument(
        "--data-file",
        default=None,
        metavar="FILE",
        help="Read the input's data (a JSON value) from FILE; '-' reads standard input.",
    )
    parser.add_argument("--subject", default="", metavar="TEXT", help="The input's subject (optional).")


# --- list, get --------------------------------------------------------------------------------


def list_arguments(parser: CommandParser) -> None:
    """Arguments of ``work list``."""
    parser.add_argument("--scope", default="", metavar="PATH", help="Only Work of this scope (exact path).")
    parser.add_argument(
        "--status",
        default="",
        metavar="STATUS",
        help=f"Only Work in this status ({', '.join(WorkStatus.values)}), or 'parked', 'backing_off', "
        "'awaiting_binding', 'flow_held' or 'paused' (then 'ready' means none of them), as the Work list "
        "offers them.",
    )
    parser.add_argument(
        "--binding", default="", metavar="NAME", help="Only Work on this binding (exact name)."
    )
    parser.add_argument(
        "--key",
        default="",
        metavar="KEY",
        help="Only the Work owning a correlation key that starts with KEY.",
    )
    parser.add_argument(
        "--limit",
        type=int,
        default=PAGE_SIZE,
        metavar="N",
        help=f"How many Work to print (1 to {MAX_LIST_LIMIT}; default {PAGE_SIZE}).",
    )
    parser.add_argument(
        "--before",
        type=positive_int,
        default=None,
        metavar="ID",
        help="Continue a listing below this Work id (the one a previous page printed as next).",
    )
    _json_argument(parser, "the page ({'work': [...], 'next_before': ID or null})")


def list_run(command: BaseCommand, options: dict[str, Any]) -> None:
    """Print a page of Work, newest first, filtered by scope, status, binding and owned key."""
    limit = options["limit"]
    if not 1 <= limit <= MAX_LIST_LIMIT:
        _refuse(command, options, "invalid_input", f"--limit: expected 1 to {MAX_LIST_LIMIT}, got {limit}")
    try:
        filters = WorkFilter(
            scope=options["scope"], status=options["status"], binding=options["binding"], key=options["key"]
        )
    except ValueError as exc:
        _refuse(command, options, "invalid_input", f"--{exc}")
    page = work_page(filters, before=options["before"], limit=limit)
    if options["json"]:
        print_json(command, {"work": [work_json(work) for work in page], "next_before": page.next_cursor})
        return
    paused = work_pauses(page, now=system_clock())
    lines = [work_line(work, paused.get(work.pk)) for work in page] or ["No Work matches."]
    if page.has_next:
        lines.append(f"More: add --before {page.next_cursor} for the next page.")
    command.stdout.write("\n".join(lines))


def get_arguments(parser: CommandParser) -> None:
    """Arguments of ``work get``."""
    _work_id_argument(parser, "print")
    _json_argument(parser, "the Work with its attempts and keys")


def get_run(command: BaseCommand, options: dict[str, Any]) -> None:
    """Print one Work: its state, bindings, scheduler's view, attempts and keys."""
    try:
        work = work_get(options["work_id"])
    except Work.DoesNotExist:
        _refuse(command, options, "not_found", f"ID: no Work has id {options['work_id']}")
    attempts = work_attempts(work.pk)
    keys = work_keys(work.pk)
    if options["json"]:
        payload = {
            **work_json(work),
            "attempts": [
                {
                    **attempt_json(attempt),
                    "result": attempt.result,
                    "stdout_tail": attempt.stdout_tail,
                    "stderr_tail": attempt.stderr_tail,
                }
                for attempt in attempts
            ],
            "more_attempts": attempts.has_next,
            "keys": [key.key for key in keys],
            "more_keys": keys.has_next,
        }
        print_json(command, payload)
        return
    lines = [work_line(work, work_pauses([work], now=system_clock()).get(work.pk))]
    if work.retry_binding or work.rebind_binding:
        lines.append(
            f"  rebound: {work.rebind_binding or '-'} after attempt {work.rebind_after_attempt or 0}"
            + (f", retry on {work.retry_binding}" if work.retry_binding else "")
        )
    if work.parked_at:
        lines.append(f"  parked since {timestamp(work.parked_at)} after {counted(work.failures, 'failures')}")
    elif work.is_awaiting_binding:
        lines.append(
            "  waiting for a binding that can run it (rebind it, or give its binding an executor); "
            f"looked at again at {timestamp(work.retry_at)}"
        )
    elif work.retry_at:
        lines.append(f"  backing off until {timestamp(work.retry_at)} ({counted(work.failures, 'failures')})")
    if work.last_error:
        lines.append(f"  last error: {work.last_error}")
    if hold := flow_hold_line(work):
        lines.append(f"  flow control: {hold}")
    if work.trigger_id:
        lines.append(f"  trigger: #{work.trigger_id}")
    for attempt in attempts:
        lines.append(
            f"  attempt {attempt.number}: {attempt.state} on {attempt.binding}"
            + (f" ({attempt.executor})" if attempt.executor else "")
            + f", started {timestamp(attempt.started_at)}"
            + (f", ended {timestamp(attempt.ended_at)}" if attempt.ended_at else "")
        )
        lines.extend(attempt_detail_lines(attempt))
    lines.extend(f"  key: {key.key}" for key in keys)
    command.stdout.write("\n".join(lines))


def attempt_detail_lines(attempt: Attempt) -> list[str]:
    """What an attempt ended with, as the Work page shows it: its exit status, error text,
    result (JSON) and the tails of its output, each line indented under the attempt."""
    lines = []
    if attempt.exit_status is not None:
        lines.append(f"    exit status {attempt.exit_status}")
    if attempt.error:
        lines.extend(_indented("error", attempt.error))
    if attempt.result is not None:
        lines.extend(_indented("result", json.dumps(attempt.result, indent=2, ensure_ascii=False)))
    if attempt.stdout_tail:
        lines.extend(_indented("stdout (tail)", attempt.stdout_tail))
    if attempt.stderr_tail:
        lines.extend(_indented("stderr (tail)", attempt.stderr_tail))
    return lines


def _indented(label: str, text: str) -> list[str]:
    body = text.rstrip("\n").splitlines() or [""]
    if len(body) == 1:
        return [f"    {label}: {body[0]}"]
    return [f"    {label}:", *(f"      {line}" for line in body)]


def work_line(work: Work, pause: Pause | None = None) -> str:
    """A Work on one line: id, status (with "parked", or "backing off until T (N failures)", or
    "paused by …" when ``pause`` holds it, as the console's Work list marks them), scope,
    binding, created."""
    by = f" by {work.created_by}" if work.created_by else ""
    return (
        f"Work {work.pk}  {work.status}{_hold_mark(work, pause)}  scope {work.scope}  "
        f"binding {work.binding or '-'}  created {timestamp(work.created_at)}{by}"
    )


def _hold_mark(work: Work, pause: Pause | None) -> str:
    """The mark after the status, as the console's Work list shows one: " (parked)", or
    " (backing off until T (N failures))", or nothing."""
    hold = work_hold(work, now=system_clock())
    if hold is NotRunning.PARKED:
        return " (parked)"
    if hold is NotRunning.AWAITING_BINDING:
        return " (waiting for a binding that can run it)"
    if pause is not None:
        return f" ({pause_line(pause)})"
    if hold is NotRunning.BACKING_OFF:
        failures = f" ({failures_text(work.failures)})" if work.failures else ""
        return f" (backing off until {timestamp(work.retry_at)}{failures})"
    if hold is NotRunning.FLOW_HELD:
        return f" (held by flow control: {work.get_hold_kind_display()})"
    return ""


# --- the controls -----------------------------------------------------------------------------


def _bulk_id_argument(parser: CommandParser, what: str) -> None:
    parser.add_argument(
        "work_id",
        metavar="ID",
        nargs="?",
        type=positive_int,
        help=f"The id of the Work to {what} (or --filter for every Work matching it).",
    )
    filter_arguments(parser, keys=BULK_FILTER_KEYS, noun="Work")


def cancel_arguments(parser: CommandParser) -> None:
    """Arguments of ``work cancel``."""
    _bulk_id_argument(parser, "cancel")
    parser.add_argument(
        "--reason", metavar="TEXT", help="Why, kept with the control Event and shown in the Work's history."
    )
    as_user_argument(parser)
    _json_argument(parser, "the result")


def retry_arguments(parser: CommandParser) -> None:
    """Arguments of ``work retry``."""
    _bulk_id_argument(parser, "retry")
    as_user_argument(parser)
    _json_argument(parser, "the result")


def send_arguments(parser: CommandParser) -> None:
    """Arguments of ``work send``."""
    _work_id_argument(parser, "send the input to")
    _input_arguments(parser)
    as_user_argument(parser)
    _json_argument(parser, "the result")


def create_arguments(parser: CommandParser) -> None:
    """Arguments of ``work create``."""
    parser.add_argument(
        "--scope",
        required=True,
        metavar="PATH",
        help="The scope of the new Work (in the live configuration).",
    )
    parser.add_argument(
        "--binding",
        required=True,
        metavar="NAME",
        help="The binding the Work runs on (visible in the scope in the live configuration).",
    )
    _input_arguments(parser)
    as_user_argument(parser)
    _json_argument(parser, "the result")


def rebind_arguments(parser: CommandParser) -> None:
    """Arguments of ``work rebind``."""
    _work_id_argument(parser, "rebind")
    parser.add_argument(
        "binding",
        metavar="BINDING",
        help="The binding the Work's next attempt runs on (visible in its scope in the live configuration).",
    )
    as_user_argument(parser)
    _json_argument(parser, "the result")


def cancel_run(command: BaseCommand, options: dict[str, Any]) -> None:
    """Cancel a Work: its attempts, waits, timers and queue end with it; its work loop stops a
    running attempt's process. With ``--filter``: every Work matching it, as a bulk job."""
    if _bulk(command, options, WorkControl.CANCEL):
        return
    _control(
        command,
        options,
        lambda actor: controls.work.work_cancel(
            work_id=options["work_id"], user=actor, clock=system_clock, reason=options.get("reason")
        ),
    )


def retry_run(command: BaseCommand, options: dict[str, Any]) -> None:
    """Run a parked or backing-off Work again at once. With ``--filter``: every Work matching
    it, as a bulk job."""
    if _bulk(command, options, WorkControl.RETRY):
        return
    _control(
        command,
        options,
        lambda actor: controls.work.work_retry(work_id=options["work_id"], user=actor, clock=system_clock),
    )


def send_run(command: BaseCommand, options: dict[str, Any]) -> None:
    """Send operator input to a Work (an addressed operator Event)."""
    data = _data(command, options)
    _control(
        command,
        options,
        lambda actor: controls.work.work_input_send(
            work_id=options["work_id"],
            event_type=options["event_type"],
            data=data,
            subject=options["subject"],
            user=actor,
            clock=system_clock,
        ),
    )


def create_run(command: BaseCommand, options: dict[str, Any]) -> None:
    """Create a Work in a scope on a binding, with its first input."""
    data = _data(command, options)
    _control(
        command,
        options,
        lambda actor: controls.work.work_create(
            scope=options["scope"],
            binding=options["binding"],
            event_type=options["event_type"],
            data=data,
            subject=options["subject"],
            user=actor,
            clock=system_clock,
        ),
    )


def rebind_run(command: BaseCommand, options: dict[str, Any]) -> None:
    """Make another binding of the Work's scope the one its next attempt runs on."""
    _control(
        command,
        options,
        lambda actor: controls.work.work_rebind(
            work_id=options["work_id"], binding=options["binding"], user=actor, clock=system_clock
        ),
    )


# Command-line names of the services' fields, for error messages.
OPTION_NAMES = {
    "type": "--type",
    "input.type": "--type",
    "data": "--data",
    "input.data": "--data",
    "subject": "--subject",
    "input.subject": "--subject",
    "scope": "--scope",
    "binding": "--binding",
    "reason": "--reason",
}


def _bulk(command: BaseCommand, options: dict[str, Any], action: WorkControl) -> bool:
    """Run ``work retry|cancel --filter …`` as a bulk job (True), or say the command names one
    Work (False). Needs ``--count``, the number of Work the operator expects it to match."""
    if not options["filters"]:
        if options["work_id"] is None:
            _refuse(command, options, "invalid_input", "ID: name a Work by its id, or many with --filter")
        if options["count"] is not None or options["no_wait"]:
            _refuse(command, options, "invalid_input", "--count and --no-wait go with --filter")
        return False
    if options["work_id"] is not None:
        _refuse(command, options, "invalid_input", "ID: name one Work or use --filter, not both")
    try:
        filters = WorkFilter(**parse_filters(options["filters"], keys=BULK_FILTER_KEYS))
    except ValueError as exc:
        _refuse(command, options, "invalid_input", f"--filter {exc}")
    actor = cli_actor(options["as_user"])
    try:
        job = work_bulk_job(
            action=action,
            filters=filters,
            count=options["count"],
            user=actor,
            clock=system_clock,
            reason=options.get("reason"),
        )
    except BulkCountChanged as changed:
        _refuse(
            command,
            options,
            changed.code,
            f"--count: the filter matches {changed.count} Work, not {changed.confirmed}: check them "
            f"('work list') and pass --count {changed.count}",
            body=changed.details(),
        )
    except WorkControlInvalid as invalid:
        if invalid.field == "count":
            matched = len(work_bulk_ids(filters=filters, now=system_clock()))
            _refuse(
                command,
                options,
                invalid.code,
                f"--count: the filter matches {matched} Work: check them ('work list') and pass --count {matched}",
                body=invalid.details(),
            )
        _refuse(command, options, invalid.code, f"--filter: {invalid.message}", body=invalid.details())
    job_run_foreground(command, job, options)
    return True


def _control(command: BaseCommand, options: dict[str, Any], call: Callable[[str], WorkControlResult]) -> None:
    actor = cli_actor(options["as_user"])
    try:
        result = call(actor)
    except WorkControlRefused as refused:
        _refuse(command, options, refused.code.value, refused.message, body=refused.details())
    except WorkControlInvalid as invalid:
        where = OPTION_NAMES.get(invalid.field or "", invalid.field or "")
        _refuse(command, options, invalid.code, f"{where}: {invalid.message}", body=invalid.details())
    except Work.DoesNotExist:
        _refuse(command, options, "not_found", f"ID: no Work has id {options.get('work_id')}")
    if options["json"]:
        print_json(command, result.as_dict())
    else:
        command.stdout.write(result.message)


def _data(command: BaseCommand, options: dict[str, Any]) -> Any:
    """The input's data: ``--data`` or ``--data-file`` parsed as JSON (``None`` without)."""
    if options["data_file"] is not None:
        name = options["data_file"]
        try:
            text = (
                (options.get("stdin") or sys.stdin).read() if name == "-" else Path(name).read_text("utf-8")
            )
        except OSError as exc:
            _refuse(
                command, options, "invalid_input", f"--data-file: cannot read {name}: {exc.strerror or exc}"
            )
        option = "--data-file"
    elif options["data"] is not None:
        text, option = options["data"], "--data"
    else:
        return None
    try:
        return loads(text)
    except ValueError as exc:
        _refuse(command, options, "invalid_input", f"{option}: invalid JSON: {exc}")


def _refuse(
    command: BaseCommand, options: dict[str, Any], code: str, message: str, *, body: dict | None = None
) -> NoReturn:
    refuse(
        command,
        as_json=bool(options.get("json")),
        body=body or error_body(code, message),
        message=NOTHING_CHANGED + message,
    )


# --- dispatch -------------------------------------------------------------------------------

SUBCOMMANDS: dict[str, Subcommand] = {
    "list": Subcommand(
        help="List Work newest first, filtered by scope and status.",
        add_arguments=list_arguments,
        run=list_run,
    ),
    "get": Subcommand(
        help="Print a Work: status, bindings, backoff or parking, attempts and keys.",
        add_arguments=get_arguments,
        run=get_run,
    ),
    "cancel": Subcommand(
        help="Cancel a Work: its attempts, waits, timers and queue end with it; its work loop stops a "
        "running attempt's process (trusted: no permission is checked; --as names the actor).",
        add_arguments=cancel_arguments,
        run=cancel_run,
    ),
    "retry": Subcommand(
        help="Run a parked or backing-off Work again at once with a fresh attempt budget (trusted: no "
        "permission is checked; --as names the actor).",
        add_arguments=retry_arguments,
        run=retry_run,
    ),
    "send": Subcommand(
        help="Send operator input to a Work: an addressed operator Event the router queues on the binding "
        "the Work runs on next (trusted: no permission is checked; --as names the actor).",
        add_arguments=send_arguments,
        run=send_run,
    ),
    "create": Subcommand(
        help="Create a Work in a scope on a binding with its first input; it runs once the router queues "
        "the input (trusted: no permission is checked; --as names the actor).",
        add_arguments=create_arguments,
        run=create_run,
    ),
    "rebind": Subcommand(
        help="Make another binding of the Work's scope the one its next attempt runs on (trusted: no "
        "permission is checked; --as names the actor).",
        add_arguments=rebind_arguments,
        run=rebind_run,
    ),
}


class Command(BaseCommand):
    help = "Work and its operator controls: " + ", ".join(SUBCOMMANDS) + ". See 'work SUBCOMMAND --help'."
    # call_command("work", "send", "3", "--type", "t", "--data-file", "-", stdin=io.StringIO(...)).
    stealth_options = ("stdin",)

    def add_arguments(self, parser: CommandParser) -> None:
        add_subcommands(parser, SUBCOMMANDS, help="What to do with Work.")

    def handle(self, *args: Any, **options: Any) -> None:
        run_subcommand(self, SUBCOMMANDS, options)
