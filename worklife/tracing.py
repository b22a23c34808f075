"""W3C trace context: the ``traceparent`` a sender put on an Event (a CloudEvents extension,
stored in the Event's ``extensions``) carried into the attempts the Event triggers, so the
sender's trace continues in the Work (``TRACEPARENT`` in a command's environment,
``run.traceparent`` in a Python target).

Only a well-formed value is carried (``version-traceid-parentid-flags``, lowercase hex, as the
W3C Trace Context recommendation writes it): anything else is dropped, never put in a child's
environment."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

EXTENSION = "traceparent"
# version (not ff) - trace id (not all zeros) - parent id (not all zeros) - flags; a later
# version may append fields after a dash.
_TRACEPARENT = re.compile(
    r"(?!ff)[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}(-[0-9a-f-]*)?"
)


def valid_traceparent(value: Any) -> str:
    """``value`` when it is a well-formed ``traceparent``, else ``""``."""
    if isinstance(value, str) and len(value) <= 512 and _TRACEPARENT.fullmatch(value):
        return value
    return ""


def trace_fields(traceparent: Any) -> dict[str, str]:
    """``{"trace_id": …, "span_id": …}`` of a well-formed ``traceparent`` (for log lines about
    the Event that carries it), else ``{}``."""
    value = valid_traceparent(traceparent.strip() if isinstance(traceparent, str) else traceparent)
    if not value:
        return {}
    _, trace_id, span_id, *_ = value.split("-")
    return {"trace_id": trace_id, "span_id": span_id}


def traceparents_of(seqs: Sequence[int]) -> dict[int, str]:
    """The ``traceparent`` of each Event of ``seqs`` that has one, by seq. One query (none for
    no seqs)."""
    if not seqs:
        return {}
    from causal.models import Event

    rows = Event.objects.filter(seq__in=list(seqs), extensions__has_key=EXTENSION).values_list(
        "seq", f"extensions__{EXTENSION}"
    )
    return {seq: value for seq, value in rows if valid_traceparent(value)}


def traceparent_of(extensions: Mapping[str, Any] | None) -> str:
    """The well-formed ``traceparent`` among an Event's extensions, or ``""``."""
    return valid_traceparent((extensions or {}).get(EXTENSION))


def trigger_traceparent(trigger_id: int | None, presented: Sequence[Any]) -> str:
    """The ``traceparent`` of an attempt's triggering Event (``trigger_id``), found among the
    Events it is presented (no query) or else read."""
    if trigger_id is None:
        return ""
    for event in presented:
        if event.seq == trigger_id:
            return traceparent_of(event.extensions)
    from causal.models import Event

    extensions = Event.objects.filter(seq=trigger_id).values_list("extensions", flat=True).first()
    return traceparent_of(extensions)
