"""Live updates from the router: after a window commits, open console pages refresh.

The router calls :func:`publish_routed` once per window with the Events it touched and the
Work they went to; the window's transaction records them in the live-update outbox
(``infra.live``), so the pages hear of them once it commits, whichever process routed it, and
never of a window that rolled back. Each web process reads the outbox and tells only the pages
it has open, so a window of any size costs one row here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from infra.live import EVENTS_GROUP, pages_changed_on_commit

logger = logging.getLogger("conduit.routing.live")


def publish_routed(seqs: Iterable[int], work_ids: Iterable[int | None], *, using: str | None = None) -> None:
    """Record, in the current transaction, that these Events were decided (routed, or still
    unrouted with a new reason) and these Work took input: the Events list, the Events' pages
    and the Work's pages refresh once it commits. Temporary (negative) Work ids are left out."""
    seq_list = list(seqs)
    pages_changed_on_commit(
        groups=[EVENTS_GROUP] if seq_list else [],
        works=work_ids,
        events=seq_list,
        **({"using": using} if using else {}),
    )
