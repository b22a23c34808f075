"""The acceptance ledger: Events in acceptance order, their explicit targets, ancestry,
KV namespaces and causal diagnostics.

``causal`` is the lowest app: it knows nothing of Work or routes. Scopes are named by their
path; Work and attempts are named by id (no foreign key crosses upwards).
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from infra.fields import CodePointCharField

# The datacontenttype of an Event whose sender gave none (the CloudEvents JSON format's default).
DEFAULT_DATACONTENTTYPE = "application/json"

# The Events a receiver accepted: their accepted_by is "receiver:<name>" (a user name never
# holds ':'); routing.receivers names them so.
RECEIVER_ACCEPTED = Q(accepted_by__startswith="receiver:")


class RouteState(models.TextChoices):
    """Where an Event stands in routing. Every accepted Event ends in exactly one of the
    settled states, or stays ``unrouted`` with a readable reason."""

    UNROUTED = "unrouted", "unrouted"
    ROUTED = "routed", "routed"
    SKIPPED = "skipped", "skipped"
    FAILED = "failed", "failed (dead-lettered)"


class Event(models.Model):
    """An accepted Event. ``seq`` is its place in the total acceptance order.

    The envelope follows CloudEvents 1.0 (``envelope_id`` is the CloudEvents ``id``: unique
    per ``source``). ``work_id``, ``execution_id`` and the rows of :class:`EventKey` are the
    Event's *explicit* targets, fixed at acceptance: the router knows what an Event targets
    even when its handler fails.
    """

    seq = models.BigAutoField(primary_key=True)
    envelope_id = models.CharField(max_length=512)
    source = models.CharField(max_length=512)
    type = models.CharField(max_length=255)
    subject = models.CharField(max_length=512, blank=True, default="")
    time = models.DateTimeField(null=True, blank=True)
    specversion = models.CharField(max_length=16, default="1.0")
    datacontenttype = models.CharField(max_length=255, blank=True, default=DEFAULT_DATACONTENTTYPE)
    # True: the sender gave ``datacontenttype`` (even the default one), so the Event given back
    # as a CloudEvent carries it as sent (the JSON format keeps every attribute an Event had).
    datacontenttype_given = models.BooleanField(default=False)
    data = models.JSONField(null=True, blank=True)
    # True: ``data`` is binary data as base64 text (CloudEvents ``data_base64``), not JSON.
    binary_data = models.BooleanField(default=False)
    extensions = models.JSONField(default=dict, blank=True)

    # Indexed by event_scope_seq_idx, which also serves the console's scope-subtree filter
    # (infra.queries.starts_with): compared by code point, on PostgreSQL too, where a
    # b-tree of the "C" collation answers LIKE 'prefix%' without an index of its own.
    scope = CodePointCharField(max_length=255)
    correlation = models.JSONField(default=list, blank=True)
    # Indexed by event_work_idx, on the Events that target a Work explicitly.
    work_id = models.BigIntegerField(null=True, blank=True)
    execution_id = models.BigIntegerField(null=True, blank=True)

    # Indexed by event_parent_idx and event_root_seq_idx, on derived Events only (see Meta).
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children", db_index=False
    )
    root = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="descendants", db_index=False
    )
    depth = models.PositiveIntegerField(default=0)

    accepted_at = models.DateTimeField()
    accepted_by = models.CharField(max_length=150, blank=True, default="")

    route_state = models.CharField(max_length=16, choices=RouteState.choices, default=RouteState.UNROUTED)
    routed_at = models.DateTimeField(null=True, blank=True)
    # Why an unrouted Event is still unrouted (a conflicting identity, a retried failure).
    unrouted_reason = models.TextField(blank=True, default="")
    # Retryable route failures back off; the window skips an Event until then (R14).
    retry_at = models.DateTimeField(null=True, blank=True)
    # The earlier unrouted Event this one waits behind (same target, I4): the route loop's
    # window passes over it until that one settles, so a stuck target holds only its own lane.
    waiting_on = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    # A short durable lease so several route loops rarely evaluate the same Event.
    claimed_by = models.CharField(max_length=128, blank=True, default="")
    claimed_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["seq"]
        constraints = [
            # Deduplication: the same (source, id) accepted twice is the same Event.
            models.UniqueConstraint(fields=["source", "envelope_id"], name="event_source_id_unique"),
        ]
        indexes = [
            # The router's window: the oldest unrouted Events.
            models.Index(fields=["seq"], name="event_unrouted_idx", condition=Q(route_state="unrouted")),
            models.Index(fields=["scope", "seq"], name="event_scope_seq_idx"),
            models.Index(fields=["type", "seq"], name="event_type_seq_idx"),
            models.Index(fields=["route_state", "seq"], name="event_state_seq_idx"),
            # The explicit target Work, a derived Event's parent and its root. Partial: most
            # Events have none of them, and a row a partial index does not hold costs it
            # nothing when the Event is written (accepted, then routed: on PostgreSQL routing
            # writes a new row version, which every index holding the row gets an entry for).
            # A lookup (``= x``, ``IN (...)``) implies IS NOT NULL: both databases use them.
            models.Index(fields=["work_id"], name="event_work_idx", condition=Q(work_id__isnull=False)),
            models.Index(fields=["parent"], name="event_parent_idx", condition=Q(parent__isnull=False)),
            models.Index(fields=["root", "seq"], name="event_root_seq_idx", condition=Q(root__isnull=False)),
            # The home page's trends: Events accepted per minute, and the route latency of
            # those routed in a bucket (both columns in the index: no row is read).
            models.Index(fields=["accepted_at"], name="event_accepted_at_idx"),
            models.Index(
                fields=["routed_at", "accepted_at"],
                name="event_routed_latency_idx",
                condition=Q(route_state="routed"),
            ),
            # The Events a receiver accepted (accepted_by "receiver:<name>"), newest first: its
            # last delivery on the Receivers page. Partial: Events of the API and the CLI are not
            # in it. A query repeats the condition (RECEIVER_ACCEPTED) for the index to serve it.
            models.Index(
                fields=["accepted_by", "seq"], name="event_receiver_seq_idx", condition=RECEIVER_ACCEPTED
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.seq} {self.type} ({self.source} {self.envelope_id})"

    @property
    def root_seq(self) -> int:
        """The seq of this Event's root (itself when it is a root)."""
        return self.root_id or self.seq

    @property
    def is_settled(self) -> bool:
        return self.route_state != RouteState.UNROUTED


class EventKey(models.Model):
    """An explicit correlation key of an Event, indexed so that "earlier unrouted input for
    this key" is one indexed query."""

    # Indexed by eventkey_event_key_unique.
    event = models.ForeignKey(Event, on_delete=models.CASCADE, related_name="keys", db_index=False)
    scope = models.CharField(max_length=255)
    key = models.CharField(max_length=512)
    # False: an explicit target from the envelope. True: a key the Event's route decided while
    # the Event itself could not settle yet (it waits behind earlier input, or its identity
    # conflicts); later input with that key then waits behind it too (I3, I4).
    decided = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["event", "key"], name="eventkey_event_key_unique"),
        ]
        indexes = [models.Index(fields=["scope", "key", "event"], name="eventkey_scope_key_idx")]

    def __str__(self) -> str:
        return f"{self.key} <- #{self.event_id}"


class KV(models.Model):
    """A versioned JSON value in a namespace (``core.routing.failures``,
    ``core.causal.pins``, ``core.causal.buckets``, ``core.routing.heartbeats``…)."""

    namespace = models.CharField(max_length=128)
    key = models.CharField(max_length=512)
    value = models.JSONField()
    version = models.PositiveBigIntegerField(default=1)
    updated_at = models.DateTimeField()

    class Meta:
        verbose_name = "KV entry"
        verbose_name_plural = "KV entries"
        constraints = [
            models.UniqueConstraint(fields=["namespace", "key"], name="kv_namespace_key_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}:{self.key}"


class DiagnosticKind(models.TextChoices):
    MISSING_PARENT = "missing_parent", "missing parent"
    DEPTH_EXCEEDED = "depth_exceeded", "depth exceeded"
    RATE_EXCEEDED = "rate_exceeded", "rate exceeded"
    FORGED_PARENT = "forged_parent", "conflicting parent"
    RESERVED_TYPE = "reserved_type", "reserved type"
    RESERVED_ID = "reserved_id", "reserved id"
    CROSS_WORK = "cross_work", "cross-Work identity"
    STALE_LEASE = "stale_lease", "stale lease"


class CausalDiagnostic(models.Model):
    """A durable, redacted record of derived Events the causal limits refused.

    Redacted: ids, types, limits, counts and times only, never payload data. One row counts
    the refusals of one root, kind and UTC minute (``occurrences``, the first at ``at`` with its
    ids, the last at ``last_at``): a Work that is refused in a loop adds to a count instead of
    writing a row each time. ``count`` is the refusal's own figure (the depth, the tokens used).
    """

    kind = models.CharField(max_length=32, choices=DiagnosticKind.choices)
    at = models.DateTimeField()
    root_seq = models.BigIntegerField(null=True, blank=True, db_index=True)
    parent_seq = models.BigIntegerField(null=True, blank=True)
    work_id = models.BigIntegerField(null=True, blank=True)
    attempt_id = models.BigIntegerField(null=True, blank=True)
    source = models.CharField(max_length=512, blank=True, default="")
    type = models.CharField(max_length=255, blank=True, default="")
    envelope_id = models.CharField(max_length=512, blank=True, default="")
    limit = models.PositiveIntegerField(null=True, blank=True)
    count = models.PositiveIntegerField(null=True, blank=True)
    minute = models.DateTimeField(null=True, blank=True)
    detail = models.CharField(max_length=500, blank=True, default="")
    # How many refusals this row counts, and when the last was (see the class docstring).
    occurrences = models.PositiveIntegerField(default=1)
    last_at = models.DateTimeField(null=True, blank=True)
    # "<root seq or ->:<kind>:<YYYY-MM-DDTHH:MM>" (causal.limits.diagnostic_key): the unique
    # constraint its refusals are counted under. NULL on rows written before there was one
    # (NULLs never collide in a unique constraint, on either backend).
    aggregate_key = models.CharField(max_length=96, null=True, blank=True, editable=False)  # noqa: DJ001

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["at"], name="diag_at_idx")]
        constraints = [
            models.UniqueConstraint(fields=["aggregate_key"], name="diag_aggregate_key_unique"),
        ]

    def __str__(self) -> str:
        times = f" ×{self.occurrences}" if self.occurrences != 1 else ""
        return f"{self.kind}{times} at {self.at:%Y-%m-%d %H:%M:%S} (root #{self.root_seq})"
