"""Configuration (generations of scopes, bindings, routes and receivers), what receivers refused,
route records, API tokens and impact preview runs."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from causal.models import Event
from worklife.models import Work


class GenerationKind(models.TextChoices):
    APPLIED = "applied", "applied"
    CANDIDATE = "candidate", "candidate"


class Generation(models.Model):
    """One configuration document, stored whole, with its scopes, bindings and routes.

    Applied generations are numbered in order (the newest applied one is live); a
    candidate is stored for trace previews and never routes.
    """

    number = models.PositiveIntegerField(null=True, blank=True, unique=True)
    kind = models.CharField(max_length=16, choices=GenerationKind.choices)
    document = models.TextField()
    digest = models.CharField(max_length=64)
    created_at = models.DateTimeField()
    created_by = models.CharField(max_length=150, blank=True, default="")
    note = models.CharField(max_length=255, blank=True, default="")
    # The scope an Event offered without one takes when its sender gives no default either
    # (the document's ``default_scope``; empty: none).
    default_scope = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind="candidate", number__isnull=True) | Q(kind="applied", number__isnull=False),
                name="generation_number_iff_applied",
            ),
        ]
        # The admin role's (routing.access.roles); the CLI is trusted host access and checks none.
        permissions = [("apply_configuration", "Can apply a configuration")]

    def __str__(self) -> str:
        if self.kind == GenerationKind.APPLIED:
            return f"generation {self.number}"
        return f"candidate {self.pk}"

    @property
    def name(self) -> str:
        """The one name people read: "Generation 2" (applied, by its number) or "Candidate 3"
        (by its id); never both."""
        return str(self).capitalize()

    @property
    def label(self) -> str:
        """What a route record or trace names: the number, or ``candidate``."""
        return str(self.number) if self.kind == GenerationKind.APPLIED else "candidate"


class Scope(models.Model):
    """A scope of one generation, named by its path (``acme/web``); its parent is the path
    without the last segment."""

    # Indexed by scope_generation_path_unique.
    generation = models.ForeignKey(
        Generation, on_delete=models.CASCADE, related_name="scopes", db_index=False
    )
    path = models.CharField(max_length=255)
    # The schedules declared in this scope (routing.schedules), as declared.
    schedules = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["generation", "path"]
        constraints = [
            models.UniqueConstraint(fields=["generation", "path"], name="scope_generation_path_unique"),
        ]

    def __str__(self) -> str:
        return self.path

    @property
    def parent_path(self) -> str | None:
        head, sep, _ = self.path.rpartition("/")
        return head if sep else None


class Binding(models.Model):
    """A named binding declared in a scope: an executor registration and its settings, and
    the optional controls it claims (validated against the implementation, R2)."""

    # Indexed by binding_scope_name_unique.
    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="bindings", db_index=False)
    name = models.CharField(max_length=128)
    executor = models.CharField(max_length=128, blank=True, default="")
    settings = models.JSONField(default=dict, blank=True)
    controls = models.JSONField(default=list, blank=True)
    # Flow control as declared (concurrency, throttle, priority, debounce, batch: worklife.flow).
    flow = models.JSONField(default=dict, blank=True)
    # The retry policy as declared (worklife.retry), null: the defaults.
    retry = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["scope", "name"]
        constraints = [
            models.UniqueConstraint(fields=["scope", "name"], name="binding_scope_name_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.scope.path}:{self.name}"


class Policy(models.TextChoices):
    QUEUE = "queue", "queue"
    INJECT = "inject", "inject"
    INTERRUPT = "interrupt", "interrupt"
    DROP = "drop", "drop"


class Fallback(models.TextChoices):
    QUEUE = "queue", "queue"
    DROP = "drop", "drop"


class Route(models.Model):
    """A route declared in a scope, at ``position`` in the scope's order."""

    # Indexed by route_scope_slot_unique.
    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="routes", db_index=False)
    position = models.PositiveIntegerField()
    slot = models.CharField(max_length=128)
    handler = models.CharField(max_length=128)
    params = models.JSONField(default=dict, blank=True)
    binding = models.CharField(max_length=128, blank=True, default="")
    policy = models.CharField(max_length=16, choices=Policy.choices, default=Policy.QUEUE)
    fallback = models.CharField(max_length=16, choices=Fallback.choices, blank=True, default="")
    start = models.BooleanField(default=True)
    # Raises the priority of the Work its Events arrive at (worklife.flow).
    priority = models.SmallIntegerField(default=0)
    # At most so many Events taken per period, per key; the others dropped (routing.engine.ratelimit).
    rate_limit = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["scope", "position"]
        constraints = [
            models.UniqueConstraint(fields=["scope", "slot"], name="route_scope_slot_unique"),
            models.UniqueConstraint(fields=["scope", "position"], name="route_scope_position_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.scope.path}:{self.slot}"


class Receiver(models.Model):
    """A receiver declared in a generation (``receivers:``): ``POST /hooks/<name>`` verifies
    its sender's deliveries and accepts them as Events in ``scope``. ``secret`` says where the
    secret is (``{"env": NAME}`` or ``{"file": PATH}``), never the secret; ``settings`` holds
    the rest of the declaration (the kind's keys and templates)."""

    # Indexed by receiver_generation_name_unique.
    generation = models.ForeignKey(
        Generation, on_delete=models.CASCADE, related_name="receivers", db_index=False
    )
    name = models.CharField(max_length=64)
    kind = models.CharField(max_length=32)
    scope = models.CharField(max_length=255)
    secret = models.JSONField(default=dict)
    settings = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["generation", "name"]
        constraints = [
            models.UniqueConstraint(fields=["generation", "name"], name="receiver_generation_name_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"


class ReceiverCount(models.Model):
    """How often a receiver refused a delivery for one reason (``signature_invalid``…), or
    answered a handshake (``handshake``: a GitHub ping, a Slack challenge), and the last time.

    Kept by receiver name, across generations; deliveries accepted as Events are not counted
    here (their Events are the record, ``accepted_by`` ``receiver:<name>``)."""

    receiver = models.CharField(max_length=64)
    outcome = models.CharField(max_length=32)
    count = models.PositiveBigIntegerField(default=0)
    first_at = models.DateTimeField()
    last_at = models.DateTimeField()
    last_message = models.CharField(max_length=500, blank=True, default="")

    class Meta:
        ordering = ["receiver", "outcome"]
        constraints = [
            models.UniqueConstraint(
                fields=["receiver", "outcome"], name="receivercount_receiver_outcome_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.receiver}: {self.outcome} × {self.count}"


class Disposition(models.TextChoices):
    """How a route decision settled its Event (the Event's ``route_state`` mirrors it)."""

    ROUTED = "routed", "routed"
    SKIPPED = "skipped", "skipped"
    FAILED = "failed", "failed (dead-lettered)"


# The policy of an operator control's own Event: its RouteRecord is written with the control.
CONTROL_POLICY = "control"


class RouteRecord(models.Model):
    """The one decision about an Event, written with marking it routed (R27).

    ``policy`` is the effective policy (``start``, ``queue``, ``inject``, ``interrupt``,
    ``drop``, ``wake``, ``context``, ``terminal``, ``unmatched``, ``skipped``, ``failed``);
    ``reason`` explains it (``no_match``, ``addressed``, a route error code…).
    """

    event = models.OneToOneField(Event, on_delete=models.PROTECT, related_name="route_record")
    work = models.ForeignKey(  # indexed by routerecord_work_idx
        Work, null=True, blank=True, on_delete=models.PROTECT, related_name="route_records", db_index=False
    )
    scope = models.CharField(max_length=255, blank=True, default="")
    route = models.CharField(max_length=128, blank=True, default="")
    binding = models.CharField(max_length=128, blank=True, default="")
    generation = models.CharField(max_length=32, blank=True, default="")
    policy = models.CharField(max_length=32)
    reason = models.CharField(max_length=500, blank=True, default="")
    disposition = models.CharField(max_length=16, choices=Disposition.choices, default=Disposition.ROUTED)
    refusals = models.JSONField(default=list, blank=True)
    keys = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True, default="")
    attempts = models.PositiveIntegerField(default=0)
    decided_at = models.DateTimeField()
    decided_by = models.CharField(max_length=150, blank=True, default="")

    class Meta:
        ordering = ["-event"]
        # Reading and accepting Events, and the operator controls (R20), each granted on its
        # own (console, API, websocket; the CLI is trusted host access and checks none). Roles
        # and token scopes group them: routing.access.roles.
        permissions = [
            ("skip_event", "Can skip an unrouted Event"),
            ("reroute_event", "Can reroute an Event"),
            ("replay_event", "Can replay a routed Event"),
            ("view_event", "Can read Events, their routes and Work"),
            ("accept_event", "Can accept Events"),
        ]
        indexes = [
            models.Index(fields=["work", "event"], name="routerecord_work_idx"),
            models.Index(fields=["disposition", "event"], name="routerecord_disp_idx"),
            # The home page's trends: decisions per minute by disposition and policy, counted
            # from the index alone.
            models.Index(fields=["decided_at", "disposition", "policy"], name="routerecord_decided_at_idx"),
        ]

    def __str__(self) -> str:
        return f"#{self.event_id}: {self.policy} ({self.reason or '-'})"


class RateLimitTake(models.Model):
    """An Event a route with a rate limit took (started, queued or attached it as input): what
    the limit counts, by its counter's name (``rate_limit:<declaring scope>:<slot>[:<key>]``) and
    the Event's acceptance time (``routing.engine.ratelimit``). Dropped Events are not here."""

    name = models.CharField(max_length=600)
    event_seq = models.BigIntegerField(unique=True)
    accepted_at = models.DateTimeField()

    class Meta:
        indexes = [
            # The router's count: per name, the Events taken within a period before an Event.
            models.Index(fields=["name", "accepted_at", "event_seq"], name="ratelimittake_window_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.name} #{self.event_seq}"


class ApiToken(models.Model):
    """A per-user JSON API token, stored as a SHA-256 digest; the secret is shown once."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=12, db_index=True)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # The scopes (routing.access.roles.TOKEN_SCOPES) the token is narrowed to; null: all of its user's
    # permissions.
    scopes = models.JSONField(null=True, blank=True, default=None)
    # The scope path an Event this token offers without a scope takes (empty: the
    # configuration's default_scope, if any).
    default_scope = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…) for {self.user}"


class ImpactRunStatus(models.TextChoices):
    RUNNING = "running", "running"
    DONE = "done", "done"
    FAILED = "failed", "failed"
    # Stopped between chunks: asked to (its starter cancelled it) or nobody waited for it.
    CANCELLED = "cancelled", "cancelled"


class ImpactRun(models.Model):
    """One impact preview of a candidate, run in the background (routing.setup.impact_runs):
    its progress while it runs, then its roll-up; its changed Events are :class:`ImpactRunChange`
    rows. It outlives its candidate (applied or discarded), so its groups can be replayed after
    Apply."""

    candidate = models.ForeignKey(
        Generation, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    # The candidate's id when the run started (still shown once the candidate is applied).
    candidate_number = models.PositiveBigIntegerField()
    live = models.CharField(max_length=64, blank=True, default="")
    events = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=ImpactRunStatus.choices, default=ImpactRunStatus.RUNNING)
    # Events traced so far (``traced``) of those to look at (``total``): the progress.
    traced = models.PositiveIntegerField(default=0)
    total = models.PositiveIntegerField(default=0)
    examined = models.PositiveIntegerField(default=0)
    # Of the Events looked at, those traced against both configurations (their routes answer
    # otherwise), and those that would route otherwise.
    compared = models.PositiveIntegerField(default=0)
    changed = models.PositiveIntegerField(default=0)
    first_seq = models.BigIntegerField(null=True, blank=True)
    last_seq = models.BigIntegerField(null=True, blank=True)
    # [{"group", "effect", "route", "count"}], largest first: what the changes add up to.
    rollup = models.JSONField(default=list, blank=True)
    seconds = models.FloatField(default=0)
    error = models.TextField(blank=True, default="")
    started_by = models.CharField(max_length=150, blank=True, default="")
    # The API token it was started with (none from the console): its quota is per token too.
    token = models.ForeignKey(
        ApiToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    started_at = models.DateTimeField()
    # The last progress written: a running run not heard of for a while was lost with its process.
    updated_at = models.DateTimeField()
    # The last time someone asked for it (started it, polled it): a run nobody waits for stops.
    waited_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["candidate", "id"], name="impactrun_candidate_idx"),
            # The quotas count the running runs of a login and of a token.
            models.Index(fields=["status", "started_by"], name="impactrun_running_idx"),
        ]

    def __str__(self) -> str:
        return f"impact preview {self.pk} of candidate {self.candidate_number} ({self.status})"


class ImpactRunChange(models.Model):
    """An Event an impact preview found the candidate would route otherwise, with both traces
    (``Outcome.as_dict()``), at its place in the run's list (newest Event first)."""

    run = models.ForeignKey(ImpactRun, on_delete=models.CASCADE, related_name="changes", db_index=False)
    position = models.PositiveIntegerField()
    seq = models.BigIntegerField()
    type = models.CharField(max_length=255)
    scope = models.CharField(max_length=255)
    group = models.CharField(max_length=255)
    # The route the candidate takes (else the live one): the roll-up's second key.
    route = models.CharField(max_length=255, blank=True, default="")
    live = models.JSONField()
    candidate = models.JSONField()

    class Meta:
        ordering = ["run", "position"]
        constraints = [
            models.UniqueConstraint(fields=["run", "position"], name="impactrunchange_run_position_unique")
        ]
        indexes = [models.Index(fields=["run", "group", "route"], name="impactrunchange_group_idx")]

    def __str__(self) -> str:
        return f"#{self.seq}: {self.group}"


class ScheduleState(models.Model):
    """Where a declared schedule (``routing.schedules``) stands, across generations and loops:
    the fire times it has handled and how the last one went. Its row is locked while a loop
    fires it; each fire's Event id is reserved (``schedule/<name>/<time>``), so a fire time is
    accepted at most once whatever the loops do."""

    scope = models.CharField(max_length=255)
    name = models.CharField(max_length=128)
    # Fire times after this one are due (the first time a loop saw the schedule, then the last
    # fire time handled: fired, skipped or missed).
    handled_until = models.DateTimeField()
    last_fire_time = models.DateTimeField(null=True, blank=True)
    last_event = models.ForeignKey(Event, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    last_outcome = models.CharField(max_length=255, blank=True, default="")
    fired = models.PositiveBigIntegerField(default=0)
    skipped = models.PositiveBigIntegerField(default=0)
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["scope", "name"], name="schedulestate_unique")]

    def __str__(self) -> str:
        return f"schedule {self.scope}:{self.name}"
