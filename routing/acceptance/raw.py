"""An accepted Event's raw envelope: the structured-mode CloudEvent it was accepted from.

Offering this object again (to a trace, or to acceptance) gives the same envelope: extension
attributes sit beside the CloudEvents attributes as they were sent, optional attributes the
Event did not have are left out.
"""

from __future__ import annotations

from typing import Any

from causal.models import Event
from infra.times import timestamp
from routing.acceptance.envelopes import DEFAULT_DATACONTENTTYPE


def raw_envelope(event: Event) -> dict[str, Any]:
    """The structured-mode CloudEvent ``event`` was accepted from (JSON-ready)."""
    envelope: dict[str, Any] = {
        "specversion": event.specversion,
        "id": event.envelope_id,
        "source": event.source,
        "type": event.type,
        "scope": event.scope,
    }
    if event.subject:
        envelope["subject"] = event.subject
    if event.time is not None:
        envelope["time"] = timestamp(event.time)
    if event.datacontenttype and (
        event.datacontenttype_given or event.datacontenttype != DEFAULT_DATACONTENTTYPE
    ):
        envelope["datacontenttype"] = event.datacontenttype
    if event.correlation:
        envelope["correlation"] = list(event.correlation)
    if event.work_id is not None:
        envelope["work_id"] = event.work_id
    if event.execution_id is not None:
        envelope["execution_id"] = event.execution_id
    envelope.update(event.extensions or {})
    if event.binary_data:
        envelope["data_base64"] = event.data
    elif event.data is not None:
        envelope["data"] = event.data
    return envelope
