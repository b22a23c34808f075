"""The live-update outbox: what open console pages must refresh, recorded by the transaction that
changed it (``infra.live`` writes and reads it; nothing else does)."""

from __future__ import annotations

from django.db import models


class LiveChange(models.Model):
    """One writer's note, committed with its change, that pages showing these groups, Work and
    Events are out of date. Its id is its position in the outbox: a web process reads the rows
    after the last position it read and tells its open pages (``conduit_site.live``)."""

    id = models.BigAutoField(primary_key=True)
    # When the row was written (before its commit): for retention and for how far behind a
    # reader is.
    at = models.DateTimeField(db_index=True)
    # Fixed group names (``console.work``, ``console.events``).
    groups = models.JSONField(default=list)
    # Ids of the Work whose pages changed, and seqs of the Events whose pages changed.
    works = models.JSONField(default=list)
    events = models.JSONField(default=list)

    def __str__(self) -> str:
        return f"live change {self.id}"
