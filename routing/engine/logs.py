"""The ``route.decided`` log line: one per decision, its reasons redacted (values never leave
the RouteRecord)."""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING

from worklife.tracing import trace_fields

if TYPE_CHECKING:
    from routing.engine.settle import RouteOutcome

logger = logging.getLogger("conduit.routing")

# What a log line keeps of a reason: field names and the words reasons are made of. Any other
# token (a value, a pattern, a glob, a quoted string) becomes "…": payload values stay in the
# stored RouteRecord (for operators), never in log lines.
_REASON_WORDS = frozenset(
    """is not missing expected one of a an to string matching which does match matches present
    absent key needs null scalar renders characters at most route handler no decision within
    returned failed unexpectedly deciding routing this event cannot be read for its the data
    fallback queue drop held until attempt ends runs binding selects pinned capabilities lack
    inject interrupt wins wait terminal no_match addressed context no_work conflicting targets
    work by names exist chose does in scope already has later input and or with registered
    panic handler_panic handler_failed handler_invalid handler_timeout handler_missing
    binding_invalid policy_invalid unknown policy conflicting_identity identity""".split()
)


_FIELD = re.compile(
    r"(data(\.[\w-]+|\[\d+\])*|type|source|subject|scope|id|time|correlation(\[\d+\])?|work_id|execution_id)"
)


_TOKEN = re.compile(r"[^\s,;:()]+")


_ELIDED = re.compile(r"…(?:[\s,:;]*…)+")


def redacted(text: str, *, names: Iterable[str] = ()) -> str:
    """``text`` with every token that is not a field name, a word of a reason or one of
    ``names`` (route names, from the configuration) replaced by ``…``:
    ``data.action is 'secret', not 'opened'`` → ``data.action is …, not …``."""
    return _redacted(text, frozenset(names))


# Reasons repeat (one per route and type of Event): each distinct one is redacted once.
@functools.lru_cache(maxsize=4096)
def _redacted(text: str, names: frozenset[str]) -> str:
    def keep(match: re.Match) -> str:
        token = match.group()
        if token.lower() in _REASON_WORDS or token in names or _FIELD.fullmatch(token):
            return token
        return "…"

    return _ELIDED.sub("…", _TOKEN.sub(keep, text))


def log_decided_enabled() -> bool:
    """Whether :func:`log_decided` writes anything (asked once a window, not once an Event)."""
    return logger.isEnabledFor(logging.INFO)


def log_decided(
    outcome: RouteOutcome, generation: str, decided_at: datetime, *, traceparent: str = ""
) -> None:
    """One ``route.decided`` record per decision, with the fields of the route's JSON; reasons
    and errors are :func:`redacted` (the RouteRecord keeps them whole); ``trace_id`` and
    ``span_id`` when the Event carries a W3C ``traceparent``."""
    if not logger.isEnabledFor(logging.INFO):
        return
    decision = outcome.decision
    routes = {decision.route, *(str(refusal.get("route", "")) for refusal in decision.refusals)}
    logger.info(
        "route.decided",
        extra={
            "event": outcome.seq,
            "disposition": outcome.state,
            "decided_at": decided_at.isoformat(),
            "work": decision.work_id,
            "route": decision.route,
            "binding": decision.binding,
            "generation": generation,
            "policy": decision.policy if not decision.error else "failed",
            "reason": redacted(decision.reason, names=routes),
            "route.refusals": [
                {**refusal, "reason": redacted(str(refusal.get("reason", "")), names=routes)}
                for refusal in decision.refusals
            ],
            # The message only, redacted: the stack may quote values (the record keeps both).
            "route.error": redacted(decision.error.message, names=routes) if decision.error else "",
            "route.attempts": decision.error.attempts if decision.error else 0,
            **trace_fields(traceparent),
        },
    )
